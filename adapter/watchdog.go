package adapter

import (
	"fmt"
	"time"
)

// watchdog looks at every running turn once per WatchdogInterval, apart
// from the turn loops' own timers, and ends what is stuck: a turn whose
// tool call has made no progress for ToolTimeout is cancelled the usual
// way; a turn past its ceiling whose loop did not end it is ended from
// outside. It stops when the engine closes.
func (e *Engine) watchdog() {
	for {
		t := time.NewTimer(e.config().WatchdogInterval)
		select {
		case <-e.ctx.Done():
			t.Stop()
			return
		case now := <-t.C:
			e.check(now)
			e.pruneUsage()
		}
	}
}

func (e *Engine) check(now time.Time) {
	e.mu.Lock()
	var running []*turn
	for _, th := range e.threads {
		if th.cur != nil {
			running = append(running, th.cur)
		}
	}
	e.mu.Unlock()
	interval := e.config().WatchdogInterval
	for _, t := range running {
		if cause := overdue(t, now, interval); cause != nil {
			e.forceEnd(t, cause)
		} else if cause := stuckTool(t, now); cause != nil {
			e.mu.Lock()
			e.stats.ToolStuck++
			e.mu.Unlock()
			log := t.logger()
			log.Warn().Str("cause", cause.Error()).Str("action", "cancel_stuck_tool").Msg("watchdog: tool call stuck; cancelling the turn")
			t.end(cause)
		}
	}
}

// overdue reports a turn that its own loop should have ended by now: past
// the ceiling, the cancel grace and one more watchdog interval.
func overdue(t *turn, now time.Time, interval time.Duration) error {
	t.mu.Lock()
	sent := t.sent
	t.mu.Unlock()
	limit := t.start.Add(t.cfg.SlotWait + t.cfg.TurnTimeout)
	if !sent.IsZero() {
		limit = sent.Add(t.cfg.TurnTimeout + t.cfg.CancelGrace + interval)
	}
	if now.Before(limit) {
		return nil
	}
	return fmt.Errorf("%w (ended by the watchdog: the turn did not stop by itself)", timedOut(t.cfg.TurnTimeout))
}

// stuckTool reports an open tool call with no update for ToolTimeout in a
// turn with no other progress for as long. A tool call waiting on a
// permission request is not stuck: the request has its own timeout.
func stuckTool(t *turn, now time.Time) error {
	limit := t.cfg.ToolTimeout
	if limit <= 0 {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.asking > 0 || now.Sub(t.progress) < limit {
		return nil
	}
	for _, tc := range t.open {
		if now.Sub(tc.updated) >= limit {
			title := tc.title
			if title == "" {
				title = "a tool call"
			}
			return fmt.Errorf("%w for %s: %s", ErrToolStuck, shortDuration(limit), title)
		}
	}
	return nil
}

// forceEnd ends a turn from outside its loop: the agent's process group is
// killed, the thread is told, the journal records it, and the thread's
// queue goes to a new worker. Whatever the old loop does later is ignored.
func (e *Engine) forceEnd(t *turn, cause error) {
	e.mu.Lock()
	th := e.threads[t.thread]
	if th == nil || th.cur != t {
		e.mu.Unlock()
		return
	}
	th.cur = nil
	e.stats.ForceEnded++
	e.startWorkerLocked(th)
	e.mu.Unlock()
	log := t.logger()
	log.Error().Str("cause", cause.Error()).Str("action", "force_end").Msg("watchdog: turn past its ceiling; killing its agent")
	t.end(cause)
	e.pool.Discard(t.thread)
	t.finish(Outcome{Err: cause})
}
