package faults

import (
	"strings"
	"testing"
	"time"
)

// An agent that dies mid-turn is noticed at once: within a couple of
// seconds of its last words the user reads that the agent exited, with
// its exit status and the end of its stderr, and the next message in the
// thread is answered by a fresh agent.
func TestCrash_AgentDeathIsToldWithStatusAndStderr(t *testing.T) {
	w := newWorld(t, setup{conf: settings{"turn.timeout": "5m"}})
	b := w.start()
	thread := w.mention(alice, "crash 3")
	got := w.awaitAnswers(thread, 1)[0]
	if !strings.HasPrefix(got.Footer, "-# ❌ failed: agent exited") {
		t.Fatalf("the turn ended with %q, want the agent's exit in words", got.Footer)
	}
	for _, want := range []string{"status 3", "simulated crash"} {
		if !strings.Contains(got.Footer, want) {
			t.Errorf("the failure %q does not say %q", got.Footer, want)
		}
	}
	if !strings.HasPrefix(got.Text, "about to crash") {
		t.Errorf("the partial answer was lost: %q", got.Text)
	}
	last := got.Msgs[len(got.Msgs)-1]
	said := w.Discord.SeenAt(thread, got.Msgs[0].ID, "about to crash")
	told := w.Discord.SeenAt(thread, last.ID, got.Footer)
	within(t, "from the agent's last words to the user being told", told.Sub(said), 0, 3*time.Second)
	w.awaitReaction(w.Channel, thread, "❌")

	w.Discord.Post(thread, alice, "are you back")
	got = w.awaitAnswers(thread, 2)[1]
	if !strings.Contains(got.Text, "You said: are you back") || !strings.HasPrefix(got.Footer, "-# ✅ done") {
		t.Fatalf("the message after the crash got %q", got.Text)
	}
	b.awaitMetric(`acp_broker_agent_stops_total{reason="crashed"}`, func(v float64) bool { return v == 1 })
	b.awaitMetric(`acp_broker_turns_total{outcome="agent_exited"}`, func(v float64) bool { return v == 1 })
}
