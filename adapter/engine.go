package adapter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"acpbroker/pool"

	"github.com/rs/zerolog"
)

// Permission modes.
const (
	PermissionAsk   = "ask"
	PermissionAllow = "allow"
	PermissionDeny  = "deny"
)

// Config configures an Engine.
type Config struct {
	// TurnTimeout is the hard ceiling of one turn, from the prompt being sent.
	TurnTimeout time.Duration
	// LivenessInterval is how often a running turn checks that its agent is
	// still alive (exit is noticed at once regardless).
	LivenessInterval time.Duration
	// CancelGrace is how long an abandoned turn waits for the agent's answer
	// after session/cancel before the agent is killed.
	CancelGrace time.Duration
	// SlotWait bounds how long a prompt waits for a free agent slot.
	SlotWait time.Duration
	// QueueSize bounds prompts waiting behind the running turn, per thread.
	QueueSize int
	// PermissionMode is ask, allow or deny.
	PermissionMode string
	// PermissionTimeout bounds one human permission decision.
	PermissionTimeout time.Duration
	// State, if set, records running turns so that a restart can report them.
	State  *StateStore
	Logger zerolog.Logger
}

func (c *Config) defaults() {
	if c.TurnTimeout <= 0 {
		c.TurnTimeout = 30 * time.Minute
	}
	if c.LivenessInterval <= 0 {
		c.LivenessInterval = 30 * time.Second
	}
	if c.CancelGrace <= 0 {
		c.CancelGrace = 10 * time.Second
	}
	if c.SlotWait <= 0 {
		c.SlotWait = 10 * time.Minute
	}
	if c.QueueSize <= 0 {
		c.QueueSize = 8
	}
	if c.PermissionMode == "" {
		c.PermissionMode = PermissionAsk
	}
	if c.PermissionTimeout <= 0 {
		c.PermissionTimeout = 5 * time.Minute
	}
}

// Engine runs prompt turns against a pool of agents. Close ends every turn
// with ErrShutdown and returns when all of its goroutines are gone.
type Engine struct {
	cfg  Config
	pool *pool.Pool
	log  zerolog.Logger

	ctx      context.Context // cancelled with ErrShutdown by Close
	shutdown context.CancelCauseFunc

	mu      sync.Mutex
	closed  bool
	threads map[string]*thread // threads with a running or queued turn
	wg      sync.WaitGroup
}

type thread struct {
	id      string
	queue   []*Prompt
	cancel  context.CancelCauseFunc // of the running turn, nil between turns
	started time.Time
}

// New returns an Engine that takes agents from p. The Engine does not own p.
func New(p *pool.Pool, cfg Config) *Engine {
	cfg.defaults()
	e := &Engine{cfg: cfg, pool: p, log: cfg.Logger, threads: map[string]*thread{}}
	e.ctx, e.shutdown = context.WithCancelCause(context.Background())
	return e
}

// Submit queues a prompt for thread. It never blocks. It returns
// ErrQueueFull when the thread has too many prompts waiting and ErrShutdown
// after Close; in both cases the prompt's Sink is never called. Otherwise
// the Sink receives the turn's progress and exactly one Done.
func (e *Engine) Submit(threadID string, p *Prompt) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrShutdown
	}
	t := e.threads[threadID]
	if t == nil {
		t = &thread{id: threadID}
		e.threads[threadID] = t
		e.wg.Go(func() { e.work(t) })
	} else if len(t.queue) >= e.cfg.QueueSize {
		e.mu.Unlock()
		return ErrQueueFull
	}
	t.queue = append(t.queue, p)
	ahead := len(t.queue) - 1
	if t.cancel != nil {
		ahead++
	}
	// Status is sent before the worker can reach this prompt: the worker
	// takes it from the queue only after this Submit's lock is released,
	// and the Sink contract orders everything after that.
	if ahead > 0 {
		p.Sink.Status(Status{Phase: PhaseQueued, Position: ahead, Text: fmt.Sprintf("queued behind %d other message(s)", ahead)})
	}
	e.mu.Unlock()
	return nil
}

// Cancel ends thread's running turn with cause (see CancelledBy). Queued
// prompts still run. It reports whether a turn was running.
func (e *Engine) Cancel(threadID string, cause error) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.threads[threadID]
	if t == nil || t.cancel == nil {
		return false
	}
	t.cancel(cause)
	return true
}

// Reset cancels the thread's turn and queued prompts and ends its agent
// session: the next prompt starts a fresh one.
func (e *Engine) Reset(threadID string, cause error) {
	e.mu.Lock()
	if t := e.threads[threadID]; t != nil {
		dropped := t.queue
		t.queue = nil
		if t.cancel != nil {
			t.cancel(cause)
		}
		defer func() {
			for _, p := range dropped {
				p.Sink.Done(Outcome{Err: cause})
			}
		}()
	}
	e.mu.Unlock()
	e.pool.Reset(threadID)
}

// ThreadStatus describes a thread for /status.
type ThreadStatus struct {
	Busy        bool
	Queued      int
	TurnStarted time.Time
	SessionID   string
	PID         int
	AgentUp     time.Duration
}

// Status reports on a thread.
func (e *Engine) Status(threadID string) ThreadStatus {
	var s ThreadStatus
	e.mu.Lock()
	if t := e.threads[threadID]; t != nil {
		s.Busy = t.cancel != nil
		s.Queued = len(t.queue)
		s.TurnStarted = t.started
	}
	e.mu.Unlock()
	if a := e.pool.Lookup(threadID); a != nil {
		s.SessionID, s.PID, s.AgentUp = a.SessionID, a.Proc.PID(), time.Since(a.Started)
	}
	return s
}

// Stats are the engine's gauges.
type Stats struct {
	Threads int
	Pool    pool.Stats
}

// Stats returns the engine's and its pool's gauges.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	n := len(e.threads)
	e.mu.Unlock()
	return Stats{Threads: n, Pool: e.pool.Stats()}
}

// Close ends every running turn with ErrShutdown (each gets its cancel
// grace), fails queued prompts with the same cause, and returns when all
// turn goroutines are gone. Safe to call twice.
func (e *Engine) Close() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.shutdown(ErrShutdown)
	e.wg.Wait()
}

// work runs a thread's prompts one at a time until its queue is empty.
func (e *Engine) work(t *thread) {
	for {
		e.mu.Lock()
		if len(t.queue) == 0 {
			delete(e.threads, t.id)
			e.mu.Unlock()
			return
		}
		p := t.queue[0]
		t.queue = t.queue[1:]
		if e.ctx.Err() != nil {
			e.mu.Unlock()
			p.Sink.Done(Outcome{Err: ErrShutdown})
			continue
		}
		ctx, cancel := context.WithCancelCause(e.ctx)
		t.cancel, t.started = cancel, time.Now()
		e.mu.Unlock()

		e.runTurn(ctx, cancel, t.id, p)

		e.mu.Lock()
		t.cancel, t.started = nil, time.Time{}
		e.mu.Unlock()
		cancel(nil)
	}
}

// causeOf returns why ctx ended, mapping a bare context error to words.
func causeOf(ctx context.Context) error {
	err := context.Cause(ctx)
	if errors.Is(err, context.Canceled) {
		return ErrCancelled
	}
	return err
}
