package faults

import (
	"strings"
	"testing"
	"time"

	"acpbroker/internal/agenttest"
)

// /cancel stops even an agent that ignores session/cancel: the turn ends
// "cancelled by Alice" about turn.cancel_grace after the command, the
// agent that did not answer is killed, and the next message is answered
// by a fresh agent, which says it is a new session.
func TestIgnoreCancel_SlashCancelKillsTheAgentAfterTheGrace(t *testing.T) {
	const grace = time.Second
	w := newWorld(t, setup{conf: settings{"turn.timeout": "5m", "turn.cancel_grace": "1s"}})
	w.start()
	thread := w.mention(alice, "ignore-cancel")
	w.awaitBotText(thread, "working…")
	pid := w.agentPID(thread, alice)
	if pid == 0 {
		t.Fatal("/status shows no agent while the turn runs")
	}

	cancelled := time.Now()
	r := w.slash(thread, alice, "cancel")
	if r.Ephemeral() || !strings.Contains(r.Content, "<@"+alice.ID+"> cancelled the current turn") {
		t.Fatalf("/cancel answered %+v", r)
	}
	got := w.awaitAnswers(thread, 1)[0]
	if !strings.HasPrefix(got.Footer, "-# ⏹️ cancelled by Alice") {
		t.Fatalf("the turn ended with %q, want who cancelled it", got.Footer)
	}
	if !strings.HasPrefix(got.Text, "working…") {
		t.Errorf("the partial answer was lost: %q", got.Text)
	}
	end := w.Discord.SeenAt(thread, got.Msgs[len(got.Msgs)-1].ID, got.Footer)
	within(t, "from /cancel to the end of the turn", end.Sub(cancelled), grace-200*time.Millisecond, grace+5*time.Second)
	w.awaitReaction(w.Channel, thread, "⏹️")
	if !agenttest.WaitGone(pid, 10*time.Second) {
		t.Fatalf("the agent that ignored the cancel (pid %d) is still running", pid)
	}

	w.Discord.Post(thread, alice, "stream 2")
	got = w.awaitAnswers(thread, 2)[1]
	text, fresh := freshSession(got.Text)
	if !fresh || !strings.HasPrefix(text, "chunk 1\nchunk 2") || !strings.HasPrefix(got.Footer, "-# ✅ done") {
		t.Fatalf("the message after the cancel got %q, want a new session's answer", got.Text)
	}
	if fresh := w.agentPID(thread, alice); fresh == 0 || fresh == pid {
		t.Fatalf("the next message ran on agent %d, want a fresh one (not %d)", fresh, pid)
	}
}
