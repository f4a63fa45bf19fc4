package faults

import (
	"strings"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
)

// A hung agent never parks a thread: with turn.timeout = 2s, an agent
// that goes silent (whether or not it honours session/cancel) ends its
// turn with "timed out after 2s" within about 2s plus the cancel grace,
// what it had written stays on screen, and the next message in the thread
// is answered. Sandboxed or not, the agent killed for ignoring the cancel
// leaves none of its processes on the host.
func TestHang_SilentAgentTimesOutAndTheThreadGoesOn(t *testing.T) {
	for _, sandbox := range []string{"bwrap", "none"} {
		t.Run(sandbox, func(t *testing.T) {
			if sandbox == "bwrap" {
				needBwrap(t)
			}
			silentAgentTimesOut(t, sandbox)
		})
	}
}

func silentAgentTimesOut(t *testing.T, sandbox string) {
	const timeout, grace = 2 * time.Second, 500 * time.Millisecond
	w := newWorld(t, setup{conf: settings{"turn.timeout": "2s", "turn.cancel_grace": "500ms", "agent.sandbox": sandbox}})
	w.start()

	// An agent that answers the cancel once the ceiling passes: the turn
	// fails in words and the same agent serves the next message.
	sent := time.Now()
	thread := w.mention(alice, "hang")
	working := w.awaitBotText(thread, "working…")
	pid := w.agentPID(thread, alice)
	got := w.awaitAnswers(thread, 1)[0]
	checkTimedOut(t, w, thread, working.ID, got, sent, timeout, grace)
	w.awaitReaction(w.Channel, thread, "❌")

	w.Discord.Post(thread, alice, "stream 2")
	got = w.awaitAnswers(thread, 2)[1]
	if !strings.HasPrefix(got.Text, "chunk 1\nchunk 2") || !strings.HasPrefix(got.Footer, "-# ✅ done") {
		t.Fatalf("the message after the timeout got %q", got.Text)
	}
	if after := w.agentPID(thread, alice); after != pid {
		t.Errorf("agent pid %d became %d: an agent that answered the cancel was replaced", pid, after)
	}

	// An agent that ignores the cancel too: the same promise, and a fresh
	// agent answers next.
	sent = time.Now()
	before := len(w.Discord.BotMessages(thread))
	hung := w.Discord.Post(thread, alice, "ignore-cancel")
	working = w.awaitNewBotText(thread, "working…", before)
	procs := w.agentProcs(1) // the thread's agent is the World's only one
	got = w.awaitAnswers(thread, 3)[2]
	checkTimedOut(t, w, thread, working.ID, got, sent, timeout, grace)
	w.awaitReaction(thread, hung, "❌")
	goneFromHost(t, "the agent killed at the ceiling", procs)

	// The killed agent took its session along, and the thread is told.
	w.Discord.Post(thread, alice, "stream 3")
	got = w.awaitAnswers(thread, 4)[3]
	text, fresh := freshSession(got.Text)
	if !fresh || !strings.HasPrefix(text, "chunk 1\nchunk 2\nchunk 3") || !strings.HasPrefix(got.Footer, "-# ✅ done") {
		t.Fatalf("the message after the second timeout got %q, want a new session's answer", got.Text)
	}
}

// checkTimedOut checks a timed-out answer: the cause in words, the
// partial answer kept, and the time it took.
func checkTimedOut(t *testing.T, w *world, thread, workingID string, got brokertest.Answer, sent time.Time, timeout, grace time.Duration) {
	t.Helper()
	if !strings.HasPrefix(got.Footer, "-# ❌ failed: timed out after 2s") {
		t.Fatalf("the turn ended with %q, want the timeout in words", got.Footer)
	}
	if !strings.HasPrefix(got.Text, "working…") {
		t.Errorf("the partial answer was lost: %q", got.Text)
	}
	end := w.Discord.SeenAt(thread, got.Msgs[len(got.Msgs)-1].ID, got.Footer)
	start := w.Discord.SeenAt(thread, workingID, "working…")
	within(t, "from the message to the timeout", end.Sub(sent), timeout, timeout+grace+8*time.Second)
	within(t, "from the first words to the timeout", end.Sub(start), timeout-500*time.Millisecond, timeout+grace+5*time.Second)
}
