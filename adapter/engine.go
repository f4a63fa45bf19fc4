package adapter

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"

	"acpbroker/acp"
	"acpbroker/policy"
	"acpbroker/pool"

	"github.com/rs/zerolog"
)

// Permission modes.
const (
	PermissionAsk   = "ask"
	PermissionAllow = "allow"
	PermissionDeny  = "deny"
)

// Journal records turns as they happen so that they outlive the process
// (the state store is one). Its methods must not block for long.
type Journal interface {
	TurnQueued(thread, ref, title, author string) uint64
	TurnStarted(id uint64)
	ToolCall(id uint64, toolCallID, title, status string)
	// TurnEnded: state is one of the Ended* values.
	TurnEnded(id uint64, state, cause string)
	// TurnShown: the thread now shows how the turn ended, in the message
	// where names (the platform's reference; empty if none does).
	TurnShown(id uint64, where string)
}

// ThreadProfiles remembers the agent profile each thread was given at its
// first prompt, so that the thread keeps it for life, across restarts (the
// state store is one). Its methods must not block for long.
type ThreadProfiles interface {
	// ThreadProfile is the thread's profile, "" if it has none yet.
	ThreadProfile(thread string) string
	SetThreadProfile(thread, profile string)
}

// How a turn ended, as the Journal records it.
const (
	EndedDone        = "done"
	EndedFailed      = "failed"
	EndedCancelled   = "cancelled"
	EndedInterrupted = "interrupted" // by the broker's shutdown
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
	// Busy is what a prompt whose author may act on its thread
	// (Prompt.MayInterrupt) does while the thread's turn runs: BusyQueue
	// (the default) waits its turn, BusyInterrupt interrupts the turn
	// and is sent next. A thread whose agent profile sets its own Busy
	// follows that.
	Busy string
	// Rules decide permission requests before anyone is asked (see
	// package policy): the first that matches the tool call allows, denies
	// or asks. The Permissions of the profile an agent started from
	// replace them for its requests, and a prompt's own Rules replace
	// both.
	Rules []policy.Rule
	// PermissionMode is ask, allow or deny: how a request no rule matches
	// is answered (allow and deny act as a last rule that matches all).
	PermissionMode string
	// PermissionTimeout bounds one human permission decision.
	PermissionTimeout time.Duration
	// WatchdogInterval is how often the watchdog looks at running turns,
	// apart from their own timers (default 15s).
	WatchdogInterval time.Duration
	// ToolTimeout: a tool call with no update for this long, in a turn
	// with no other progress and no open permission request, cancels the
	// turn (0: never).
	ToolTimeout time.Duration
	// RestartAfterCancel discards an agent after every abandoned turn,
	// even one that answered the cancel: for agents whose session goes
	// wrong after a cancel. The thread's next prompt resumes the session
	// in a new process where the agent supports session/load. A profile's
	// own RestartAfterCancel does the same for its agents.
	RestartAfterCancel bool
	// Journal, if set, records every turn.
	Journal Journal
	// ThreadProfiles, if set, keeps each thread's agent profile; without
	// it a thread keeps its profile only while its agent runs.
	ThreadProfiles ThreadProfiles
	// ThreadChoices, if set, keeps each thread's chosen options and mode;
	// without it they are kept in memory, for the last threads that chose.
	ThreadChoices ThreadChoices
	// SessionRecords, if set, keeps the agent sessions threads have had,
	// for Sessions when the agent lists none itself; without it they are
	// kept in memory, for the last threads that had one.
	SessionRecords SessionRecords
	// Auditor, if set, records every permission decision.
	Auditor Auditor
	Logger  zerolog.Logger
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
	if c.WatchdogInterval <= 0 {
		c.WatchdogInterval = 15 * time.Second
	}
	if c.Busy == "" {
		c.Busy = BusyQueue
	}
}

// Engine runs prompt turns against a pool of agents, one at a time per
// thread, with a watchdog over all of them. Close ends every turn with
// ErrShutdown and returns when all of its goroutines are gone.
type Engine struct {
	cfg  Config
	pool *pool.Pool
	// timings are the turns' histograms, observed where turns end and
	// answers begin.
	timings timings
	log     zerolog.Logger

	ctx      context.Context // cancelled with ErrShutdown by Close
	shutdown context.CancelCauseFunc
	hurry    chan struct{} // closed when shutdown has no time left for graces
	hurried  sync.Once

	mu      sync.Mutex
	closed  bool
	threads map[string]*thread   // threads with a running or queued turn
	options *optionBook          // what threads' agents offer, and chose
	records SessionRecords       // the sessions threads have had
	usage   map[string]acp.Usage // the last usage_update, by thread
	stats   Stats
	wg      sync.WaitGroup

	// loopHook, if set, runs at each step of every turn loop (tests use it
	// to make a loop miss its abort).
	loopHook func(*Prompt)
}

// thread is one conversation's queue and its worker. The queue holds
// prompts' turns and the engine's own operations on the thread (see
// control), in the order they run.
type thread struct {
	id     string
	queue  []*turn
	cur    *turn  // the running turn, nil between turns
	worker uint64 // generation of the goroutine serving the queue
}

// New returns an Engine that takes agents from p. The Engine does not own p.
func New(p *pool.Pool, cfg Config) *Engine {
	cfg.defaults()
	e := &Engine{cfg: cfg, pool: p, log: cfg.Logger, threads: map[string]*thread{}, options: newOptionBook(cfg.ThreadChoices), usage: map[string]acp.Usage{}, hurry: make(chan struct{}),
		timings: newTimings()}
	e.records = cfg.SessionRecords
	if e.records == nil {
		e.records = newMemoryRecords(maxOptionViews)
	}
	e.stats.Outcomes = map[string]uint64{}
	e.stats.Permissions = map[DecisionClass]uint64{}
	e.stats.Elicitations = map[DecisionClass]uint64{}
	e.ctx, e.shutdown = context.WithCancelCause(context.Background())
	e.wg.Go(e.watchdog)
	return e
}

// Submit queues a prompt for thread. It never blocks. It returns an
// error that is ErrQueueFull (and says the bound) when the thread has
// too many prompts waiting, and ErrShutdown after Close; in both cases
// the prompt's Sink is never called. Otherwise the Sink receives the
// turn's progress and exactly one Done.
//
// A prompt that interrupts (Prompt.Interrupt, or Prompt.MayInterrupt
// where the thread's busy mode is BusyInterrupt) goes before every other
// waiting prompt but those that interrupted before it, and the running
// turn is ended with the cause InterruptedBy its author; its Sink is
// told PhaseNext.
func (e *Engine) Submit(threadID string, p *Prompt) error {
	interrupt := p.Interrupt || (p.MayInterrupt && e.busyMode(threadID, p.Agent) == BusyInterrupt)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrShutdown
	}
	th := e.threads[threadID]
	if th == nil {
		th = &thread{id: threadID}
		e.threads[threadID] = th
		e.startWorkerLocked(th)
	} else if len(th.queue) >= e.cfg.QueueSize {
		return &queueFull{size: e.cfg.QueueSize}
	}
	t := e.newTurn(threadID, p)
	if interrupt && (th.cur != nil || len(th.queue) > 0) {
		e.sendNextLocked(th, t, p.AuthorName)
		return nil
	}
	th.queue = append(th.queue, t)
	ahead := len(th.queue) - 1
	if th.cur != nil {
		ahead++
	}
	// Status is sent before the worker can reach this prompt: the worker
	// takes it from the queue only after this Submit's lock is released,
	// and the Sink contract orders everything after that.
	if ahead > 0 {
		p.Sink.Status(Status{Phase: PhaseQueued, Position: ahead})
	}
	return nil
}

func (e *Engine) startWorkerLocked(th *thread) {
	th.worker++
	gen := th.worker
	e.wg.Go(func() { e.work(th, gen) })
}

// Cancel ends thread's running turn with cause (see CancelledBy). Queued
// prompts still run. It reports whether a turn was running. A turn
// submitted to a thread with nothing running counts as running from the
// start, before its worker has taken it: it is ended before it starts.
func (e *Engine) Cancel(threadID string, cause error) bool {
	e.mu.Lock()
	th := e.threads[threadID]
	switch {
	case th == nil:
		e.mu.Unlock()
		return false
	case th.cur != nil:
		th.cur.end(cause)
		e.mu.Unlock()
		return true
	case len(th.queue) > 0:
		t := th.queue[0]
		th.queue = th.queue[1:]
		e.mu.Unlock()
		t.finish(Outcome{Err: cause})
		return true
	}
	e.mu.Unlock()
	return false
}

// Reset cancels the thread's turn and queued prompts and ends its agent
// session: the next prompt starts a fresh one.
func (e *Engine) Reset(threadID string, cause error) {
	var dropped []*turn
	e.mu.Lock()
	delete(e.usage, threadID)
	if th := e.threads[threadID]; th != nil {
		dropped = th.queue
		th.queue = nil
		if th.cur != nil {
			th.cur.end(cause)
		}
	}
	e.mu.Unlock()
	for _, t := range dropped {
		t.finish(Outcome{Err: cause})
	}
	e.pool.Reset(threadID)
	// The next agent states what it offers; the thread's choices stay.
	e.options.forget(threadID)
}

// ThreadStatus describes a thread for /status.
type ThreadStatus struct {
	Busy bool
	// Queued counts the prompts waiting behind the running turn.
	Queued int
	// QueueSize is the most prompts that may wait (Config.QueueSize).
	QueueSize   int
	TurnStarted time.Time
	// Turn is what the running turn is doing ("" with none).
	Turn TurnState
	// Profile is the thread's agent profile: its agent's, or the one it
	// was given; "" before its first prompt.
	Profile   string
	SessionID string
	PID       int
	AgentUp   time.Duration
	// Where is the agent host its agent runs on ("": this machine).
	Where string
	// Dir is the agent's working directory.
	Dir string
	// Model and Mode are the agent's model and mode in words, as it last
	// said ("" when it names none).
	Model, Mode string
	// Usage is the agent's last report of its context use, nil if none.
	Usage *acp.Usage
}

// Status reports on a thread.
func (e *Engine) Status(threadID string) ThreadStatus {
	var s ThreadStatus
	e.mu.Lock()
	s.QueueSize = e.cfg.QueueSize
	if th := e.threads[threadID]; th != nil {
		s.Queued = len(th.queue)
	}
	// A turn whose Outcome was given is over, though its worker has not
	// yet let it go: whoever was told it ended may ask at once.
	var cur *turn
	if th := e.threads[threadID]; th != nil && th.cur != nil && !th.cur.ended.Load() {
		cur = th.cur
		s.Busy, s.TurnStarted = true, cur.start
	}
	tp := e.cfg.ThreadProfiles
	e.mu.Unlock()
	if cur != nil {
		s.Turn = cur.state()
	}
	s.Usage = e.usageOf(threadID)
	if a := e.pool.Lookup(threadID); a != nil {
		s.SessionID, s.PID, s.AgentUp = a.SessionID, a.Proc.PID(), time.Since(a.Started)
		s.Profile, s.Dir, s.Where = a.Profile.Name, a.Dir, a.Where
	} else if tp != nil {
		s.Profile = tp.ThreadProfile(threadID)
	}
	o := e.Options(threadID)
	s.Model, s.Mode = o.CurrentModel(), o.CurrentMode()
	return s
}

// TurnState is what a running turn is doing.
type TurnState string

// What a running turn may be doing.
const (
	// TurnWaitingForSlot: in the pool's line for an agent, every slot
	// taken (pool.max_sessions, or its profile's).
	TurnWaitingForSlot TurnState = "waiting for a slot"
	// TurnWaitingForHost: no agent host has room for its agent.
	TurnWaitingForHost TurnState = "waiting for an agent host"
	// TurnStarting: its agent is being started or readied, the prompt
	// not yet sent.
	TurnStarting TurnState = "starting"
	// TurnStreaming: the prompt is with the agent, which is working.
	TurnStreaming TurnState = "streaming"
	// TurnPermission: the agent waits for a person to answer a
	// permission request.
	TurnPermission TurnState = "waiting for permission"
	// TurnQuestion: the agent waits for a person to answer its question.
	TurnQuestion TurnState = "waiting for a question"
	// TurnCancelling: the turn was ended (cancelled, timed out, its agent
	// gone) and waits for the agent's answer to the cancel.
	TurnCancelling TurnState = "cancelling"
)

// Threads are the threads with a turn running or queued, in no order.
func (e *Engine) Threads() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]string, 0, len(e.threads))
	for id := range e.threads {
		out = append(out, id)
	}
	return out
}

// Stats are the engine's gauges and counters.
type Stats struct {
	Threads, Running, Queued int
	// Outcomes counts ended turns by Outcome.Class.
	Outcomes map[string]uint64
	// Permissions counts permission decisions by outcome and by whom.
	Permissions map[DecisionClass]uint64
	// Elicitations counts answers to the agent's questions by action
	// (accept, decline, cancel) and by whom.
	Elicitations map[DecisionClass]uint64
	// ToolStuck and ForceEnded count watchdog actions.
	ToolStuck, ForceEnded uint64
	// OptionThreads is the number of threads whose agents' options,
	// modes and commands the engine keeps.
	OptionThreads int
	// UsageThreads is the number of threads whose last usage is kept.
	UsageThreads int
	// RecordedThreads is the number of threads whose sessions the engine
	// keeps in memory, without Config.SessionRecords (at most 1024).
	RecordedThreads int
	Pool            pool.Stats
}

// Stats returns the engine's and its pool's gauges.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	s := e.stats
	s.Outcomes = make(map[string]uint64, len(e.stats.Outcomes))
	for k, v := range e.stats.Outcomes {
		s.Outcomes[k] = v
	}
	s.Permissions = maps.Clone(e.stats.Permissions)
	s.Elicitations = maps.Clone(e.stats.Elicitations)
	s.Threads = len(e.threads)
	s.UsageThreads = len(e.usage)
	for _, th := range e.threads {
		s.Queued += len(th.queue)
		if th.cur != nil {
			s.Running++
		}
	}
	e.mu.Unlock()
	s.Pool = e.pool.Stats()
	s.OptionThreads = e.options.size()
	s.RecordedThreads = e.recordsSize()
	return s
}

// config returns the engine's current configuration.
// Config returns the configuration turns start with now (Reconfigure's,
// after a reload), its defaults filled in.
func (e *Engine) Config() Config { return e.config() }

func (e *Engine) config() Config {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cfg
}

// Reconfigure changes the timeouts, permission rules and mode, queue size,
// busy mode and watchdog settings for turns that start from now on; the
// Journal, ThreadProfiles, ThreadChoices, SessionRecords, Auditor and
// Logger stay. Running turns keep
// the settings they started with.
func (e *Engine) Reconfigure(c Config) {
	c.defaults()
	e.mu.Lock()
	defer e.mu.Unlock()
	c.Journal, c.ThreadProfiles, c.Auditor, c.Logger = e.cfg.Journal, e.cfg.ThreadProfiles, e.cfg.Auditor, e.cfg.Logger
	c.ThreadChoices, c.SessionRecords = e.cfg.ThreadChoices, e.cfg.SessionRecords
	e.cfg = c
}

// wedgedTurnWait is how long Shutdown waits, once its deadline has
// passed and every grace is cut, for the turns to end on their own
// before it ends them from outside: time for a loop to see the hurry.
const wedgedTurnWait = time.Second

// Close is Shutdown with no deadline: every turn gets its full cancel
// grace. Safe to call twice.
func (e *Engine) Close() { e.Shutdown(context.Background()) }

// Shutdown ends every running turn with ErrShutdown, in parallel, each
// with its cancel grace, and fails queued prompts with the same cause.
// When ctx ends first, agents still finishing are killed without waiting
// out their grace, and any turn still not ended is ended from outside, so
// Shutdown returns soon after ctx ends however many agents hang. Without a
// wedged turn loop, every goroutine of the Engine is gone when it returns.
func (e *Engine) Shutdown(ctx context.Context) {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.shutdown(ErrShutdown)
	done := make(chan struct{})
	go func() {
		e.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	e.hurried.Do(func() { close(e.hurry) })
	t := time.NewTimer(wedgedTurnWait)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	e.mu.Lock()
	var wedged []*turn
	for _, th := range e.threads {
		if th.cur != nil {
			wedged = append(wedged, th.cur)
		}
	}
	e.mu.Unlock()
	for _, w := range wedged {
		e.forceEnd(w, ErrShutdown)
	}
}

// work runs a thread's prompts one at a time until its queue is empty, or
// until the watchdog hands the queue to a new worker.
func (e *Engine) work(th *thread, gen uint64) {
	for {
		e.mu.Lock()
		if th.worker != gen {
			e.mu.Unlock()
			return
		}
		if len(th.queue) == 0 {
			delete(e.threads, th.id)
			e.mu.Unlock()
			return
		}
		t := th.queue[0]
		th.queue = th.queue[1:]
		if e.ctx.Err() != nil {
			e.mu.Unlock()
			t.finish(Outcome{Err: ErrShutdown})
			continue
		}
		ctx, cancel := context.WithCancelCause(e.ctx)
		t.cancel = cancel
		t.start = time.Now()
		t.cfg = e.cfg
		th.cur = t
		e.mu.Unlock()

		if t.op != nil {
			t.finish(Outcome{Err: t.op(ctx)})
		} else {
			t.run(ctx)
		}

		e.mu.Lock()
		if th.cur == t {
			th.cur = nil
		}
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
