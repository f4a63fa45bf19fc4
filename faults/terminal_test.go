package faults

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/agenttest"
)

// A command an agent runs through the broker's terminal shows its output
// live in the thread, and /cancel ends it: the shell, which ignores
// nothing, and its sleeping grandchild are gone, no terminal stays open,
// and the agent, which answered the cancel, serves the next message.
func TestTerminal_SlashCancelKillsTheCommandAndItsGrandchild(t *testing.T) {
	// Unsandboxed, so the pids the agent reports are the host's.
	w := newWorld(t, setup{conf: settings{"agent.sandbox": "none"}})
	b := w.start()
	thread := w.mention(alice, "terminal-long")
	var grandchild, shell int
	said := w.awaitBotText(thread, "grandchild:").Content
	fmt.Sscanf(said[strings.Index(said, "grandchild:"):], "grandchild:%d shell:%d", &grandchild, &shell)
	if !agenttest.Running(grandchild) || !agenttest.Running(shell) {
		t.Fatalf("terminal processes %d and %d not running", grandchild, shell)
	}
	// The tool call shows the terminal's last lines as they come.
	if m := w.awaitBotText(thread, "tick\ntick"); !strings.Contains(m.Content, "`sh -c ") || !strings.Contains(m.Content, "```\n") {
		t.Errorf("the live terminal is shown as %q", m.Content)
	}
	b.awaitMetric("acp_broker_terminals_open", func(v float64) bool { return v == 1 })
	agent := w.agentPID(thread, alice)

	r := w.slash(thread, alice, "cancel")
	if !strings.Contains(r.Content, "cancelled the current turn") {
		t.Fatalf("/cancel answered %+v", r)
	}
	got := w.awaitAnswers(thread, 1)[0]
	if !strings.HasPrefix(got.Footer, "-# ⏹️ cancelled by Alice") {
		t.Fatalf("the turn ended with %q", got.Footer)
	}
	for what, pid := range map[string]int{"shell": shell, "grandchild": grandchild} {
		if !agenttest.WaitGone(pid, 10*time.Second) {
			t.Errorf("the terminal's %s (pid %d) outlived the cancelled turn", what, pid)
		}
	}
	b.awaitMetric("acp_broker_terminals_open", func(v float64) bool { return v == 0 })

	w.Discord.Post(thread, alice, "terminal echo after")
	got = w.awaitAnswers(thread, 2)[1]
	if !strings.Contains(got.Text, "after") || !strings.HasPrefix(got.Footer, "-# ✅ done") {
		t.Fatalf("the next message got %q / %q", got.Text, got.Footer)
	}
	if pid := w.agentPID(thread, alice); pid != agent {
		t.Errorf("the next message ran on agent %d, want the same agent %d", pid, agent)
	}
}

// agent.max_terminals and agent.max_terminal_bytes reach the agent's
// connection: a third terminal at once is refused saying why, and a
// command that prints 8.9 kB keeps its last kilobyte.
func TestTerminal_BoundsFromTheConfiguration(t *testing.T) {
	w := newWorld(t, setup{conf: settings{"agent.max_terminals": "2", "agent.max_terminal_bytes": "1024"}})
	w.start()
	thread := w.mention(alice, "terminals 3")
	got := w.awaitAnswers(thread, 1)[0]
	if !strings.Contains(got.Text, "opened 2 of 3") || !strings.Contains(got.Text, "this session has 2 open, the most allowed; release one first") {
		t.Fatalf("three terminals at once: %q", got.Text)
	}
	w.Discord.Post(thread, alice, "terminal seq 2000")
	got = w.awaitAnswers(thread, 2)[1]
	_, out, ok := strings.Cut(got.Text, "truncated: true\n")
	out, _, _ = strings.Cut(out, "\n-# ") // the footer
	if !ok || len(out) > 1024 || len(out) < 1000 || !strings.HasSuffix(strings.TrimSpace(out), "1999\n2000") {
		t.Fatalf("seq 2000 with 1 KiB kept: %q", got.Text)
	}
}
