// Package console is a chat platform on a terminal: the conversations of
// one local user on stdin/stdout, served by a thread.Server as Discord's
// and Slack's are. Each line typed is a message in the conversation, or
// a command; what the Server posts is printed, and what it edits is
// printed again where it changed. A message's buttons are numbered: a
// number typed clicks the newest message's button of that number.
package console

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"sync"
	"syscall"
	"time"

	"acpbroker/adapter"
	"acpbroker/chat"
	"acpbroker/chat/thread"

	"github.com/rs/zerolog"
)

// Thread is the id of the console's first conversation; /new and /fork
// open others, "console-" and a number.
const Thread = "console"

// Channel is the console's one channel, which all its conversations are
// in.
const Channel = "terminal"

// Config configures a Console.
type Config struct {
	Engine chat.Engine
	In     io.Reader
	Out    io.Writer
	// User names whoever types at this terminal, for the audit trail and
	// the thread's messages (default: the name of the system user
	// running the broker). They may act on every conversation.
	User         string
	ShowThoughts bool
	// Agents lists the agent profiles for /new and /agents (nil: one).
	Agents func() []chat.AgentInfo
	// Memory, if set, keeps the conversations' records across restarts.
	Memory thread.Memory
	Logger zerolog.Logger
}

// Console serves the conversations typed at one terminal. Each line is
// the current conversation's next message, except a command (a line
// starting with "/", read as thread.Commands and the console's own /help
// and /quit say), which works even while a question is open; a number
// while a message shows buttons, which clicks one; and a line while a
// form is being filled in, which answers its field.
type Console struct {
	cfg  Config
	srv  *thread.Server
	user thread.User

	mu      sync.Mutex
	term    term
	current string // the conversation typed lines go to
	seq     uint64 // numbers the messages, typed and posted
	// msgs are the last maxMessages messages printed, by id, which the
	// Server may edit, mark or click through; order is their ids, oldest
	// first.
	msgs  map[string]*message
	order []string
	// choices is the newest message showing buttons ("": none): a number
	// typed clicks one of them.
	choices string
	form    *filling // the form being filled in, if any
	opening *reply   // the /new or /fork whose conversation the next lines wait for
	// pending are the prompts whose turns have not ended: a typed
	// prompt until it is marked with its end, and any message marked
	// queued or working (a command's that ran a turn) until then.
	pending map[string]bool
	settled chan struct{} // closed and replaced when pending empties
}

// maxMessages bounds the messages a Console remembers: an edit of one
// forgotten is printed whole, as a new one.
const maxMessages = 256

var (
	_ chat.Platform   = (*Console)(nil)
	_ thread.Platform = (*platform)(nil)
	_ thread.Renamer  = (*platform)(nil)
)

// New returns a Console of cfg's terminal. It takes no input until Run.
func New(cfg Config) *Console {
	name := cfg.User
	if name == "" {
		name = localUser()
	}
	// The audit trail names who answered at the terminal as before: the
	// system user, a local user.
	c := &Console{cfg: cfg, user: thread.User{ID: name, Name: name, Handle: "local user"}, current: Thread,
		msgs: map[string]*message{}, pending: map[string]bool{}, settled: make(chan struct{})}
	c.term.out = cfg.Out
	c.srv = thread.New(thread.Config{
		Limits: thread.Limits{Name: "the console", MessageRunes: messageRunes, Burst: 100, Window: time.Second,
			Files: 10, FilesBytes: 64 << 20, InlineDiff: 64 << 10, Buttons: 25, Menus: 4, MenuOptions: 100,
			FormFields: 100, FieldRunes: 64 << 10, WholeForms: true, LinkRunes: 4096},
		Access: thread.Access{AllowedChannels: []string{Channel}, AllowedUsers: []string{name}, Approvers: []string{name},
			ShowThoughts: cfg.ShowThoughts},
		EditInterval: editInterval,
		MaxMessages:  maxPieces,
		Memory:       cfg.Memory,
		Agents:       cfg.Agents,
		Logger:       cfg.Logger,
	}, (*platform)(c), cfg.Engine)
	return c
}

// How the Server shows an answer on the console: in messages of
// messageRunes characters, at most maxPieces of them (the rest printed
// from the file that carries it whole when the turn ends), edited at
// most every editInterval while it streams.
const (
	messageRunes = 4000
	maxPieces    = 16
	editInterval = 150 * time.Millisecond
)

// Threads is the Server of the console's conversations.
func (c *Console) Threads() *thread.Server { return c.srv }

// Conversation says in which channel one of the console's conversations
// is and who started it (see thread.Server.Conversation).
func (c *Console) Conversation(thread string) (channel, starter string, ok bool) {
	return c.srv.Conversation(thread)
}

// localUser names the system user running the broker.
func localUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "uid " + strconv.Itoa(os.Getuid())
}

// Run reads lines until EOF or ctx ends. At EOF it waits (while ctx
// lasts) for the turns already submitted to end, cancelling one whose
// question nobody can answer any more; when ctx ends it returns at once
// and Close waits.
func (c *Console) Run(ctx context.Context) error {
	lines := make(chan string)
	readErr := make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		// A read of stdin cannot be interrupted: this goroutine ends at
		// EOF, or at the next line once Run has returned.
		sc := bufio.NewScanner(c.cfg.In)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-stop:
				return
			}
		}
		readErr <- sc.Err()
		close(lines)
	}()
	c.srv.Accept(true)
	c.printf("Type a message for the agent; /help lists the commands.\n")
	for {
		select {
		case <-ctx.Done():
			return nil
		case line, ok := <-lines:
			c.mu.Lock()
			c.term.entered() // the user's Enter ended the line
			c.mu.Unlock()
			if !ok {
				c.inputEnded()
				c.waitTurns(ctx.Done())
				if err := <-readErr; !errors.Is(err, syscall.EIO) {
					return err
				}
				return nil // a terminal that hung up: its input ended
			}
			if c.line(ctx, line) {
				c.waitTurns(ctx.Done())
				return nil
			}
		}
	}
}

// inputEnded cancels the turn of a question still open when the input
// ends, nobody being left to answer it: the current conversation's, and
// that of the newest message showing buttons. Other turns go on.
func (c *Console) inputEnded() {
	st := c.srv.Stats()
	c.mu.Lock()
	asking := st.OpenPermissions+st.OpenQuestions > 0 || c.form != nil
	threads := []string{c.current}
	if m := c.msgs[c.choices]; m != nil && m.where != c.current {
		threads = append(threads, m.where)
	}
	c.form = nil
	c.mu.Unlock()
	if !asking {
		return
	}
	for _, t := range threads {
		c.cfg.Engine.Cancel(t, adapter.CancelledBy("the end of the console's input"))
	}
}

// waitTurns waits for the submitted turns to end, or for stop.
func (c *Console) waitTurns(stop <-chan struct{}) bool {
	for {
		c.mu.Lock()
		n, settled := len(c.pending), c.settled
		c.mu.Unlock()
		if n == 0 {
			return true
		}
		select {
		case <-settled:
		case <-stop:
			return false
		}
	}
}

// track records whether message id's turn is still to end, and wakes
// waitTurns when none is.
func (c *Console) trackLocked(id string, pending bool) {
	if pending {
		if len(c.pending) < maxMessages {
			c.pending[id] = true
		}
		return
	}
	if !c.pending[id] {
		return
	}
	delete(c.pending, id)
	if len(c.pending) == 0 {
		close(c.settled)
		c.settled = make(chan struct{})
	}
}

var ready = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Ready implements chat.Platform: a terminal is ready at once.
func (c *Console) Ready() <-chan struct{} { return ready }

// Healthy implements chat.Platform.
func (c *Console) Healthy() error { return nil }

// Report implements chat.Platform: each interrupted turn is told in its
// conversation (see thread.Server.Report).
func (c *Console) Report(turns []chat.Interruption, reported func(uint64)) {
	c.srv.Report(ready, turns, reported)
}

// Close implements chat.Platform: it waits up to grace for the last turns
// to print their outcome.
func (c *Console) Close(grace time.Duration) error {
	c.srv.Close(grace)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.term.lineBreak()
	return nil
}

func (c *Console) printf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.term.write(fmt.Sprintf(format, args...))
}

// nextIDLocked numbers a new message.
func (c *Console) nextIDLocked() string {
	c.seq++
	return strconv.FormatUint(c.seq, 10)
}

// say hands line to the Server as the current conversation's next
// message.
func (c *Console) say(text string) {
	c.mu.Lock()
	id, where := c.nextIDLocked(), c.current
	c.trackLocked(id, true)
	c.mu.Unlock()
	c.srv.Message(thread.Message{Where: where, ID: id, Ref: ref(where, id), From: c.user, Text: text})
}

// ref names message id of where for the journal.
func ref(where, id string) string { return where + "/" + id }
