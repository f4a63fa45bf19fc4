package adapter

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"acpbroker/acp"
	"acpbroker/internal/agenttest"
	"acpbroker/pool"

	"github.com/rs/zerolog"
)

// newBubbleRig is newRig with in-process agents and the engine's defaults;
// call it inside a synctest bubble, where time is virtual.
func newBubbleRig(t *testing.T, opts agenttest.InProcessOptions, cfg Config) *rig {
	t.Helper()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	p := pool.New(pool.Config{Launch: agenttest.InProcess(opts), Command: "fakeagent", WorkDir: t.TempDir(),
		MaxSessions: 4, Logger: log})
	cfg.Logger = log
	e := New(p, cfg)
	t.Cleanup(func() {
		e.Close()
		p.Close()
	})
	return &rig{t: t, pool: p, engine: e}
}

// The ceiling defaults to 30m: a hung agent that ignores cancel fails at
// 30m plus the default 10s cancel grace, not a moment sooner or later.
func TestTurn_DefaultCeilingIsThirtyMinutesPlusTheGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newBubbleRig(t, agenttest.InProcessOptions{}, Config{})
		start := time.Now()
		o := r.prompt("t", "ignore-cancel").wait(t, 2*time.Hour)
		if !errors.Is(o.Err, ErrTimeout) || o.Err.Error() != "timed out after 30m" {
			t.Fatalf("outcome = %v, want timed out after 30m", o.Err)
		}
		if took := time.Since(start); took != 30*time.Minute+10*time.Second {
			t.Fatalf("ended after %s, want 30m10s", took)
		}
	})
}

// Silence is not death: an agent that says nothing for 20 minutes but is
// alive (the liveness check passes 40 times) still delivers its answer.
func TestTurn_TwentyMinutesOfSilenceIsNotAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newBubbleRig(t, agenttest.InProcessOptions{}, Config{})
		o := r.prompt("t", "silent 20m").wait(t, 2*time.Hour)
		if o.Err != nil || !strings.Contains(o.Text, "done after silence") {
			t.Fatalf("outcome = %+v", o)
		}
	})
}

// The liveness check (every 30s by default) is the backstop: an agent
// that dies while its exit goes unnoticed and its stdout stays open is
// found at the next check, not at the ceiling.
func TestTurn_LivenessCheckFindsADeathTheExitWatcherMissed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newBubbleRig(t, agenttest.InProcessOptions{LoseExit: true, HoldStdout: true}, Config{})
		start := time.Now()
		o := r.prompt("t", "exit-after 45s").wait(t, 2*time.Hour)
		if !errors.Is(o.Err, ErrAgentUnhealthy) {
			t.Fatalf("outcome = %v, want the agent found dead", o.Err)
		}
		if took := time.Since(start); took != time.Minute {
			t.Fatalf("death at 45s noticed after %s, want at the 60s check", took)
		}
	})
}

// turn.liveness_interval is consumed: with 5s, the same death is found at
// 45s.
func TestTurn_LivenessIntervalKnob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newBubbleRig(t, agenttest.InProcessOptions{LoseExit: true, HoldStdout: true}, Config{LivenessInterval: 5 * time.Second})
		start := time.Now()
		o := r.prompt("t", "exit-after 42s").wait(t, 2*time.Hour)
		if took := time.Since(start); !errors.Is(o.Err, ErrAgentUnhealthy) || took != 45*time.Second {
			t.Fatalf("outcome %v after %s, want the agent found dead at 45s", o.Err, took)
		}
	})
}

// A cancel reaches an honest agent at once; an agent that ignores it is
// given the default 10s grace and then killed.
func TestTurn_CancelIsImmediateAndTheDefaultGraceIsTenSeconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newBubbleRig(t, agenttest.InProcessOptions{}, Config{})
		for _, tc := range []struct {
			prompt string
			want   time.Duration
		}{{"hang", 0}, {"ignore-cancel", 10 * time.Second}} {
			rec := r.prompt("t", tc.prompt)
			rec.waitWorking(t)
			synctest.Wait()
			start := time.Now()
			r.engine.Cancel("t", CancelledBy("bob"))
			o := rec.wait(t, time.Hour)
			if took := time.Since(start); o.Err == nil || o.Err.Error() != "cancelled by bob" || took != tc.want {
				t.Fatalf("%s: outcome %v after %s, want cancelled by bob after %s", tc.prompt, o.Err, took, tc.want)
			}
		}
	})
}

// A permission request nobody answers is answered "cancelled" after the
// default 5m, and the thread is told.
func TestTurn_DefaultPermissionTimeoutIsFiveMinutes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newBubbleRig(t, agenttest.InProcessOptions{}, Config{})
		rec := r.prompt("t", "permission")
		<-rec.asked
		start := time.Now()
		o := rec.wait(t, time.Hour)
		if took := time.Since(start); took != 5*time.Minute || !strings.Contains(o.Text, "permission cancelled") {
			t.Fatalf("outcome %+v after %s, want the agent told cancelled after 5m", o, took)
		}
		if n := rec.noticeList(); len(n) != 1 || n[0] != Notice(PermissionTimedOut{Tool: "Run rm -rf build", After: 5 * time.Minute}) {
			t.Fatalf("notices = %+v", n)
		}
	})
}

// Shutdown ends every busy thread in parallel: three agents that ignore
// cancel cost one grace, not three.
func TestTurn_ShutdownCancelsAllTurnsInParallel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newBubbleRig(t, agenttest.InProcessOptions{}, Config{})
		var recs []*recorder
		for _, th := range []string{"a", "b", "c"} {
			rec := r.prompt(th, "ignore-cancel")
			rec.waitWorking(t)
			recs = append(recs, rec)
		}
		synctest.Wait()
		start := time.Now()
		r.engine.Close()
		if took := time.Since(start); took != 10*time.Second {
			t.Fatalf("Close took %s, want one 10s grace", took)
		}
		for _, rec := range recs {
			if o := rec.wait(t, time.Second); !errors.Is(o.Err, ErrShutdown) {
				t.Fatalf("outcome = %v", o.Err)
			}
		}
	})
}

// turn.tool_timeout: a tool call that stays in_progress with no update,
// in a turn that makes no other progress, is cancelled by the watchdog
// after the tool timeout (plus at most one watchdog interval), not at the
// ceiling; the user reads why.
func TestWatchdog_StuckToolCallIsCancelledAfterTheToolTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newBubbleRig(t, agenttest.InProcessOptions{}, Config{ToolTimeout: 10 * time.Minute})
		start := time.Now()
		o := r.prompt("t", "tool-stuck").wait(t, 2*time.Hour)
		took := time.Since(start)
		if !errors.Is(o.Err, ErrToolStuck) || o.Err.Error() != "a tool call made no progress for 10m: Long build" {
			t.Fatalf("outcome = %v", o.Err)
		}
		if took < 10*time.Minute || took > 10*time.Minute+15*time.Second {
			t.Fatalf("cancelled after %s, want within one 15s watchdog interval of 10m", took)
		}
		if s := r.engine.Stats(); s.ToolStuck != 1 || s.Outcomes["tool_stuck"] != 1 {
			t.Fatalf("stats = %+v", s)
		}
	})
}

// A tool call that keeps reporting progress is not stuck, however long it
// runs; nor is one waiting for a person to answer a permission request.
func TestWatchdog_ProgressAndPermissionWaitsAreNotStuck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newBubbleRig(t, agenttest.InProcessOptions{}, Config{ToolTimeout: 10 * time.Minute, PermissionTimeout: time.Hour})
		o := r.prompt("a", "tool-progress 5m 5").wait(t, 2*time.Hour)
		if o.Err != nil || o.Text != "compiled" {
			t.Fatalf("a tool call updated every 5m for 25m: outcome %+v", o)
		}
		rec := newRecorder()
		rec.answer = func(ctx context.Context, req *acp.PermissionRequest) Answer {
			time.Sleep(25 * time.Minute) // a slow human
			return Answer{Outcome: acp.PermissionOutcome{OptionID: "allow"}, By: "u1"}
		}
		r.engine.Submit("b", &Prompt{Blocks: []acp.ContentBlock{acp.TextBlock("permission")}, Sink: rec})
		if o := rec.wait(t, 2*time.Hour); o.Err != nil || !strings.Contains(o.Text, "permission granted: allow") {
			t.Fatalf("a tool call waiting 25m on a permission: outcome %+v", o)
		}
	})
}

// A turn whose loop misses its abort (here it is blocked) is still ended by
// the watchdog once past its ceiling: the agent is killed, the thread is
// told, and the thread's next prompt runs.
func TestWatchdog_EndsATurnWhoseLoopMissedItsAbort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newBubbleRig(t, agenttest.InProcessOptions{}, Config{TurnTimeout: time.Minute})
		unblock := make(chan struct{})
		r.engine.loopHook = func(p *Prompt) {
			if p.Title == "stuck" {
				<-unblock
			}
		}
		rec := newRecorder()
		start := time.Now()
		r.engine.Submit("t", &Prompt{Title: "stuck", Blocks: []acp.ContentBlock{acp.TextBlock("hang")}, Sink: rec})
		rec.waitWorking(t)
		proc := r.pool.Lookup("t").Proc
		o := rec.wait(t, time.Hour)
		took := time.Since(start)
		if !errors.Is(o.Err, ErrTimeout) || !strings.Contains(o.Err.Error(), "ended by the watchdog") {
			t.Fatalf("outcome = %v", o.Err)
		}
		// ceiling 1m + cancel grace 10s + one interval, found at the next tick
		if took < time.Minute+25*time.Second || took > time.Minute+40*time.Second {
			t.Fatalf("force-ended after %s", took)
		}
		<-proc.Reaped()
		if o := r.prompt("t", "stream 2").wait(t, time.Hour); o.Err != nil || o.Text != "chunk 1\nchunk 2\n" {
			t.Fatalf("next prompt in the thread: %+v", o)
		}
		if s := r.engine.Stats(); s.ForceEnded != 1 {
			t.Fatalf("stats = %+v", s)
		}
		close(unblock)
		synctest.Wait()
		if rec.doneN != 1 {
			t.Fatalf("Done called %d times", rec.doneN)
		}
	})
}
