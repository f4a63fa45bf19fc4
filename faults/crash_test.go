package faults

import (
	"strings"
	"testing"
	"time"
)

// An agent that dies mid-turn is noticed at once: within a couple of
// seconds of its last words the user reads that the agent exited, with
// its exit status and the end of its stderr, and the next message in the
// thread is answered by a fresh agent. On every platform.
func TestCrash_AgentDeathIsToldWithStatusAndStderr(t *testing.T) {
	forEachPlatform(t, func(t *testing.T, platform string) {
		w, f := newWorldOn(t, platform, setup{conf: settings{"turn.timeout": "5m"}})
		b := w.start()
		thread := f.mention(pAlice, "crash 3")
		got := f.awaitAnswers(thread, 1)[0]
		if !strings.HasPrefix(got.footer, "-# ❌ failed: agent exited") {
			t.Fatalf("the turn ended with %q, want the agent's exit in words", got.footer)
		}
		for _, want := range []string{"status 3", "simulated crash"} {
			if !strings.Contains(got.footer, want) {
				t.Errorf("the failure %q does not say %q", got.footer, want)
			}
		}
		if !strings.HasPrefix(got.text, "about to crash") {
			t.Errorf("the partial answer was lost: %q", got.text)
		}
		said := f.seenAt(thread, got.ids[0], "about to crash")
		told := f.seenAt(thread, got.ids[len(got.ids)-1], got.footer)
		within(t, "from the agent's last words to the user being told", told.Sub(said), 0, 3*time.Second)
		f.awaitReaction(thread, thread, "❌")

		f.post(thread, pAlice, "are you back")
		got = f.awaitAnswers(thread, 2)[1]
		if !strings.Contains(got.text, "You said: are you back") || !strings.HasPrefix(got.footer, "-# ✅ done") {
			t.Fatalf("the message after the crash got %q", got.text)
		}
		b.awaitMetric(`acp_broker_agent_stops_total{reason="crashed"}`, func(v float64) bool { return v == 1 })
		b.awaitMetric(`acp_broker_turns_total{outcome="agent_exited"}`, func(v float64) bool { return v == 1 })
	})
}
