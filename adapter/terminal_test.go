package adapter

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/acp/host"
	"acpbroker/internal/agenttest"
	"acpbroker/pool"
)

// awaitUpdate waits for an update the sink got that ok accepts.
func (r *recorder) awaitUpdate(t *testing.T, what string, ok func(acp.Update) bool) acp.Update {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, u := range r.updateList() {
			if ok(u) {
				return u
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sink never got %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// terminalPIDs waits for the agent to say the pids of its terminal's
// shell and grandchild.
func (r *recorder) terminalPIDs(t *testing.T) (grandchild, shell int) {
	t.Helper()
	u := r.awaitUpdate(t, "the terminal's pids", func(u acp.Update) bool {
		return u.Kind == acp.UpdateMessageChunk && u.Content != nil && strings.HasPrefix(u.Content.Text, "grandchild:")
	})
	fmt.Sscanf(u.Content.Text, "grandchild:%d shell:%d", &grandchild, &shell)
	if grandchild == 0 || shell == 0 || !agenttest.Running(grandchild) || !agenttest.Running(shell) {
		t.Fatalf("terminal processes %q not running", u.Content.Text)
	}
	return grandchild, shell
}

func terminalRig(t *testing.T) *rig {
	return newRig(t, nil, pool.Config{Env: []string{"PATH=" + os.Getenv("PATH")}, ExitGrace: 300 * time.Millisecond}, Config{})
}

// A cancelled turn kills the commands its agent ran through the broker,
// their grandchildren too, SIGTERM or not; the agent, which answered the
// cancel, is kept, and no terminal stays open.
func TestTurn_CancelKillsTheTerminalsWithTheirGrandchildren(t *testing.T) {
	r := terminalRig(t)
	for _, mode := range []string{"terminal-long", "terminal-ignore-term"} {
		rec := r.prompt("t", mode)
		grandchild, shell := rec.terminalPIDs(t)
		r.engine.Cancel("t", CancelledBy("tester"))
		if o := rec.wait(t, 10*time.Second); !strings.Contains(fmt.Sprint(o.Err), "cancelled by tester") {
			t.Fatalf("%s: outcome %+v", mode, o)
		}
		for _, pid := range []int{grandchild, shell} {
			if !agenttest.WaitGone(pid, 5*time.Second) {
				t.Fatalf("%s: terminal process %d outlived the cancelled turn", mode, pid)
			}
		}
		waitThreads(t, r.engine, 0)
		if s := r.engine.Stats().Pool; s.Conn.TerminalsOpen != 0 || s.Spawned != 1 {
			t.Fatalf("%s: pool after the cancel: %d terminals open, %d agents spawned", mode, s.Conn.TerminalsOpen, s.Spawned)
		}
	}
}

// Many abandoned turns, each with a terminal running, leave the terminal
// table empty and the agent's cap never reached.
func TestLeak_AbandonedTurnsLeaveNoTerminalOpen(t *testing.T) {
	r := terminalRig(t)
	for i := range 3 * host.DefaultMaxTerminals {
		rec := r.prompt("t", "terminal-long")
		rec.terminalPIDs(t)
		r.engine.Cancel("t", CancelledBy("tester"))
		if o := rec.wait(t, 10*time.Second); o.Err == nil {
			t.Fatalf("turn %d: outcome %+v", i, o)
		}
	}
	waitThreads(t, r.engine, 0)
	if s := r.engine.Stats().Pool; s.Conn.TerminalsOpen != 0 || s.Spawned != 1 || s.Conn.AgentRequests != 0 {
		t.Fatalf("after %d abandoned turns: %+v", 3*host.DefaultMaxTerminals, s)
	}
}

// The sink sees a terminal's output as it grows, on the tool call that
// holds it, and the end of a terminal the agent already released.
func TestTurn_TerminalOutputReachesTheSink(t *testing.T) {
	r := terminalRig(t)
	rec := r.prompt("t", "terminal-long")
	rec.awaitUpdate(t, "the live output", func(u acp.Update) bool {
		return u.Terminal != nil && u.ToolCallID == "call-t" && strings.Contains(u.Terminal.Output, "tick\ntick\n")
	})
	r.engine.Cancel("t", CancelledBy("tester"))
	rec.wait(t, 10*time.Second)

	rec = r.prompt("t", "terminal echo hello")
	if o := rec.wait(t, 10*time.Second); o.Err != nil || !strings.Contains(o.Text, "hello") {
		t.Fatalf("outcome %+v", o)
	}
	u := rec.awaitUpdate(t, "the released terminal's end", func(u acp.Update) bool { return u.Terminal != nil && u.Terminal.Exit != nil })
	if u.Terminal.Output != "hello\n" || u.Terminal.Exit == nil || u.Terminal.Exit.String() != "exit status 0" {
		t.Fatalf("terminal shown as %+v", u.Terminal)
	}
}

// A terminal's output is shown after the tool call that holds it, never
// before: a thread drops output it has no tool call to put under, and a
// command that printed all it prints before the tool call was shown would
// never be shown at all.
func TestTurn_TerminalOutputFollowsItsToolCall(t *testing.T) {
	r := terminalRig(t)
	rec := r.prompt("t", "terminal echo hello")
	if o := rec.wait(t, 10*time.Second); o.Err != nil {
		t.Fatalf("outcome %+v", o)
	}
	rec.mu.Lock()
	updates := append([]acp.Update(nil), rec.updates...)
	rec.mu.Unlock()
	called, shown := false, false
	for _, u := range updates {
		switch {
		case u.Kind == acp.UpdateToolCall && u.ToolCallID == "call-t":
			called = true
		case u.Terminal != nil && u.ToolCallID == "call-t":
			if !called {
				t.Fatalf("the terminal's output %q was given before its tool call", u.Terminal.Output)
			}
			shown = true
		}
	}
	if !called || !shown {
		t.Fatalf("tool call given: %v, its terminal shown: %v", called, shown)
	}
}

// A terminal printing is progress: its tool call, with no update from
// the agent for longer than turn.tool_timeout, is not stuck.
func TestWatchdog_ATerminalPrintingIsNotStuck(t *testing.T) {
	r := newRig(t, nil, pool.Config{Env: []string{"PATH=" + os.Getenv("PATH")}},
		Config{ToolTimeout: 1500 * time.Millisecond, WatchdogInterval: 100 * time.Millisecond})
	rec := r.prompt("t", "terminal-long")
	rec.terminalPIDs(t)
	select {
	case o := <-rec.done:
		t.Fatalf("the turn ended while its terminal printed: %+v", o)
	case <-time.After(4 * time.Second):
	}
	r.engine.Cancel("t", CancelledBy("tester"))
	if o := rec.wait(t, 10*time.Second); !strings.Contains(fmt.Sprint(o.Err), "cancelled by tester") {
		t.Fatalf("outcome %+v", o)
	}
}
