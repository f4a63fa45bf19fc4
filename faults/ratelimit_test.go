package faults

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/fakediscord"
)

// A storm of 429s loses nothing: with the thread's message creates and
// edits answered 429 many times (retry_after 300ms) and one global 429
// on top, the answer that arrives is complete and in order, the turn
// ends normally (✅ replacing ⚙️ on the message), and /metrics counts
// every 429
// (acp_broker_chat_rate_limited_total{platform="discord"}).
func TestRateLimit_StormLosesNothing(t *testing.T) {
	w := newWorld(t, setup{})
	b := w.start()
	// In place before the thread's first post: the thread is the only
	// channel but the parent the bot writes in.
	inAThread := func(route string) fakediscord.Match {
		return func(r fakediscord.Request) bool { return r.Route == route && r.Major != w.Channel }
	}
	w.Srv.Inject429(inAThread(fakediscord.RouteCreateMessage), 4, 300*time.Millisecond)
	w.Srv.Inject429(inAThread(fakediscord.RouteEditMessage), 10, 300*time.Millisecond)
	thread := w.mention(alice, "stream 20 100ms")
	w.awaitBotText(thread, "chunk 1")
	w.Srv.InjectGlobal429(fakediscord.AnyRequest(), 1, 500*time.Millisecond)

	got := w.awaitAnswers(thread, 1)[0]
	var want strings.Builder
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&want, "chunk %d\n", i)
	}
	if !strings.HasPrefix(got.Text, want.String()+"-# ✅ done") {
		t.Fatalf("the answer after the storm is %q, want all 20 chunks and done", got.Text)
	}
	limited := w.Srv.RateLimited()
	inThread := 0
	for _, r := range limited {
		if r.Major == thread && (r.Route == fakediscord.RouteCreateMessage || r.Route == fakediscord.RouteEditMessage) {
			inThread++
		}
	}
	if inThread < 14 {
		t.Fatalf("only %d message calls in the thread were answered 429; the storm did not happen", inThread)
	}
	w.awaitReaction(w.Channel, thread, "✅")
	w.Srv.Await("⚙️ taken back", func() bool { return !w.Srv.HasReaction(w.Channel, thread, w.Srv.Bot().ID, "⚙️") })
	b.awaitMetric(`acp_broker_chat_rate_limited_total{platform="discord"}`, func(v float64) bool { return v == float64(len(w.Srv.RateLimited())) })

	w.Discord.Post(thread, alice, "after the storm")
	if got := w.awaitAnswers(thread, 2)[1]; !strings.Contains(got.Text, "You said: after the storm") {
		t.Fatalf("the next message got %q", got.Text)
	}
}
