package thread

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Platform is a chat platform as the Server drives it: it posts, edits
// and marks messages, opens threads, and tells what the Server asks
// about its threads. It renders what the Server says (a View's text in
// the broker's Markdown, its actions) in its own terms and delivers it.
//
// Every method may be called from any goroutine, concurrently, and
// returns once ctx ends. A method makes one call to the platform (or
// several that are one step to it): a rate limit it did not wait out is
// returned as a *RateLimited, which the Server waits out and tries
// again as its callers need; a message, channel or thread that does not
// exist is an error that matches ErrNotFound. The Server logs other
// errors and carries on.
//
// Names (where, id, thread, channel) are the platform's own, opaque to
// the Server: where is a thread or a channel, id a message in it. A
// conversation's thread name is the engine's thread key and the where
// of every message in it.
type Platform interface {
	// Post posts v in where (a thread, or a channel for a reply to a
	// message there) and returns the message's id. Nobody is notified
	// by what it says (a user named <@id> is shown, not pinged), where
	// the platform allows.
	Post(ctx context.Context, where string, v View) (id string, err error)
	// Edit makes message id in where show v: its text and its actions
	// (a View without actions leaves the message none); v's files are
	// added to those it carries. v.ReplyTo is not used.
	Edit(ctx context.Context, where, id string, v View) error
	// Delete deletes the bot's message id in where.
	Delete(ctx context.Context, where, id string) error
	// Mark puts the bot's status mark m on message id in where (on), or
	// takes it off (!on). A platform that queues its marks (Discord
	// takes one per 250ms in a channel) waits in that queue within ctx.
	Mark(ctx context.Context, where, id string, m Mark, on bool) error
	// Marks are the bot's status marks on message id in where.
	Marks(ctx context.Context, where, id string) ([]Mark, error)

	// OpenThread opens a thread from message id in channel, named name
	// (a platform whose threads have no name of their own ignores it),
	// and returns the thread's name: Message.Opens of that message.
	OpenThread(ctx context.Context, channel, id, name string) (thread string, err error)
	// Thread reports whether where is a thread the bot opened (one the
	// Server served before it restarted, or forgot): the channel it is
	// in, or an error (ErrNotFound when it is none of the bot's). The
	// Server asks it of every message or command in a thread or channel
	// it does not know: a platform keeps it cheap (Discord answers from
	// the gateway's cache).
	Thread(ctx context.Context, where string) (channel string, err error)
	// Starter is the user who started thread in channel: who wrote the
	// message it was opened from. ErrNotFound when that message is gone
	// (only approvers may act on the thread then); another error may
	// pass, and the Server asks again later.
	Starter(ctx context.Context, channel, thread string) (user string, err error)
	// History is what the thread shows after its message after: up to
	// 100 messages, oldest first. The Server reads it at a start, to
	// tell whether a turn an earlier process ended is shown there.
	History(ctx context.Context, thread, after string) ([]Past, error)
	// Locate reads a message's Ref (as Message.Ref gave it, kept in the
	// journal) back into where it is and its id, and a link to it for
	// people ("" if there is none); ok false if ref is not one.
	Locate(ref string) (where, id, link string, ok bool)

	// Download fetches a file a user attached. It need read no more
	// than limit+1 bytes: the Server refuses a file of more than limit.
	Download(ctx context.Context, f Attachment, limit int64) ([]byte, error)
	// Usage spells a command for texts that tell people how to use it,
	// with the arguments given (an empty Value stands for one to fill
	// in): Discord's "/config option:mode value:", a platform of text
	// commands "@bot config mode <value>".
	Usage(command string, args ...Arg) string
}

// The Server uses what a platform can do beside Platform, when it can.
type (
	// Typer shows that the bot is writing in a thread, for a while
	// (Discord: 10 seconds); the Server renews it every
	// Config.TypingInterval while a turn works.
	Typer interface {
		Typing(ctx context.Context, thread string) error
	}
	// Renamer renames a thread after the agent's title for its session.
	// A rename the platform's limit puts off returns a *RateLimited (its
	// After may be 0: the Server then waits Config.RetitleInterval).
	Renamer interface {
		Rename(ctx context.Context, thread, title string) error
	}
	// Whisperer shows v to user alone, in where (Slack's
	// chat.postEphemeral). The Server answers a written command's private
	// answers so; without it, they are replies in the thread.
	Whisperer interface {
		Whisper(ctx context.Context, where, user string, v View) error
	}
	// Linker names one of the bot's threads in a View's text as a link
	// people can follow (Discord: <#id>); "" where it has none. Without
	// it, the Server names a thread in words ("a new thread of this
	// channel").
	Linker interface {
		ThreadLink(thread string) string
	}
)

// ErrNotFound is what a Platform's error matches when the message,
// channel or thread it names does not exist.
var ErrNotFound = errors.New("not found")

// RateLimited is a Platform's error when the platform refused a call for
// its rate limit: After is how long it asks to wait (0: it did not say).
type RateLimited struct {
	After time.Duration
	Err   error
}

func (e *RateLimited) Error() string {
	if e.Err != nil {
		return e.Err.Error()
	}
	return fmt.Sprintf("rate limited for %s", e.After)
}

func (e *RateLimited) Unwrap() error { return e.Err }

// Limits are a platform's bounds: what its messages hold and how fast
// they may come. The numbers in parentheses are Discord's.
type Limits struct {
	// Name names the platform in texts ("can't be shown in Discord").
	Name string
	// MessageRunes is the most characters of a message's text (2,000).
	// An answer's messages keep 50 under it, for a code block closed at
	// a cut.
	MessageRunes int
	// Burst and Window bound the message calls (posts, edits) of one
	// answer: at most Burst in any Window (5 in 5s). The final view goes
	// out as soon as they allow; streaming edits keep the pace of
	// Config.EditInterval too.
	Burst  int
	Window time.Duration
	// Files and FilesBytes bound the files one message carries: how
	// many, and their bytes together (10, 10 MiB).
	Files      int
	FilesBytes int64
	// InlineDiff is the most characters of a diff shown in an answer
	// (1,500); a longer one is attached.
	InlineDiff int
	// Buttons is the most buttons of one message (25): a permission
	// request shows its first options.
	Buttons int
	// Menus is the most select menus one message holds beside its row of
	// buttons (4), MenuOptions the most options of one (25).
	Menus, MenuOptions int
	// FormFields is the most text fields one form holds (5; 0: the
	// platform has no forms, and a question with text fields is
	// declined), FieldRunes the most characters of one's value (4,000).
	FormFields, FieldRunes int
	// WholeForms: the platform's form holds every kind of field (text,
	// numbers, choices, yes or no), and its submission answers the
	// agent's question (Slack's modal). A question is then one button
	// that opens its form, and Decline; FormFields bounds all its fields.
	WholeForms bool
	// LinkRunes is the most characters of a link button's URL (512).
	LinkRunes int
}

// Mark is a status mark the bot puts on a message (a reaction), or the
// one a user puts to stop a turn.
type Mark int

// The marks, with Discord's emoji.
const (
	MarkQueued    Mark = iota + 1 // ⏳ the prompt waits behind another turn
	MarkWorking                   // ⚙️ the agent works on it
	MarkDone                      // ✅ its turn ended with an answer
	MarkFailed                    // ❌ its turn failed, or it was refused
	MarkCancelled                 // ⏹️ its turn was cancelled
	MarkRefused                   // 🚫 its author may not use the bot
	MarkLost                      // ⚠️ its answer could not be shown
	MarkStop                      // 🛑 a user's: stop the thread's turn
)

var markNames = [...]string{"", "queued", "working", "done", "failed", "cancelled", "refused", "lost", "stop"}

func (m Mark) String() string {
	if m > 0 && int(m) < len(markNames) {
		return markNames[m]
	}
	return fmt.Sprintf("mark(%d)", int(m))
}

// View is what a message shows. Text is in the broker's Markdown:
// CommonMark as Discord reads it (**bold**, *italic*, ~~struck~~,
// `code`, ``` blocks, > quotes), a line starting "-# " in small print,
// and <@ID> naming a user; the platform converts it to its own markup.
// Text is at most Limits.MessageRunes characters.
type View struct {
	Text string
	// Actions are shown under the text, in order: the platform lays
	// them out (Discord: a select menu a row of its own, buttons five to
	// a row), within Limits.Buttons and Limits.Menus.
	Actions []Action
	// Files go with the message, within Limits.Files and FilesBytes.
	Files []File
	// ReplyTo, for Post, is a message in where that this one answers.
	ReplyTo string
	// NoPreview: links in the text are not unfurled.
	NoPreview bool
	// Outcome: the message's last line says how a turn ended. A platform
	// that can keep a mark with a message may keep this, to tell it in
	// Past.Outcome.
	Outcome bool
}

// Action is a button, a link button or a select menu under a message.
type Action struct {
	// ID comes back in Click.Action when it is used (none for a link).
	ID    string
	Label string
	Style Style
	// URL makes a link button: the platform opens it for the user, and
	// nothing reaches the Server.
	URL string
	// Menu makes a select menu, whose choice comes back in
	// Click.Values; Label is then unused.
	Menu *Menu
}

// Style is a button's colour, by what it does.
type Style int

const (
	Secondary Style = iota // neutral
	Primary                // the way on
	Success                // allow, done, submit
	Danger                 // reject, decline
)

// Menu is a select menu: between Min and Max of its options are chosen.
type Menu struct {
	Placeholder string
	Options     []Option
	Min, Max    int
}

// Option is one choice of a Menu: Value comes back when it is chosen.
type Option struct {
	Label, Value string
	Default      bool // shown chosen
}

// File is a file sent with a message.
type File struct {
	Name, Type string // its name and content type
	Data       string
}

// Form is what a platform with forms (Limits.FormFields) opens for one
// user at a click (Discord, Slack: a modal): fields to fill in, text
// alone unless Limits.WholeForms. Its answer comes back as a FormAnswer
// with ID.
type Form struct {
	ID, Title string
	Fields    []Field
}

// FieldKind is what a Field asks for. A platform without
// Limits.WholeForms is given FieldText and FieldNumber alone, and may
// ask both as text.
type FieldKind int

const (
	FieldText    FieldKind = iota
	FieldNumber            // a number (Decimal: not only a whole one)
	FieldChoice            // one of Options
	FieldChoices           // from Min to Max of Options
	FieldYesNo             // Options "true" (Yes) or "false" (No)
)

// Field is one field of a Form.
type Field struct {
	ID, Label, Placeholder string
	Kind                   FieldKind
	// Value is what a text or number field shows filled in; what is
	// sent back is what it shows, so it is never cut.
	Value     string
	Required  bool
	Multiline bool
	Decimal   bool
	// MinRunes and MaxRunes bound a text value (0: no bound).
	MinRunes, MaxRunes int
	// Options are a choice's (Default: shown chosen); Min and Max bound
	// how many of them FieldChoices takes.
	Options  []Option
	Min, Max int
}

// Arg is an argument of a command as Platform.Usage spells it.
type Arg struct{ Name, Value string }

// Past is a message a thread shows, as Platform.History tells it.
type Past struct {
	ID string
	// At is when it was posted.
	At time.Time
	// Mine: the bot posted it.
	Mine bool
	// Outcome: its last line says how a turn ended (see ShowsOutcome;
	// View.Outcome).
	Outcome bool
}
