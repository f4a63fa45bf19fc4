package faults

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/fakediscord"
)

// A storm of 429s loses nothing: with the thread's message posts and
// edits answered 429 fourteen times (Discord: retry_after 300ms, and one
// global 429 on top; Slack: Retry-After 1s, its least), the answer that
// arrives is complete and in order, the turn ends normally (✅ replacing
// ⚙️ on the message), and /metrics counts every 429
// (acp_broker_chat_rate_limited_total{platform=…}). On every platform.
func TestRateLimit_StormLosesNothing(t *testing.T) {
	forEachPlatform(t, func(t *testing.T, platform string) {
		const storm = 14
		w, f := newWorldOn(t, platform, setup{})
		b := w.start()
		// In place before the thread's first post: the thread is the only
		// place but the channel the bot writes in.
		f.inject429(storm, 300*time.Millisecond)
		thread := f.mention(pAlice, "stream 20 100ms")
		f.awaitBotText(thread, "chunk 1", 0)
		if d, ok := f.(*discordFront); ok {
			d.w.Srv.InjectGlobal429(fakediscord.AnyRequest(), 1, 500*time.Millisecond)
		}

		got := f.awaitAnswers(thread, 1)[0]
		var want strings.Builder
		for i := 1; i <= 20; i++ {
			fmt.Fprintf(&want, "chunk %d\n", i)
		}
		if !strings.HasPrefix(got.text, want.String()+"-# ✅ done") {
			t.Fatalf("the answer after the storm is %q, want all 20 chunks and done", got.text)
		}
		if n := stormed(f, thread); n < storm {
			t.Fatalf("only %d message calls in the thread were answered 429; the storm did not happen", n)
		}
		f.awaitReaction(thread, thread, "✅")
		await(t, f, "⚙️ taken back", func() bool { return !slices.Contains(f.botReactions(thread, thread), "⚙️") })
		b.awaitMetric(`acp_broker_chat_rate_limited_total{platform="`+platform+`"}`, func(v float64) bool { return v == float64(f.rateLimited()) })

		f.post(thread, pAlice, "after the storm")
		if got := f.awaitAnswers(thread, 2)[1]; !strings.Contains(got.text, "You said: after the storm") {
			t.Fatalf("the next message got %q", got.text)
		}
	})
}

// stormed counts the message calls in a thread answered 429.
func stormed(f front, thread string) int {
	n := 0
	switch f := f.(type) {
	case *discordFront:
		for _, r := range f.w.Srv.RateLimited() {
			if r.Major == thread && (r.Route == fakediscord.RouteCreateMessage || r.Route == fakediscord.RouteEditMessage) {
				n++
			}
		}
	case *slackFront:
		for _, c := range f.s.Srv.RateLimited() {
			if (c.Method == "chat.postMessage" && c.Args["thread_ts"] == thread) || c.Method == "chat.update" {
				n++
			}
		}
	}
	return n
}
