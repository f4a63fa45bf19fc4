package adapter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"acpbroker/acp"
	"acpbroker/internal/clip"
	"acpbroker/policy"
	"acpbroker/pool"

	"github.com/rs/zerolog"
)

// turn is one prompt from its submission to its one Outcome.
type turn struct {
	e      *Engine
	thread string
	p      *Prompt
	id     uint64 // in the journal
	log    zerolog.Logger
	start  time.Time // dequeued
	cfg    Config    // the engine's, when the turn started
	cancel context.CancelCauseFunc
	once   sync.Once
	ended  atomic.Bool // its Outcome is delivered
	queued time.Time   // submitted
	// next: the turn was sent next, interrupting the one before it (set
	// and read under the engine's mu).
	next bool
	// op, if set, makes the turn one of the engine's operations on the
	// thread (see Engine.control) rather than a prompt: it runs op, and
	// its Outcome's Err is op's error.
	op func(ctx context.Context) error

	// owned by the turn's goroutine
	agent *pool.Agent
	sub   *acp.Subscription
	call  *acp.Call
	text  clip.Text // the answer: its start and its end
	tools []ToolCall
	// moreTools counts the tool calls past the first maxToolCalls, which
	// are not kept.
	moreTools int
	plan      []acp.PlanEntry
	morePlan  int             // plan entries past maxPlanEntries, in the last plan
	terms     []shownTerminal // terminals the turn's tool calls show
	usage     *acp.Usage

	// read by the watchdog
	mu          sync.Mutex
	sent        time.Time // the prompt went to the agent
	progress    time.Time // the agent's last update
	open        map[string]toolProgress
	asking      int    // permission requests and questions open
	questions   int    // questions open, of those
	slotWait    bool   // waiting in the pool's line for an agent
	hostWait    bool   // waiting for an agent host with room
	cancelling  bool   // ended, and cleaning up
	profileName string // the agent's profile, once it has one
	// rules are the permission rules of the Profile the agent started
	// from (nil: the engine's), once it has one.
	rules []policy.Rule
}

// shownTerminal is a terminal a tool call holds, with the output last
// shown of it.
type shownTerminal struct {
	toolCallID, terminalID string
	shown                  string
}

// Bounds of the live terminal output shown in the thread: a turn shows at
// most maxShownTerminals terminals, each as the last terminalTailBytes of
// its output, looked at every terminalRefresh.
const (
	maxShownTerminals = 8
	terminalTailBytes = 2 << 10
	terminalRefresh   = time.Second
)

// Bounds of what a turn keeps of what its agent sends, whatever it sends:
// the answer's first and last answerKeep bytes (Outcome.Text says how
// much is left out between them), the first maxToolCalls tool calls and
// maxPlanEntries entries of a plan, each title and entry cut to
// maxTitleBytes. What goes to the Journal is bounded so too.
const (
	answerKeep     = 1 << 20
	maxToolCalls   = 256
	maxPlanEntries = 64
	maxTitleBytes  = 512
)

type toolProgress struct {
	title   string
	kind    string
	updated time.Time
}

func (e *Engine) newTurn(threadID string, p *Prompt) *turn {
	t := &turn{e: e, thread: threadID, p: p, cfg: e.cfg, log: e.log.With().Str("thread", threadID).Logger(),
		text: clip.New(answerKeep, answerKeep), queued: time.Now()}
	if j := e.cfg.Journal; j != nil {
		t.id = j.TurnQueued(threadID, p.Ref, p.Title, p.Author)
	}
	return t
}

// end asks the running turn to stop with cause.
func (t *turn) end(cause error) {
	if t.cancel != nil {
		t.mu.Lock()
		t.cancelling = true
		t.mu.Unlock()
		t.cancel(cause)
	}
}

// state is what the turn is doing now.
func (t *turn) state() TurnState {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.cancelling:
		return TurnCancelling
	case t.questions > 0:
		return TurnQuestion
	case t.asking > 0:
		return TurnPermission
	case t.hostWait:
		return TurnWaitingForHost
	case t.slotWait:
		return TurnWaitingForSlot
	case t.sent.IsZero():
		return TurnStarting
	}
	return TurnStreaming
}

// run takes the turn from acquiring an agent to its Outcome.
func (t *turn) run(ctx context.Context) {
	out := t.attempt(ctx)
	out.Text, out.TextBytes = t.text.String(), t.text.Len()
	out.ToolCalls, out.MoreToolCalls = t.tools, t.moreTools
	out.Plan, out.MorePlan = t.plan, t.morePlan
	out.Usage = t.usage
	t.finish(out)
}

// setLog adds to the turn's logger as the turn learns its session, pid
// and request id. Only the turn's own goroutine calls it (and reads t.log
// directly); others use logger.
func (t *turn) setLog(l zerolog.Logger) {
	t.mu.Lock()
	t.log = l
	t.mu.Unlock()
}

// logger is the turn's logger, for goroutines other than the turn's own
// (the watchdog, shutdown).
func (t *turn) logger() zerolog.Logger {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.log
}

// finish delivers the turn's one Outcome: logged, counted, journaled, then
// given to the Sink. Only the first call counts (the watchdog may end a
// turn whose loop is stuck).
func (t *turn) finish(out Outcome) {
	t.once.Do(func() {
		if t.op != nil {
			t.ended.Store(true)
			t.p.Sink.Done(out) // an operation: nothing to count or journal
			return
		}
		if !t.start.IsZero() {
			out.Elapsed = time.Since(t.start)
		}
		log := t.logger()
		ev := log.Info().Dur("elapsed", out.Elapsed).Str("stop", out.StopReason)
		state := EndedDone
		switch {
		case errors.Is(out.Err, ErrCancelled):
			state = EndedCancelled
			ev = log.Info().Dur("elapsed", out.Elapsed).Str("cause", out.Err.Error())
		case errors.Is(out.Err, ErrShutdown):
			state = EndedInterrupted
			ev = log.Info().Dur("elapsed", out.Elapsed).Str("cause", out.Err.Error())
		case out.Err != nil:
			state = EndedFailed
			ev = log.Warn().Dur("elapsed", out.Elapsed).Str("cause", out.Err.Error())
		}
		ev.Str("outcome", out.Class()).Msg("turn ended")
		t.e.mu.Lock()
		t.e.stats.Outcomes[out.Class()]++
		t.e.mu.Unlock()
		t.e.timings.turn.WithLabelValues(out.Class()).Observe(out.Elapsed.Seconds())
		if j := t.cfg.Journal; j != nil {
			cause := ""
			if out.Err != nil {
				cause = out.Err.Error()
			}
			j.TurnEnded(t.id, state, cause)
			var once sync.Once
			out.Shown = func(where string) { once.Do(func() { j.TurnShown(t.id, where) }) }
		} else {
			out.Shown = func(string) {}
		}
		t.ended.Store(true)
		t.p.Sink.Done(out)
	})
}

// profile is the agent profile of the turn's thread: the one it was
// given, or its live agent's; a thread with neither is given the
// prompt's Agent, or the default, for life.
func (t *turn) profile() (string, error) {
	tp := t.cfg.ThreadProfiles
	if tp != nil {
		if name := tp.ThreadProfile(t.thread); name != "" {
			if name == pool.DefaultProfileName && t.e.pool.Profile(name) == nil {
				// A thread from when [agent] was the one profile: it goes
				// on with the default of the named profiles.
				if def := t.e.pool.Profile(""); def != nil {
					tp.SetThreadProfile(t.thread, def.Name)
					return def.Name, nil
				}
			}
			return name, nil
		}
	}
	name := ""
	if a := t.e.pool.Lookup(t.thread); a != nil {
		name = a.Profile.Name
	} else if prof := t.e.pool.Profile(t.p.Agent); prof != nil {
		name = prof.Name
	} else {
		return "", &profileError{ErrNoProfile, t.p.Agent}
	}
	if tp != nil {
		tp.SetThreadProfile(t.thread, name)
	}
	return name, nil
}

func (t *turn) attempt(ctx context.Context) Outcome {
	cfg := t.cfg
	if err := t.withdrawn(); err != nil {
		return Outcome{Err: err}
	}
	profile, err := t.profile()
	if err != nil {
		return Outcome{Err: err}
	}
	waitCtx, cancel := context.WithTimeoutCause(ctx, cfg.SlotWait,
		fmt.Errorf("%w within %s", ErrNoSlot, shortDuration(cfg.SlotWait)))
	agent, err := t.e.pool.Acquire(waitCtx, t.thread, profile, func(w pool.Wait) {
		phase := PhaseWaitingForSlot
		t.mu.Lock()
		if w == pool.WaitHost {
			t.hostWait, phase = true, PhaseWaitingForHost
		} else {
			t.slotWait = true
		}
		t.mu.Unlock()
		t.p.Sink.Status(Status{Phase: phase})
	})
	cancel()
	t.mu.Lock()
	t.slotWait, t.hostWait = false, false
	t.mu.Unlock()
	if err != nil {
		if ctx.Err() != nil {
			return Outcome{Err: causeOf(ctx)}
		}
		if errors.Is(err, pool.ErrClosed) {
			return Outcome{Err: ErrShutdown}
		}
		if errors.Is(err, ErrNoSlot) {
			return Outcome{Err: err}
		}
		if errors.Is(err, pool.ErrUnknownProfile) {
			return Outcome{Err: &profileError{ErrProfileGone, profile}}
		}
		return Outcome{Err: fmt.Errorf("%w: %w", ErrAgentStart, err)}
	}
	t.agent = agent
	t.mu.Lock()
	t.profileName, t.rules = agent.Profile.Name, agent.Profile.Permissions
	t.mu.Unlock()
	t.setLog(t.log.With().Str("profile", agent.Profile.Name).Str("session", agent.SessionID).Int("pid", agent.Proc.PID()).Logger())
	if agent.LostHost != "" {
		// Said once, as Lost is: the workspace stayed on the host lost.
		t.p.Sink.Notice(HostLost{From: agent.LostHost, To: agent.Where})
		agent.LostHost = ""
	}
	if agent.Lost != "" {
		// Said once: the agent is this turn's while it is busy.
		t.p.Sink.Notice(SessionLost{Session: agent.Lost})
		agent.Lost = ""
	}
	if agent.ContextUsage != nil {
		// What the agent said of the session as it took it up: taken
		// once, as Lost is.
		t.e.setUsage(t.thread, *agent.ContextUsage)
		agent.ContextUsage = nil
	}
	t.e.records.SessionUsed(t.thread, agent.Profile.Name, agent.Dir, agent.SessionID)
	t.applyChoices(ctx, agent)

	t.sub, err = agent.Conn.Subscribe(agent.SessionID, asker{t})
	if err != nil {
		t.e.pool.Release(agent, true)
		return Outcome{Err: t.deathCause(err)}
	}
	defer t.sub.Close()
	if j := t.cfg.Journal; j != nil {
		j.TurnStarted(t.id) // on disk before the agent can see the prompt
	}
	drainRefused(agent) // what it was refused between turns is not this turn's
	if err := t.withdrawn(); err != nil {
		t.e.pool.Release(agent, false)
		return Outcome{Err: err}
	}
	t.call, err = agent.Conn.Prompt(ctx, agent.SessionID, t.blocks())
	if err != nil {
		t.e.pool.Release(agent, true)
		if ctx.Err() != nil {
			return Outcome{Err: causeOf(ctx)}
		}
		return Outcome{Err: t.deathCause(err)}
	}
	t.setLog(t.log.With().Str("req", t.call.ID.String()).Logger())
	t.log.Debug().Msg("prompt sent")
	t.mu.Lock()
	t.sent = time.Now()
	t.progress = t.sent
	t.mu.Unlock()
	t.p.Sink.Status(Status{Phase: PhaseWorking, Dir: agent.Dir})
	return t.loop(ctx)
}

// loop waits for this turn's answer. Silence is not failure: only the
// answer or the end of ctx ends it. The turn's one context merges every
// other ending (user cancel, shutdown, the ceiling, agent death, a failed
// liveness check, an overflowing queue) and carries its cause.
func (t *turn) loop(ctx context.Context) Outcome {
	cfg := t.cfg
	end := t.cancel
	ctx, stop := context.WithTimeoutCause(ctx, cfg.TurnTimeout, timedOut(cfg.TurnTimeout))
	defer stop()
	liveness := time.NewTicker(cfg.LivenessInterval)
	defer liveness.Stop()
	terminals := time.NewTicker(terminalRefresh)
	defer terminals.Stop()
	exited, overflow := t.agent.Proc.Exited(), t.sub.Overflowed()
	refused := t.agent.Refused()
	for {
		if t.e.loopHook != nil {
			t.e.loopHook(t.p)
		}
		select {
		case u := <-t.sub.Updates():
			t.forward(u)
		case r := <-refused:
			refused = nil // said once a turn; the proxy logs and counts every one
			t.p.Sink.Notice(NetworkRefused{r})
		case <-t.call.Done():
			return t.answered()
		case <-exited:
			exited = nil
			// An agent may answer and exit at once: the cause waits for its
			// output to be read to the end, and an answer found there wins.
			cause := t.deathCause(nil)
			if t.isAnswered() {
				t.log.Info().Str("cause", cause.Error()).Msg("agent exited right after answering")
				return t.answered()
			}
			end(cause)
		case <-terminals.C:
			t.showTerminals()
		case <-liveness.C:
			if !t.agent.Proc.Alive() {
				end(fmt.Errorf("%w: its process is gone", ErrAgentUnhealthy))
			}
		case <-overflow:
			overflow = nil
			end(ErrOverflow)
		case <-ctx.Done():
			// An answer that came with the ending wins, unless updates
			// were dropped: then the answer is not whole.
			if t.isAnswered() && !errors.Is(causeOf(ctx), ErrOverflow) {
				return t.answered()
			}
			return t.abandon(causeOf(ctx))
		}
	}
}

func (t *turn) isAnswered() bool {
	select {
	case <-t.call.Done():
		return true
	default:
		return false
	}
}

// answered ends the turn with the agent's answer to the prompt.
func (t *turn) answered() Outcome {
	t.drain()
	t.showTerminals()
	var res acp.PromptResult
	if err := t.call.Result(&res); err != nil {
		if isDeath(err) {
			return t.abandon(t.deathCause(err))
		}
		t.e.pool.Release(t.agent, false)
		return Outcome{Err: fmt.Errorf("%w: %w", ErrAgentError, err)}
	}
	t.e.pool.Release(t.agent, false)
	return Outcome{StopReason: res.StopReason, TurnUsage: res.Usage}
}

// blocks is the prompt's content for this agent: images only if it
// accepts them.
func (t *turn) blocks() []acp.ContentBlock {
	if len(t.p.Images) == 0 {
		return t.p.Blocks
	}
	if t.agent.Conn.Capabilities().PromptCapabilities.Image {
		return append(append([]acp.ContentBlock(nil), t.p.Blocks...), t.p.Images...)
	}
	t.p.Sink.Notice(ImagesLeftOut{Count: len(t.p.Images)})
	if len(t.p.Blocks) == 0 {
		return []acp.ContentBlock{acp.TextBlock("(the user sent only images, which this agent cannot see)")}
	}
	return t.p.Blocks
}

func isDeath(err error) bool {
	return errors.Is(err, acp.ErrAgentGone) || errors.Is(err, acp.ErrClosed)
}

// deathCauseWait bounds the wait for a dead agent to be reaped, which
// takes at most the pool's ReapGrace after its exit: its exit status and
// stderr make the cause.
const deathCauseWait = pool.ReapGrace + time.Second

// deathCause describes a dead agent, with its exit status and stderr tail
// once the process has been reaped (bounded wait).
func (t *turn) deathCause(err error) error {
	proc := t.agent.Proc
	timer := time.NewTimer(deathCauseWait)
	defer timer.Stop()
	select {
	case <-proc.Reaped():
		if exit, ok := errors.AsType[*pool.ExitError](proc.ExitErr()); ok {
			return agentExited{exit}
		}
		if exit := proc.ExitErr(); exit != nil {
			return fmt.Errorf("%w: %w", ErrAgentExited, exit)
		}
	case <-timer.C:
	}
	if err == nil {
		err = acp.ErrAgentGone
	}
	return fmt.Errorf("%w: %w", ErrAgentExited, err)
}

// agentExited is the cause of a turn whose agent died, once its exit is
// known: it reads "agent exited with status 3: <stderr>", "agent
// exited: killed by signal killed" or "the agent ran out of memory
// (limit 4 GiB)", and is both ErrAgentExited and the agent's
// *pool.ExitError, for callers that want its status or stderr.
type agentExited struct{ exit *pool.ExitError }

func (e agentExited) Error() string {
	if e.exit.OutOfMemory {
		return e.exit.Error()
	}
	how := ": " + e.exit.How()
	if e.exit.Signal == 0 && e.exit.Code >= 0 {
		how = fmt.Sprintf(" with status %d", e.exit.Code)
	}
	if e.exit.Tail != "" {
		how += ": " + e.exit.Tail
	}
	return ErrAgentExited.Error() + how
}

func (e agentExited) Unwrap() []error { return []error{ErrAgentExited, e.exit} }

// abandon gives up on the turn and cleans up both sides: the agent is told
// (session/cancel) and its open permission requests are answered
// "cancelled"; the turn waits up to the cancel grace for the agent's answer,
// forwarding what it still sends; then the request is forgotten so a late
// answer is dropped, and an agent that did not answer is killed.
func (t *turn) abandon(cause error) Outcome {
	cfg := t.cfg
	t.mu.Lock()
	t.cancelling = true
	t.mu.Unlock()
	t.log.Info().Str("cause", cause.Error()).Msg("abandoning turn")
	conn, sid := t.agent.Conn, t.agent.SessionID
	// session/cancel first (and $/cancel_request for the prompt, which
	// agents that do not know it ignore), then the open permission
	// requests answered "cancelled" and questions "cancel", in that order
	// on the wire, as the protocol has it.
	alive := t.agent.Proc.Alive()
	if alive {
		conn.CancelSession(sid)
		t.call.Cancel()
	}
	conn.CancelPermissions(sid, cause)
	// The commands the agent ran through the broker are stopped with the
	// turn; the agent may still read what they printed until it answers.
	t.agent.Host.KillTerminals(sid)
	trusted := false
	if alive {
		t.p.Sink.Status(Status{Phase: PhaseCancelling, Cause: cause})
		trusted = t.awaitCancelled(cfg.CancelGrace)
	}
	t.drain()
	t.call.Abandon()
	t.showTerminals()
	t.agent.Host.ReleaseTerminals(sid)
	t.sub.Close()
	if alive && !trusted {
		t.log.Warn().Dur("grace", cfg.CancelGrace).Msg("agent did not answer the cancelled prompt in time; stopping it")
	}
	restart := cfg.RestartAfterCancel || t.agent.Profile.RestartAfterCancel
	if trusted && restart {
		t.log.Info().Msg("agent answered the cancel; restarting it anyway (agent.restart_after_cancel)")
	}
	t.e.pool.Release(t.agent, !trusted || restart)
	return Outcome{Err: cause}
}

// awaitCancelled waits for the abandoned prompt's answer, forwarding the
// agent's last updates. It reports whether the agent answered in time.
func (t *turn) awaitCancelled(grace time.Duration) bool {
	timer := time.NewTimer(grace)
	defer timer.Stop()
	for {
		select {
		case u := <-t.sub.Updates():
			t.forward(u)
		case <-t.call.Done():
			t.drain()
			var res acp.PromptResult
			err := t.call.Result(&res)
			t.log.Debug().Str("stop", res.StopReason).AnErr("err", err).Msg("agent answered the cancelled prompt")
			return err == nil || !isDeath(err)
		case <-t.agent.Proc.Exited():
			return false
		case <-timer.C:
			return false
		case <-t.e.hurry:
			return false
		}
	}
}

// Withdrawer is a Sink whose prompt may be cancelled while it waits
// (through the API): Withdrawn says why, or nil. A turn asks it when it
// leaves the queue and again just before the prompt is sent, so that a
// prompt cancelled while it waited never reaches the agent, however
// quickly the agent would have answered it.
type Withdrawer interface {
	Withdrawn() error
}

// withdrawn is why the turn's prompt was withdrawn before it was sent,
// or nil.
func (t *turn) withdrawn() error {
	if w, ok := t.p.Sink.(Withdrawer); ok {
		return w.Withdrawn()
	}
	return nil
}

// drainRefused forgets the proxy's refusals of a's connections not yet
// seen.
func drainRefused(a *pool.Agent) {
	for {
		select {
		case <-a.Refused():
		default:
			return
		}
	}
}

// drain forwards the updates that arrived before the answer: the read loop
// queued them first, so they are all in the channel already.
func (t *turn) drain() {
	for {
		select {
		case u := <-t.sub.Updates():
			t.forward(u)
		default:
			return
		}
	}
}

func (t *turn) forward(u acp.Update) {
	t.sub.Took(u)
	now := time.Now()
	t.mu.Lock()
	t.progress = now
	sent := t.sent
	t.mu.Unlock()
	switch u.Kind {
	case acp.UpdateMessageChunk:
		if u.Content != nil && u.Content.Type == "text" {
			if t.text.Len() == 0 && u.Content.Text != "" && !sent.IsZero() {
				t.e.timings.firstChunk.Observe(now.Sub(sent).Seconds())
			}
			t.text.WriteString(u.Content.Text)
		}
	case acp.UpdateToolCall, acp.UpdateToolCallUpdate:
		if t.trackTool(u, now) {
			// A terminal the update gives the tool call is shown once the
			// tool call itself is: shown before it, the output would have
			// nothing to go under.
			defer t.showTerminals()
		}
	case acp.UpdatePlan:
		t.plan, t.morePlan = boundPlan(u.Entries)
	case acp.UpdateUsage:
		if u.Usage != nil {
			t.usage = u.Usage
			t.e.setUsage(t.thread, *u.Usage)
		}
	case acp.UpdateSessionInfo:
		if u.Title != nil {
			t.e.records.SessionTitled(t.thread, t.agent.SessionID, clip.Cut(*u.Title, maxTitleBytes))
		}
	}
	t.p.Sink.Update(u)
}

// trackTool keeps the last state of each tool call: for the Outcome, for
// the journal, and the open ones with their last update for the watchdog.
// It reports whether the update gave the tool call a terminal to show.
func (t *turn) trackTool(u acp.Update, now time.Time) (newTerminal bool) {
	i := slices.IndexFunc(t.tools, func(tc ToolCall) bool { return tc.ID == u.ToolCallID })
	if i < 0 {
		if len(t.tools) == maxToolCalls {
			// Not kept, nor journaled, nor watched: counted once, when
			// the agent makes it.
			if u.Kind == acp.UpdateToolCall {
				t.moreTools++
			}
			return false
		}
		t.tools = append(t.tools, ToolCall{ID: u.ToolCallID, Kind: clip.Cut(u.ToolKind, maxTitleBytes), Status: "pending"})
		i = len(t.tools) - 1
	}
	tc := &t.tools[i]
	if u.ToolKind != "" {
		tc.Kind = clip.Cut(u.ToolKind, maxTitleBytes)
	}
	if u.Title != nil {
		tc.Title = clip.Cut(*u.Title, maxTitleBytes)
	}
	if u.Status != "" {
		tc.Status = clip.Cut(u.Status, maxTitleBytes)
	}
	for _, c := range u.ToolOutput {
		if c.Type == "terminal" && c.TerminalID != "" && t.watchTerminal(tc.ID, c.TerminalID) {
			newTerminal = true
		}
	}
	t.mu.Lock()
	if tc.Status == "completed" || tc.Status == "failed" {
		delete(t.open, tc.ID)
	} else {
		if t.open == nil {
			t.open = map[string]toolProgress{}
		}
		t.open[tc.ID] = toolProgress{title: tc.Title, kind: tc.Kind, updated: now}
	}
	t.mu.Unlock()
	if j := t.cfg.Journal; j != nil {
		title := ""
		if u.Title != nil {
			title = tc.Title
		}
		status := ""
		if u.Status != "" {
			status = tc.Status
		}
		j.ToolCall(t.id, tc.ID, title, status)
	}
	return newTerminal
}

// boundPlan is a plan within maxPlanEntries entries of maxTitleBytes, and
// how many entries it leaves out.
func boundPlan(entries []acp.PlanEntry) ([]acp.PlanEntry, int) {
	more := max(len(entries)-maxPlanEntries, 0)
	out := make([]acp.PlanEntry, 0, len(entries)-more)
	for _, e := range entries[:len(entries)-more] {
		out = append(out, acp.PlanEntry{Content: clip.Cut(e.Content, maxTitleBytes), Priority: clip.Cut(e.Priority, 32), Status: clip.Cut(e.Status, 32)})
	}
	return out, more
}

// watchTerminal starts watching a terminal the tool call holds, unless
// the turn shows as many as it may; it reports whether the terminal is
// new to the turn.
func (t *turn) watchTerminal(toolCallID, terminalID string) bool {
	for _, st := range t.terms {
		if st.toolCallID == toolCallID && st.terminalID == terminalID {
			return false
		}
	}
	if len(t.terms) >= maxShownTerminals {
		return false
	}
	t.terms = append(t.terms, shownTerminal{toolCallID: toolCallID, terminalID: terminalID})
	return true
}

// showTerminals gives the Sink the output of the turn's terminals that
// changed since last shown.
func (t *turn) showTerminals() {
	for i := range t.terms {
		t.showTerminal(&t.terms[i])
	}
}

func (t *turn) showTerminal(st *shownTerminal) {
	o, ok := t.agent.Host.Output(t.agent.SessionID, st.terminalID, terminalTailBytes)
	if !ok {
		return // unknown, or released long ago: nothing to show
	}
	// The tail alone may not change while output flows.
	now := fmt.Sprint(o.Written)
	if o.Exit != nil {
		now += " " + o.Exit.String()
	}
	if now == st.shown {
		return
	}
	st.shown = now
	// Output is progress, of the turn and of the tool call that runs it.
	t.mu.Lock()
	t.progress = time.Now()
	if tc, ok := t.open[st.toolCallID]; ok {
		tc.updated = t.progress
		t.open[st.toolCallID] = tc
	}
	t.mu.Unlock()
	t.p.Sink.Update(acp.Update{Kind: acp.UpdateToolCallUpdate, ToolCallID: st.toolCallID, Terminal: &o})
}

// approve answers the agent's permission request: by the first of the
// rules that matches it (the prompt's, else those the agent's profile had
// when the agent started, else the engine's), else by
// turn.permission_mode when that is allow or deny, else by a person
// through the Sink. Every answer, "cancelled" included, is logged,
// counted and given to the Auditor. It runs on a goroutine of the Conn;
// ctx ends when the turn abandons.
func (t *turn) approve(ctx context.Context, req *acp.PermissionRequest) acp.PermissionOutcome {
	cfg := t.cfg
	d := t.decision(req)
	title := d.Tool
	if title == "" {
		title = d.ToolCallID
	}
	rules := t.p.Rules
	if rules == nil {
		t.mu.Lock()
		rules = t.rules
		t.mu.Unlock()
	}
	if rules == nil {
		rules = cfg.Rules
	}
	rule, n := policy.Match(rules, d.ToolKind, d.Tool)
	action, by := rule.Action, Decider{}
	switch {
	case n > 0:
		d.Via, d.By, d.ByName = ViaRule, fmt.Sprintf("rule %d", n), rule.String()
		by = Decider{N: n, Rule: rule}
	case t.p.PermissionMode == PermissionAllow || t.p.PermissionMode == PermissionDeny:
		action = policy.Action(t.p.PermissionMode)
		d.Via, d.By, d.ByName = ViaMode, cmp.Or(t.p.PermissionBy, "the prompt's permission mode"), t.p.PermissionMode
		by = Decider{Setting: t.p.PermissionBy, Mode: t.p.PermissionMode}
	case t.p.PermissionMode == "" && (cfg.PermissionMode == PermissionAllow || cfg.PermissionMode == PermissionDeny):
		action = policy.Action(cfg.PermissionMode)
		d.Via, d.By, d.ByName = ViaMode, "turn.permission_mode", cfg.PermissionMode
		by = Decider{Setting: "turn.permission_mode", Mode: cfg.PermissionMode}
	}
	if action == policy.Allow || action == policy.Deny {
		opt, ok := onceOption(req, action)
		if !ok {
			want := acp.OptionAllowOnce
			if action == policy.Deny {
				want = acp.OptionRejectOnce
			}
			t.p.Sink.Notice(PermissionNoOption{Tool: title, Action: action, By: by, Missing: want})
			return t.decided(d, acp.PermissionOutcome{})
		}
		t.p.Sink.Notice(PermissionDecided{Tool: title, Action: action, By: by})
		d.OptionID, d.OptionKind = opt.OptionID, opt.Kind
		return t.decided(d, acp.PermissionOutcome{OptionID: opt.OptionID})
	}

	t.askOpened(false)
	defer t.askClosed(false)
	askCtx, cancel := context.WithTimeoutCause(ctx, cfg.PermissionTimeout,
		fmt.Errorf("no answer within %s", shortDuration(cfg.PermissionTimeout)))
	defer cancel()
	ans := t.p.Sink.Ask(askCtx, req)
	switch {
	case ctx.Err() != nil:
		// The turn ended; the agent is answered "cancelled" whatever the
		// answer, which may have come at the same moment.
		d.Via, d.By = ViaCancelled, ViaCancelled
		return t.decided(d, acp.PermissionOutcome{})
	case askCtx.Err() != nil:
		t.p.Sink.Notice(PermissionTimedOut{Tool: title, After: cfg.PermissionTimeout})
		d.Via, d.By = ViaTimeout, ViaTimeout
		return t.decided(d, acp.PermissionOutcome{})
	case ans.Outcome.Cancelled():
		d.Via, d.By, d.ByName = ViaUnanswered, ViaUnanswered, ""
		if ans.By != "" {
			d.Via, d.By, d.ByName = ViaUser, ans.By, ans.ByName
		}
		return t.decided(d, acp.PermissionOutcome{})
	}
	kind, ok := optionKind(req, ans.Outcome.OptionID)
	if !ok {
		// The Conn would answer "cancelled" too; the record says so.
		log := t.logger()
		log.Error().Str("option", ans.Outcome.OptionID).Msg("the chat layer chose an option the agent did not offer; answering cancelled")
		d.Via, d.By = ViaUnanswered, ViaUnanswered
		return t.decided(d, acp.PermissionOutcome{})
	}
	d.Via, d.By, d.ByName = ViaUser, ans.By, ans.ByName
	d.OptionID, d.OptionKind = ans.Outcome.OptionID, kind
	return t.decided(d, ans.Outcome)
}

// decision starts the record of a permission request: the tool call as
// the request describes it, or, for what the request leaves out, as the
// agent described it earlier in the turn (as far as the turn has read
// its updates yet).
func (t *turn) decision(req *acp.PermissionRequest) Decision {
	tc := req.ToolCall
	t.mu.Lock()
	profile := t.profileName
	t.mu.Unlock()
	d := Decision{Thread: t.thread, Profile: profile, Turn: t.id, ToolCallID: tc.ToolCallID, Tool: clip.Cut(tc.Title, maxTitleBytes), ToolKind: clip.Cut(tc.Kind, maxTitleBytes)}
	if d.Tool == "" || d.ToolKind == "" {
		t.mu.Lock()
		seen := t.open[tc.ToolCallID]
		t.mu.Unlock()
		if d.Tool == "" {
			d.Tool = seen.title
		}
		if d.ToolKind == "" {
			d.ToolKind = seen.kind
		}
	}
	return d
}

// decided logs, counts and audits a permission decision, and returns the
// answer for the agent.
func (t *turn) decided(d Decision, out acp.PermissionOutcome) acp.PermissionOutcome {
	d.Time = time.Now()
	log := t.logger()
	log.Info().Str("tool", d.Tool).Str("tool_kind", d.ToolKind).Str("tool_call", d.ToolCallID).
		Str("profile", d.Profile).Str("option", d.OptionID).Str("option_kind", d.OptionKind).
		Str("outcome", d.Outcome()).Str("via", d.Via).Str("by", d.By).Str("by_name", d.ByName).
		Msg("permission decided")
	t.e.mu.Lock()
	t.e.stats.Permissions[DecisionClass{Outcome: d.Outcome(), Via: d.Via}]++
	t.e.mu.Unlock()
	if a := t.cfg.Auditor; a != nil {
		a.Decided(d)
	}
	return out
}
