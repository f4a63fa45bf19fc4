package faults

import (
	"strings"
	"testing"
	"time"
)

// A hung agent never parks a thread: with turn.timeout = 2s, an agent
// that goes silent (whether or not it honours session/cancel) ends its
// turn with "timed out after 2s" within about 2s plus the cancel grace,
// what it had written stays on screen, and the next message in the thread
// is answered. Sandboxed or not, the agent killed for ignoring the cancel
// leaves none of its processes on the host. On every platform.
func TestHang_SilentAgentTimesOutAndTheThreadGoesOn(t *testing.T) {
	forEachPlatform(t, func(t *testing.T, platform string) {
		for _, sandbox := range []string{"bwrap", "none"} {
			t.Run(sandbox, func(t *testing.T) {
				if sandbox == "bwrap" {
					needBwrap(t)
				}
				silentAgentTimesOut(t, platform, sandbox)
			})
		}
	})
}

func silentAgentTimesOut(t *testing.T, platform, sandbox string) {
	const timeout, grace = 2 * time.Second, 500 * time.Millisecond
	w, f := newWorldOn(t, platform, setup{conf: settings{"turn.timeout": "2s", "turn.cancel_grace": "500ms", "agent.sandbox": sandbox}})
	w.start()

	// An agent that answers the cancel once the ceiling passes: the turn
	// fails in words and the same agent serves the next message.
	sent := time.Now()
	thread := f.mention(pAlice, "hang")
	working := f.awaitBotText(thread, "working…", 0)
	pid := f.agentPID(thread, pAlice)
	got := f.awaitAnswers(thread, 1)[0]
	checkTimedOut(t, f, thread, working.id, got, sent, timeout, grace)
	f.awaitReaction(thread, thread, "❌")

	f.post(thread, pAlice, "stream 2")
	got = f.awaitAnswers(thread, 2)[1]
	if !strings.HasPrefix(got.text, "chunk 1\nchunk 2") || !strings.HasPrefix(got.footer, "-# ✅ done") {
		t.Fatalf("the message after the timeout got %q", got.text)
	}
	if after := f.agentPID(thread, pAlice); after != pid {
		t.Errorf("agent pid %d became %d: an agent that answered the cancel was replaced", pid, after)
	}

	// An agent that ignores the cancel too: the same promise, and a fresh
	// agent answers next.
	sent = time.Now()
	before := len(f.botMessages(thread))
	hung := f.post(thread, pAlice, "ignore-cancel")
	working = f.awaitBotText(thread, "working…", before)
	procs := w.agentProcs(1) // the thread's agent is the World's only one
	got = f.awaitAnswers(thread, 3)[2]
	checkTimedOut(t, f, thread, working.id, got, sent, timeout, grace)
	f.awaitReaction(thread, hung, "❌")
	goneFromHost(t, "the agent killed at the ceiling", procs)

	// The killed agent took its session along, and the thread is told.
	f.post(thread, pAlice, "stream 3")
	got = f.awaitAnswers(thread, 4)[3]
	text, fresh := freshSession(got.text)
	if !fresh || !strings.HasPrefix(text, "chunk 1\nchunk 2\nchunk 3") || !strings.HasPrefix(got.footer, "-# ✅ done") {
		t.Fatalf("the message after the second timeout got %q, want a new session's answer", got.text)
	}
}

// checkTimedOut checks a timed-out answer: the cause in words, the
// partial answer kept, and the time it took.
func checkTimedOut(t *testing.T, f front, thread, workingID string, got answer, sent time.Time, timeout, grace time.Duration) {
	t.Helper()
	if !strings.HasPrefix(got.footer, "-# ❌ failed: timed out after 2s") {
		t.Fatalf("the turn ended with %q, want the timeout in words", got.footer)
	}
	if !strings.HasPrefix(got.text, "working…") {
		t.Errorf("the partial answer was lost: %q", got.text)
	}
	end := f.seenAt(thread, got.ids[len(got.ids)-1], got.footer)
	start := f.seenAt(thread, workingID, "working…")
	within(t, "from the message to the timeout", end.Sub(sent), timeout, timeout+grace+8*time.Second)
	within(t, "from the first words to the timeout", end.Sub(start), timeout-500*time.Millisecond, timeout+grace+5*time.Second)
}
