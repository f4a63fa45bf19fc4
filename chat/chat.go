// Package chat defines what a chat front end needs from the broker and
// renders a turn's progress as chat text; package chat/thread serves a
// platform's conversations, and the platforms live in subpackages.
package chat

import (
	"context"
	"time"

	"acpbroker/adapter"
)

// Engine is the turn engine as a chat platform uses it.
type Engine interface {
	Submit(thread string, p *adapter.Prompt) error
	Cancel(thread string, cause error) bool
	Reset(thread string, cause error)
	Status(thread string) adapter.ThreadStatus
	// Options is what the thread's agent offers to be chosen and run;
	// SetOption and SetMode change it (see adapter.Engine).
	Options(thread string) adapter.ThreadOptions
	SetOption(ctx context.Context, thread, id, value string) (adapter.ThreadOptions, error)
	SetMode(ctx context.Context, thread, mode string) (adapter.ThreadOptions, error)
}

// QueueEngine is an Engine whose threads' waiting prompts a platform may
// show and act on: Waiting lists them, SendNow sends one next,
// interrupting the running turn, Withdraw takes one out (see
// adapter.Engine). A platform offers Send now and the queue with it.
type QueueEngine interface {
	Engine
	Waiting(thread string) []adapter.Waiting
	SendNow(thread string, p *adapter.Prompt, by string) error
	Withdraw(thread string, p *adapter.Prompt, cause error) error
}

// SessionEngine is an Engine whose threads' agent sessions a platform
// may list and take further: Sessions lists those a thread may take up,
// Resume takes one up, CanFork says why a thread cannot be forked, and
// Fork starts a thread from another's session (see adapter.Engine).
type SessionEngine interface {
	Engine
	Sessions(ctx context.Context, thread string) (adapter.SessionList, error)
	Resume(ctx context.Context, thread, id string) (adapter.Resumed, error)
	CanFork(ctx context.Context, thread string) error
	Fork(ctx context.Context, parent, child string) (adapter.Forked, error)
}

var (
	_ QueueEngine   = (*adapter.Engine)(nil)
	_ SessionEngine = (*adapter.Engine)(nil)
)

// Platform is a chat front end. Run serves conversations until ctx ends or
// the platform's input is exhausted; once it returns no new prompt is
// submitted. Close, called after the engine has ended every turn, gives
// the platform up to grace to show those turns' last words, disconnects,
// and returns when the platform's goroutines are gone.
type Platform interface {
	// Report tells each thread of a turn the broker was working on when
	// it last stopped; reported is called for each thread told. The
	// platform does it once connected, before or during Run.
	Report(turns []Interruption, reported func(id uint64))
	Run(ctx context.Context) error
	// Ready is closed once the platform takes messages.
	Ready() <-chan struct{}
	// Healthy reports why the platform cannot serve, or nil.
	Healthy() error
	Close(grace time.Duration) error
}

// Interruption is a turn that was queued or running when the broker
// stopped, and never finished.
type Interruption struct {
	ID     uint64
	Thread string
	// Ref and Title are the prompt's, as the platform submitted them.
	Ref, Title string
	Queued     time.Time
	// Ended is how the turn ended ("done", "failed: …", "cancelled: …")
	// when it did end but the broker stopped before the thread showed it;
	// empty when it never finished.
	Ended string
	// Outcome is the bare final state of such a turn ("done", "failed",
	// "cancelled"), for the platform to find what the thread already
	// shows; empty when it never finished.
	Outcome string
	// Elsewhere names the messages known to show how the thread's earlier
	// turns ended (the platform's references, as the Sink gave them to
	// Outcome.Shown): none of them is this turn's.
	Elsewhere []string
}

// AgentInfo describes one agent profile for people choosing one: its
// name and line of description, whether new threads get it by default,
// and how many of its agents run (Live), work (Busy) and may run (Max, 0:
// only the broker's bound).
type AgentInfo struct {
	Name, Description string
	Default           bool
	Live, Busy, Max   int
	// Removed: the profile is no longer configured; its agents run until
	// they stop, and it is not offered to new threads.
	Removed bool
}

// InterruptionText says what happened to an interrupted turn, in words.
func InterruptionText(it Interruption) string {
	what := "your message"
	if it.Title != "" {
		what = "your message “" + it.Title + "”"
	}
	sent := " (sent " + it.Queued.Local().Format("Jan 2 15:04") + ")"
	if it.Ended != "" {
		return "The broker restarted before it could show how " + what + sent + " ended: " + it.Ended + ". What the agent answered is not shown here; send it again if you need it."
	}
	return "The broker restarted while working on " + what + sent + ". It did not finish; please send it again."
}
