package adapter

import (
	"errors"
	"fmt"
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
	ErrNoSlot         = errors.New("no agent slot became free")
	ErrAgentStart     = errors.New("agent could not be started")
	ErrOverflow       = errors.New("agent sent updates faster than they could be shown")
	ErrAgentError     = errors.New("agent returned an error")
	ErrToolStuck      = errors.New("a tool call made no progress")
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
