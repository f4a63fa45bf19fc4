package adapter

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Causes a turn can fail with. Each reads as words for the user; callers
// branch with errors.Is.
var (
	ErrCancelled      = errors.New("cancelled")
	ErrTimeout        = errors.New("timed out")
	ErrAgentExited    = errors.New("agent exited")
	ErrAgentUnhealthy = errors.New("agent stopped responding")
	ErrShutdown       = errors.New("broker shutting down")
	ErrQueueFull      = errors.New("too many messages waiting in this thread; try again when the current turn ends")
	// ErrInterrupted: the turn was interrupted for a message sent in its
	// place; such a cause is ErrCancelled too (see InterruptedBy).
	ErrInterrupted = errors.New("interrupted")
	// ErrNotWaiting: the message is not waiting in the thread's queue
	// (any more): it runs, ran, or was removed.
	ErrNotWaiting = errors.New("that message is no longer waiting")
	ErrNoSlot     = errors.New("no agent slot became free")
	ErrAgentStart = errors.New("agent could not be started")
	ErrOverflow   = errors.New("agent sent updates faster than they could be shown")
	ErrAgentError = errors.New("agent returned an error")
	ErrToolStuck  = errors.New("a tool call made no progress")
	// ErrProfileGone: the thread's agent profile was removed from the
	// configuration, and the thread needs a new agent.
	ErrProfileGone = errors.New("agent profile no longer configured")
	// ErrNoProfile: the prompt asked for an agent profile that is not
	// configured, or none is the default.
	ErrNoProfile = errors.New("no such agent profile")
)

// profileError says in words what is wrong with a thread's agent profile,
// and unwraps to ErrProfileGone or ErrNoProfile.
type profileError struct {
	kind error
	name string
}

func (e *profileError) Error() string {
	switch {
	case e.kind == ErrProfileGone:
		return fmt.Sprintf("the agent profile %q this thread uses is no longer configured; start a new thread", e.name)
	case e.name == "":
		return "no default agent profile is configured"
	default:
		return fmt.Sprintf("there is no agent profile %q", e.name)
	}
}

func (e *profileError) Unwrap() error { return e.kind }

// queueFull is ErrQueueFull with the bound that was hit.
type queueFull struct{ size int }

func (e *queueFull) Error() string {
	return fmt.Sprintf("%d messages are already waiting in this thread, the most it keeps (turn.queue_size)", e.size)
}

func (e *queueFull) Unwrap() error { return ErrQueueFull }

// QueueBound is the bound a queue-full error says was hit (0 if err is
// none).
func QueueBound(err error) int {
	if q, ok := errors.AsType[*queueFull](err); ok {
		return q.size
	}
	return 0
}

// cancelledBecause is a cancel's cause in words that need not begin
// with "cancelled": it is ErrCancelled, and kind when set.
type cancelledBecause struct {
	text string
	kind error
}

func (e *cancelledBecause) Error() string { return e.text }

func (e *cancelledBecause) Unwrap() []error {
	if e.kind == nil {
		return []error{ErrCancelled}
	}
	return []error{e.kind, ErrCancelled}
}

// InterruptedBy is the cause of a turn interrupted by who for a message
// that says text: "interrupted by Alice: not that file, the other one"
// (the text cut to 80 characters). It is ErrInterrupted and
// ErrCancelled.
func InterruptedBy(who, text string) error {
	msg := "interrupted"
	if who != "" {
		msg += " by " + who
	}
	if e := excerpt(text, 80); e != "" {
		msg += ": " + e
	}
	return &cancelledBecause{text: msg, kind: ErrInterrupted}
}

// RemovedBy is the cause of a waiting message removed from its thread's
// queue by who. It is ErrCancelled.
func RemovedBy(who string) error {
	if who == "" {
		return &cancelledBecause{text: "removed from the queue"}
	}
	return &cancelledBecause{text: "removed from the queue by " + who}
}

// excerpt collapses whitespace and cuts s to at most n runes.
func excerpt(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	return s
}

// CancelledBy is the cause of a user's cancel.
func CancelledBy(who string) error {
	if who == "" {
		return ErrCancelled
	}
	return fmt.Errorf("%w by %s", ErrCancelled, who)
}

func timedOut(d time.Duration) error {
	return fmt.Errorf("%w after %s", ErrTimeout, shortDuration(d))
}

// shortDuration prints 30m rather than 30m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	for _, suffix := range []string{"m0s", "h0m"} {
		if len(s) > len(suffix) && s[len(s)-len(suffix):] == suffix {
			s = s[:len(s)-len(suffix)+1]
		}
	}
	return s
}
