package faults

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"acpbroker/internal/fakediscord"
)

// Shutdown takes what one agent is allowed, not what the slowest takes:
// at the default graces (turn.cancel_grace 10s, agent.exit_grace 2s,
// shutdown.grace 15s), SIGTERM with ten busy agents that ignore
// session/cancel, EOF and SIGTERM ends the broker within 8s, sandboxed
// or not. Each agent is still given every step (its cancel, a wait for
// its answer, stdin closed, SIGTERM), all of them at once; none of its
// processes is left on the host, and every thread is told why its turn
// ended.
func TestShutdown_AtTheDefaultsTenAgentsIgnoringCancelAreGoneWithin8s(t *testing.T) {
	for _, sandbox := range []string{"bwrap", "none"} {
		t.Run(sandbox, func(t *testing.T) {
			if sandbox == "bwrap" {
				needBwrap(t)
			}
			w := newWorld(t, setup{conf: atTheDefaults(sandbox, "--ignore-term", "--no-exit-on-eof")})
			b := w.start()
			threads := busyThreads(w, 10, "ignore-cancel")
			took := sigtermWithin(t, w, b, 8*time.Second)
			toldShuttingDown(t, w, threads)
			t.Logf("ten agents ignoring cancel, EOF and SIGTERM (%s), at the default graces: shutdown took %s", sandbox, took.Round(time.Millisecond))
		})
	}
}

// Agents that answer the cancel and exit at EOF cost the shutdown next to
// nothing: at the default graces, SIGTERM with ten busy agents that
// honour session/cancel ends the broker within 1.5s, sandboxed or not,
// and every thread is told why its turn ended.
func TestShutdown_AtTheDefaultsTenAgentsHonouringCancelAreGoneWithin1500ms(t *testing.T) {
	for _, sandbox := range []string{"bwrap", "none"} {
		t.Run(sandbox, func(t *testing.T) {
			if sandbox == "bwrap" {
				needBwrap(t)
			}
			w := newWorld(t, setup{conf: atTheDefaults(sandbox)})
			b := w.start()
			threads := busyThreads(w, 10, "hang")
			took := sigtermWithin(t, w, b, 1500*time.Millisecond)
			toldShuttingDown(t, w, threads)
			t.Logf("ten agents honouring cancel (%s), at the default graces: shutdown took %s", sandbox, took.Round(time.Millisecond))
		})
	}
}

// atTheDefaults are the settings of a shutdown test: the default graces,
// not the harness's short ones, room for ten agents, the agent's args
// and the sandbox.
func atTheDefaults(sandbox string, args ...string) settings {
	return settings{
		"agent.sandbox":     sandbox,
		"agent.args":        args,
		"agent.exit_grace":  nil,
		"turn.cancel_grace": nil,
		"shutdown.grace":    nil,
		"pool.max_sessions": 10,
	}
}

// busyThreads opens n threads whose turns run prompt and shows them
// working, and checks that n agents run.
func busyThreads(w *world, n int, prompt string) []string {
	w.t.Helper()
	var threads []string
	for range n {
		thread := w.mention(alice, prompt)
		w.awaitBotText(thread, "working…")
		threads = append(threads, thread)
	}
	if agents := w.AgentPIDs(); len(agents) < n {
		w.t.Fatalf("%d agents running, want %d", len(agents), n)
	}
	return threads
}

// The same bound holds when what is open at SIGTERM is more than turns:
// terminals whose commands ignore SIGTERM and leave a grandchild, the
// agent's questions and permission requests waiting for a person, and
// agents that ignore cancel, EOF and SIGTERM, all at the default graces,
// sandboxed or not. Every terminal's command and grandchild, and every
// agent, is gone when the broker has exited, and every thread is told.
func TestShutdown_AtTheDefaultsTerminalsAndOpenQuestionsAreGoneWithin8s(t *testing.T) {
	for _, sandbox := range []string{"bwrap", "none"} {
		t.Run(sandbox, func(t *testing.T) {
			if sandbox == "bwrap" {
				needBwrap(t)
			}
			w := newWorld(t, setup{conf: atTheDefaults(sandbox, "--ignore-term", "--no-exit-on-eof")})
			b := w.start()
			var threads []string
			for range 4 {
				thread := w.mention(alice, "terminal-ignore-term")
				// The terminal's output, under its command line, names
				// them (in the sandbox's own PID namespace when there is
				// one).
				said := w.awaitBotText(thread, "\nshell ").Content
				var grandchild, shell int
				fmt.Sscanf(said[strings.Index(said, "\ngrandchild "):], "\ngrandchild %d\nshell %d", &grandchild, &shell)
				if grandchild == 0 || shell == 0 {
					t.Fatalf("the terminal did not name its processes: %q", said)
				}
				threads = append(threads, thread)
			}
			for range 2 {
				thread := w.mention(alice, "elicit-form")
				w.awaitBotText(thread, "The agent asks")
				threads = append(threads, thread)
			}
			for range 2 {
				thread := w.mention(alice, "permission")
				w.permissionRequest(thread)
				threads = append(threads, thread)
			}
			threads = append(threads, busyThreads(w, 2, "ignore-cancel")...)
			b.awaitMetric("acp_broker_terminals_open", func(v float64) bool { return v == 4 })
			b.awaitMetric("acp_broker_acp_pending_elicitations", func(v float64) bool { return v == 2 })
			if agents := w.AgentPIDs(); len(agents) < 10 {
				t.Fatalf("%d agents running, want 10", len(agents))
			}
			// Each terminal's shell, its grandchild and its sleeps, by
			// their command lines, are among what is checked after.
			shells := 0
			for _, p := range w.AgentProcs() {
				if strings.Contains(p.Cmdline, "sleep 300") {
					shells++
				}
			}
			if shells < 4 {
				t.Fatalf("%d terminals' grandchildren seen from the host, want 4: %+v", shells, w.AgentProcs())
			}

			took := sigtermWithin(t, w, b, 8*time.Second)
			toldShuttingDown(t, w, threads)
			t.Logf("terminals, questions, permission requests and hung agents (%s) at the default graces: shutdown took %s", sandbox, took.Round(time.Millisecond))
		})
	}
}

// sigtermWithin sends b SIGTERM and checks that it exits with status 0
// within bound, and that no process of the World's agents is left on
// the host (reaping a killed sandbox takes a moment after the broker's
// exit); it returns how long the shutdown took.
func sigtermWithin(t *testing.T, w *world, b *broker, bound time.Duration) time.Duration {
	t.Helper()
	before := w.AgentProcs()
	start := time.Now()
	b.Signal(syscall.SIGTERM)
	select {
	case <-b.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("the broker still runs 30s after SIGTERM")
	}
	took := time.Since(start)
	if took > bound {
		t.Errorf("shutdown took %s, want within %s", took.Round(time.Millisecond), bound)
	}
	if code := b.ExitCode(); code != 0 {
		t.Errorf("exit status %d after SIGTERM", code)
	}
	for _, p := range w.LeftoverProcs(2 * time.Second) {
		t.Errorf("process %d (%s) of an agent outlived the broker", p.PID, p.Cmdline)
	}
	if len(before) == 0 {
		t.Error("no process of an agent was seen before the shutdown: the check after it proves nothing")
	}
	return took
}

// toldShuttingDown checks that each thread was told the broker is
// shutting down.
func toldShuttingDown(t *testing.T, w *world, threads []string) {
	t.Helper()
	for _, thread := range threads {
		told := slices.ContainsFunc(w.Discord.BotMessages(thread), func(m fakediscord.Message) bool {
			return strings.Contains(m.Content, "broker shutting down")
		})
		if !told {
			t.Errorf("thread %s was not told the broker is shutting down", thread)
		}
	}
}
