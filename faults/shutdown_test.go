package faults

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"acpbroker/internal/agenttest"
	"acpbroker/internal/fakediscord"
)

// At the default graces (turn.cancel_grace 10s, agent.exit_grace 2s,
// shutdown.grace 15s), SIGTERM with ten busy agents that ignore
// session/cancel, EOF and SIGTERM ends the broker within shutdown.grace
// and a small constant: the turns' graces, the agents' stop steps and
// Discord's close all share the one deadline. Every agent group is
// killed, and every thread is told why its turn ended.
func TestShutdown_AtTheDefaultsTenHungAgentsStayWithinTheGrace(t *testing.T) {
	w := newWorld(t, setup{conf: settings{
		"agent.args":        []string{"--ignore-term", "--no-exit-on-eof"},
		"agent.exit_grace":  nil, // the defaults, not the harness's short ones
		"turn.cancel_grace": nil,
		"shutdown.grace":    nil,
		"pool.max_sessions": 10,
	}})
	b := w.start()
	var threads []string
	for range 10 {
		thread := w.mention(alice, "ignore-cancel")
		w.awaitBotText(thread, "working…")
		threads = append(threads, thread)
	}
	pids := w.AgentPIDs()
	if len(pids) < 10 {
		t.Fatalf("%d agents running, want 10", len(pids))
	}
	took := sigtermWithinTheDefaultGrace(t, b)
	for _, pid := range pids {
		if agenttest.Running(pid) {
			t.Errorf("agent %d outlived the broker", pid)
		}
	}
	toldShuttingDown(t, w, threads)
	t.Logf("ten hung agents at the default graces: shutdown took %s", took.Round(time.Millisecond))
}

// The same bound holds when what is open at SIGTERM is more than turns:
// terminals whose commands ignore SIGTERM and leave a grandchild, the
// agent's questions and permission requests waiting for a person, and
// agents that ignore cancel, EOF and SIGTERM, all at the default graces.
// Every terminal's command and grandchild, and every agent, is gone when
// the broker has exited, and every thread is told.
func TestShutdown_AtTheDefaultsTerminalsAndOpenQuestionsStayWithinTheGrace(t *testing.T) {
	// Unsandboxed, so the pids the agents report are the host's.
	w := newWorld(t, setup{conf: settings{
		"agent.sandbox":     "none",
		"agent.args":        []string{"--ignore-term", "--no-exit-on-eof"},
		"agent.exit_grace":  nil,
		"turn.cancel_grace": nil,
		"shutdown.grace":    nil,
		"pool.max_sessions": 10,
	}})
	b := w.start()
	var threads []string
	var commands []int
	for range 4 {
		thread := w.mention(alice, "terminal-ignore-term")
		// The terminal's output, under its command line, names them.
		said := w.awaitBotText(thread, "\nshell ").Content
		var grandchild, shell int
		fmt.Sscanf(said[strings.Index(said, "\ngrandchild "):], "\ngrandchild %d\nshell %d", &grandchild, &shell)
		if !agenttest.Running(grandchild) || !agenttest.Running(shell) {
			t.Fatalf("terminal processes %d and %d not running (%q)", grandchild, shell, said)
		}
		commands = append(commands, grandchild, shell)
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
	for range 2 {
		thread := w.mention(alice, "ignore-cancel")
		w.awaitBotText(thread, "working…")
		threads = append(threads, thread)
	}
	b.awaitMetric("acp_broker_terminals_open", func(v float64) bool { return v == 4 })
	b.awaitMetric("acp_broker_acp_pending_elicitations", func(v float64) bool { return v == 2 })
	pids := w.AgentPIDs()
	if len(pids) < 10 {
		t.Fatalf("%d agents running, want 10", len(pids))
	}

	took := sigtermWithinTheDefaultGrace(t, b)
	for _, pid := range append(pids, commands...) {
		// Reaping a killed group takes a moment after the broker's exit.
		if !agenttest.WaitGone(pid, 2*time.Second) {
			t.Errorf("process %d outlived the broker", pid)
		}
	}
	toldShuttingDown(t, w, threads)
	t.Logf("terminals, questions, permission requests and hung agents at the default graces: shutdown took %s", took.Round(time.Millisecond))
}

// sigtermWithinTheDefaultGrace sends b SIGTERM and checks that it exits
// with status 0 within the default shutdown.grace (15s) and a small
// constant; it returns how long the shutdown took.
func sigtermWithinTheDefaultGrace(t *testing.T, b *broker) time.Duration {
	t.Helper()
	const grace, slack = 15 * time.Second, 750 * time.Millisecond
	start := time.Now()
	b.Signal(syscall.SIGTERM)
	select {
	case <-b.Done():
	case <-time.After(2 * grace):
		t.Fatalf("the broker still runs %s after SIGTERM", 2*grace)
	}
	took := time.Since(start)
	if took > grace+slack {
		t.Errorf("shutdown took %s, want within shutdown.grace (%s) + %s", took.Round(time.Millisecond), grace, slack)
	}
	if code := b.ExitCode(); code != 0 {
		t.Errorf("exit status %d after SIGTERM", code)
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
