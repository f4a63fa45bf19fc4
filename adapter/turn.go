package adapter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"acpbroker/acp"
	"acpbroker/pool"

	"github.com/rs/zerolog"
)

// turn is one prompt's run against an agent.
type turn struct {
	e      *Engine
	thread string
	p      *Prompt
	log    zerolog.Logger
	agent  *pool.Agent
	sub    *acp.Subscription
	call   *acp.Call

	text  strings.Builder
	tools []ToolCall
	plan  []acp.PlanEntry
	start time.Time
}

// runTurn takes the prompt from acquiring an agent to its one Outcome.
func (e *Engine) runTurn(ctx context.Context, end context.CancelCauseFunc, threadID string, p *Prompt) {
	t := &turn{e: e, thread: threadID, p: p, start: time.Now(),
		log: e.log.With().Str("thread", threadID).Logger()}
	if e.cfg.State != nil {
		e.cfg.State.Begin(threadID, p.Ref)
	}
	out := t.run(ctx, end)
	out.Text = t.text.String()
	out.ToolCalls = t.tools
	out.Plan = t.plan
	out.Elapsed = time.Since(t.start)
	ev := t.log.Info().Dur("elapsed", out.Elapsed).Str("stop", out.StopReason)
	switch {
	case errors.Is(out.Err, ErrCancelled), errors.Is(out.Err, ErrShutdown):
		ev = t.log.Info().Dur("elapsed", out.Elapsed).Str("cause", out.Err.Error())
	case out.Err != nil:
		ev = t.log.Warn().Dur("elapsed", out.Elapsed).Str("cause", out.Err.Error())
	}
	ev.Msg("turn ended")
	if e.cfg.State != nil {
		e.cfg.State.End(threadID)
	}
	p.Sink.Done(out)
}

func (t *turn) run(ctx context.Context, end context.CancelCauseFunc) Outcome {
	cfg := t.e.cfg
	waitCtx, cancel := context.WithTimeoutCause(ctx, cfg.SlotWait,
		fmt.Errorf("%w within %s", ErrNoSlot, shortDuration(cfg.SlotWait)))
	agent, err := t.e.pool.Acquire(waitCtx, t.thread, func() {
		t.p.Sink.Status(Status{Phase: PhaseWaitingForSlot, Text: "waiting for a free agent slot"})
	})
	cancel()
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
		return Outcome{Err: fmt.Errorf("%w: %w", ErrAgentStart, err)}
	}
	t.agent = agent
	t.log = t.log.With().Str("session", agent.SessionID).Int("pid", agent.Proc.PID()).Logger()

	t.sub, err = agent.Conn.Subscribe(agent.SessionID, acp.ApproverFunc(t.approve))
	if err != nil {
		t.e.pool.Release(agent, true)
		return Outcome{Err: t.deathCause(err)}
	}
	defer t.sub.Close()
	t.call, err = agent.Conn.Prompt(ctx, agent.SessionID, t.p.Blocks)
	if err != nil {
		t.e.pool.Release(agent, true)
		if ctx.Err() != nil {
			return Outcome{Err: causeOf(ctx)}
		}
		return Outcome{Err: t.deathCause(err)}
	}
	t.log.Debug().Str("req", t.call.ID.String()).Msg("prompt sent")
	t.p.Sink.Status(Status{Phase: PhaseWorking, Text: "working"})
	return t.loop(ctx, end)
}

// loop waits for this turn's answer. Silence is not failure: only the
// answer or the end of ctx ends it. The turn's one context merges every
// other ending (user cancel, shutdown, the ceiling, agent death, a failed
// liveness check, an overflowing queue) and carries its cause.
func (t *turn) loop(ctx context.Context, end context.CancelCauseFunc) Outcome {
	cfg := t.e.cfg
	ctx, stop := context.WithTimeoutCause(ctx, cfg.TurnTimeout, timedOut(cfg.TurnTimeout))
	defer stop()
	liveness := time.NewTicker(cfg.LivenessInterval)
	defer liveness.Stop()
	exited, overflow := t.agent.Proc.Exited(), t.sub.Overflowed()
	for {
		select {
		case u := <-t.sub.Updates():
			t.forward(u)
		case <-t.call.Done():
			t.drain()
			var res acp.PromptResult
			if err := t.call.Result(&res); err != nil {
				if isDeath(err) {
					return t.abandon(t.deathCause(err))
				}
				t.e.pool.Release(t.agent, false)
				return Outcome{Err: fmt.Errorf("%w: %w", ErrAgentError, err)}
			}
			t.e.pool.Release(t.agent, false)
			return Outcome{StopReason: res.StopReason}
		case <-exited:
			exited = nil
			end(t.deathCause(nil))
		case <-liveness.C:
			if !t.agent.Proc.Alive() {
				end(fmt.Errorf("%w: its process is gone", ErrAgentUnhealthy))
			}
		case <-overflow:
			overflow = nil
			end(ErrOverflow)
		case <-ctx.Done():
			return t.abandon(causeOf(ctx))
		}
	}
}

func isDeath(err error) bool {
	return errors.Is(err, acp.ErrAgentGone) || errors.Is(err, acp.ErrClosed)
}

// deathCause describes a dead agent, with its exit status and stderr tail
// once the process has been reaped (bounded wait).
func (t *turn) deathCause(err error) error {
	proc := t.agent.Proc
	timer := time.NewTimer(3 * time.Second)
	defer timer.Stop()
	select {
	case <-proc.Reaped():
		if exit := proc.ExitErr(); exit != nil {
			return fmt.Errorf("%w: %s", ErrAgentExited, strings.TrimPrefix(exit.Error(), "agent "))
		}
	case <-timer.C:
	}
	if err == nil {
		err = acp.ErrAgentGone
	}
	return fmt.Errorf("%w: %w", ErrAgentExited, err)
}

// abandon gives up on the turn and cleans up both sides: the agent is told
// (session/cancel) and its open permission requests are answered
// "cancelled"; the turn waits up to the cancel grace for the agent's answer,
// forwarding what it still sends; then the request is forgotten so a late
// answer is dropped, and an agent that did not answer is killed.
func (t *turn) abandon(cause error) Outcome {
	cfg := t.e.cfg
	t.log.Info().Str("cause", cause.Error()).Msg("abandoning turn")
	conn, sid := t.agent.Conn, t.agent.SessionID
	conn.CancelPermissions(sid, cause)
	alive := t.agent.Proc.Alive()
	trusted := false
	if alive {
		t.p.Sink.Status(Status{Phase: PhaseCancelling, Text: "stopping: " + cause.Error()})
		conn.CancelSession(sid)
		trusted = t.awaitCancelled(cfg.CancelGrace)
	}
	t.drain()
	t.call.Abandon()
	t.sub.Close()
	if alive && !trusted {
		t.log.Warn().Dur("grace", cfg.CancelGrace).Msg("agent did not answer the cancelled prompt in time; killing it")
	}
	t.e.pool.Release(t.agent, !trusted)
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
	switch u.Kind {
	case acp.UpdateMessageChunk:
		if u.Content != nil && u.Content.Type == "text" {
			t.text.WriteString(u.Content.Text)
		}
	case acp.UpdateToolCall, acp.UpdateToolCallUpdate:
		t.trackTool(u)
	case acp.UpdatePlan:
		t.plan = u.Entries
	}
	t.p.Sink.Update(u)
}

func (t *turn) trackTool(u acp.Update) {
	for i := range t.tools {
		if t.tools[i].ID == u.ToolCallID {
			if u.Title != nil {
				t.tools[i].Title = *u.Title
			}
			if u.Status != "" {
				t.tools[i].Status = u.Status
			}
			return
		}
	}
	tc := ToolCall{ID: u.ToolCallID, Kind: u.ToolKind, Status: u.Status}
	if u.Title != nil {
		tc.Title = *u.Title
	}
	if tc.Status == "" {
		tc.Status = "pending"
	}
	t.tools = append(t.tools, tc)
}

// approve answers the agent's permission request by the configured mode.
// It runs on a goroutine of the Conn; ctx ends when the turn abandons.
func (t *turn) approve(ctx context.Context, req *acp.PermissionRequest) acp.PermissionOutcome {
	cfg := t.e.cfg
	title := req.ToolCall.Title
	if title == "" {
		title = req.ToolCall.ToolCallID
	}
	switch cfg.PermissionMode {
	case PermissionAllow, PermissionDeny:
		prefix := "allow"
		if cfg.PermissionMode == PermissionDeny {
			prefix = "reject"
		}
		opt, ok := req.FirstOption(prefix)
		if !ok {
			t.p.Sink.Notice(fmt.Sprintf("Permission for %q answered cancelled: the agent offered no %s option.", title, prefix))
			return acp.PermissionOutcome{}
		}
		t.p.Sink.Notice(fmt.Sprintf("Permission for %q answered automatically (turn.permission_mode = %s): %s.", title, cfg.PermissionMode, opt.Name))
		return acp.PermissionOutcome{OptionID: opt.OptionID}
	}
	askCtx, cancel := context.WithTimeoutCause(ctx, cfg.PermissionTimeout,
		fmt.Errorf("no answer within %s", shortDuration(cfg.PermissionTimeout)))
	defer cancel()
	out := t.p.Sink.Ask(askCtx, req)
	if askCtx.Err() != nil {
		if ctx.Err() == nil {
			t.p.Sink.Notice(fmt.Sprintf("Permission for %q was not answered within %s; answered cancelled.", title, shortDuration(cfg.PermissionTimeout)))
		}
		return acp.PermissionOutcome{}
	}
	return out
}
