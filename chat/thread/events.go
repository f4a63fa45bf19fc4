package thread

import "context"

// What a platform hands the Server: what people do where the bot is.
// The platform leaves out what the bot itself did, and what it cannot
// read; everything else the Server judges (who may, where).

// User is who did something.
type User struct {
	ID string
	// Name is the name shown to people (Discord's global name); Handle
	// the unique one, kept in the audit trail. Either may be empty.
	Name, Handle string
	// Roles are the groups the user is in, as the access lists name
	// them: Discord's roles, Slack's user groups.
	Roles []string
	// Bot: the user is a bot (its messages count only when
	// Access.AllowedBots lists it).
	Bot bool
}

// display is the name shown for u, never empty.
func (u User) display() string {
	switch {
	case u.Name != "":
		return u.Name
	case u.Handle != "":
		return u.Handle
	}
	return "<@" + u.ID + ">"
}

// handle is u's unique name for the audit trail, else the name shown.
func (u User) handle() string {
	if u.Handle != "" {
		return u.Handle
	}
	return u.display()
}

// Message is a message someone posted where the bot can see it.
type Message struct {
	// Where is the thread or channel it is in; ID its id there.
	Where, ID string
	// Ref is the platform's full name for it, kept in the journal for a
	// report after a restart (Platform.Locate reads it back).
	Ref  string
	From User
	// Text is what it says, the mentions of the bot taken out, trimmed.
	Text string
	// Mentioned: it mentions the bot. Addressed: it begins with that
	// mention, so it may be a text command ("@bot cancel").
	Mentioned, Addressed bool
	// Opens is the thread a conversation opened from it would be
	// (Discord: a thread has the id of the message it was opened from;
	// Slack: its channel and ts).
	Opens string
	Files []Attachment
}

// Attachment is a file attached to a Message: Platform.Download fetches
// it.
type Attachment struct {
	Name, Type string // its name and content type, as the platform says
	Size       int64  // as the platform says
	URL        string
	// Refused, if set, says why the platform will not fetch it (a
	// clause: "it is not on Slack's file host"): the message goes on
	// without it, and its author is told.
	Refused string
}

// Reaction is a user's mark on a message.
type Reaction struct {
	// Threads are the conversations the message may be of, the first
	// the Server knows being it (Discord: the channel, then the message
	// id, which a thread opened from it shares).
	Threads []string
	From    User
	// Mark is the mark put: the Server acts on MarkStop alone.
	Mark Mark
}

// Click is the use of a button or a select menu of a View.
type Click struct {
	Where string
	// Action is the Action's ID; Values the options chosen in a menu.
	Action string
	Values []string
	From   User
	Reply  Reply
}

// FormAnswer is a Form a user filled in and sent.
type FormAnswer struct {
	Form   string            // the Form's ID
	Values map[string]string // by Field ID: what a text or number field holds
	// Choices are the Options' values chosen, by Field ID, for a
	// choice, choices, or yes or no (none chosen: absent or empty).
	Choices map[string][]string
	From    User
	Reply   Reply
}

// FormErrors is a Reply to a FormAnswer that can show what is wrong
// with it in the form itself, by Field ID, the form kept open (Slack's
// response_action errors). Invalid reports whether it could; if not,
// the Server tells the user in words.
type FormErrors interface {
	Invalid(ctx context.Context, problems map[string]string) bool
}

// Command is a command a user gave, as a slash command or written to the
// bot in a thread ("@bot model opus"; the Server reads those itself).
type Command struct {
	// Name is one of Commands'; Args its parameters' values by name,
	// trimmed, absent or "" when not given.
	Name  string
	Args  map[string]string
	Where string
	From  User
	Reply Reply
}

// Reply answers one Click, FormAnswer or Command. The Server answers
// each once, on a goroutine of its own: by Private, Public, Update, Ack
// or Form, or by Defer and then Public; Posted may follow Public. Before
// the first of these it asks the engine only what the engine answers at
// once (Cancel, Status, Options); what waits for the agent (a change of
// option) comes after Defer. A platform that must acknowledge an event
// within a deadline does so itself, or in the first of these.
type Reply interface {
	// Private shows v to the user alone (its actions, a menu to choose
	// from, come back as a Click).
	Private(ctx context.Context, v View)
	// Public shows text to everyone where the event came from (after
	// Defer, as the answer deferred).
	Public(ctx context.Context, text string)
	// Posted is the message that shows what Public said (for a command
	// written in a thread, that message itself), for the turn the
	// command runs to show its status on.
	Posted(ctx context.Context) (Origin, error)
	// Update makes the message clicked show v instead (a Click's).
	Update(ctx context.Context, v View)
	// Ack takes the event with nothing to show (a choice in a menu).
	Ack(ctx context.Context)
	// Defer says the answer will take a while; Public gives it.
	Defer(ctx context.Context)
	// Form opens f for the user (a Click's, on a platform with forms).
	Form(ctx context.Context, f Form)
}

// Origin is a message a turn shows its status on: the prompt, or the
// answer to the command that ran it.
type Origin struct {
	Where, ID string
	Ref       string // as Message.Ref
}
