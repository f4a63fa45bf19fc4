package adapter

import (
	"slices"
	"time"
)

// Busy modes (Config.Busy, pool.Profile.Busy).
const (
	BusyQueue     = "queue"
	BusyInterrupt = "interrupt"
)

// busyMode is the busy mode of thread: its agent profile's (the live
// agent's, else the one it was given, else agent's, the profile a first
// prompt asks for), else the engine's.
func (e *Engine) busyMode(thread, agent string) string {
	cfg := e.config()
	if a := e.pool.Lookup(thread); a != nil {
		if a.Profile.Busy != "" {
			return a.Profile.Busy
		}
		return cfg.Busy
	}
	name := agent
	if tp := cfg.ThreadProfiles; tp != nil {
		if given := tp.ThreadProfile(thread); given != "" {
			name = given
		}
	}
	if prof := e.pool.Profile(name); prof != nil && prof.Busy != "" {
		return prof.Busy
	}
	return cfg.Busy
}

// sendNextLocked puts t first in th's queue, after the turns sent next
// before it, and interrupts th's running turn for it: the turn ends with
// the cause InterruptedBy(by, t's title), and its agent is kept when it
// answers the cancel in time (replaced otherwise, as after any cancel),
// so t is the next prompt of the same session. e.mu must be held.
func (e *Engine) sendNextLocked(th *thread, t *turn, by string) {
	i := 0
	for i < len(th.queue) && th.queue[i].next {
		i++
	}
	t.next = true
	th.queue = slices.Insert(th.queue, i, t)
	interrupting := false
	if cur := th.cur; cur != nil && cur.op == nil {
		cur.end(InterruptedBy(by, t.p.Title))
		interrupting = true
	}
	// Told under e.mu, as Submit tells PhaseQueued: before the worker
	// can take the turn and tell PhaseWorking.
	t.p.Sink.Status(Status{Phase: PhaseNext, Position: i + 1, Interrupting: interrupting})
}

// SendNow sends a waiting prompt next, interrupting the thread's running
// turn for it, as if it had been submitted to interrupt (see Submit):
// by names who did, for the interrupted turn's cause. It returns
// ErrNotWaiting when p is not waiting in the thread's queue.
func (e *Engine) SendNow(thread string, p *Prompt, by string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	th := e.threads[thread]
	if th == nil {
		return ErrNotWaiting
	}
	i := slices.IndexFunc(th.queue, func(t *turn) bool { return t.op == nil && t.p == p })
	if i < 0 {
		return ErrNotWaiting
	}
	t := th.queue[i]
	th.queue = slices.Delete(th.queue, i, i+1)
	e.sendNextLocked(th, t, by)
	return nil
}

// Withdraw takes a waiting prompt out of its thread's queue: its Sink
// is given an Outcome with cause (see RemovedBy), and it never reaches
// the agent. It returns ErrNotWaiting when p is not waiting.
func (e *Engine) Withdraw(thread string, p *Prompt, cause error) error {
	e.mu.Lock()
	th := e.threads[thread]
	i := -1
	if th != nil {
		i = slices.IndexFunc(th.queue, func(t *turn) bool { return t.op == nil && t.p == p })
	}
	if i < 0 {
		e.mu.Unlock()
		return ErrNotWaiting
	}
	t := th.queue[i]
	th.queue = slices.Delete(th.queue, i, i+1)
	e.mu.Unlock()
	t.log.Info().Str("cause", cause.Error()).Msg("queued message withdrawn")
	t.finish(Outcome{Err: cause})
	return nil
}

// Waiting is a prompt waiting in its thread's queue.
type Waiting struct {
	Prompt *Prompt
	// Queued is when it was submitted.
	Queued time.Time
	// Next: it was sent next, interrupting the turn before it.
	Next bool
}

// Waiting lists the prompts waiting in thread's queue, in the order they
// will run.
func (e *Engine) Waiting(thread string) []Waiting {
	e.mu.Lock()
	defer e.mu.Unlock()
	th := e.threads[thread]
	if th == nil {
		return nil
	}
	out := make([]Waiting, 0, len(th.queue))
	for _, t := range th.queue {
		if t.op == nil {
			out = append(out, Waiting{Prompt: t.p, Queued: t.queued, Next: t.next})
		}
	}
	return out
}
