package slack_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/fakeslack"
)

// replay checks a call log against a token bucket of limit calls per
// per with burst at once: it returns the first call that would have
// found the bucket empty, or -1.
func overLimit(calls []time.Time, limit int, per time.Duration, burst int) int {
	tokens, last := float64(burst), time.Time{}
	for i, at := range calls {
		if !last.IsZero() {
			tokens = min(float64(burst), tokens+at.Sub(last).Seconds()*float64(limit)/per.Seconds())
		}
		last = at
		if tokens < 1 {
			return i
		}
		tokens--
	}
	return -1
}

// Six answers streaming at once in one channel stay within Slack's
// limits, read from the fake's call log: chat.update within its Tier 3
// (50 a minute, for the whole workspace, here with bursts of 20 at
// most) and chat.postMessage within about one a second in the channel.
// No call meets a 429: the calls past the budget are held back
// (Throttled) and the newest view goes out when they may, so every
// answer arrives whole.
func TestResilience_StreamingStaysWithinSlacksLimits(t *testing.T) {
	limits := fakeslack.DefaultRateLimits()
	limits["chat.update"] = fakeslack.RateLimit{Limit: 50, Per: time.Minute, Burst: 20}
	h := newHarness(t, setup{fake: fakeslack.Options{RateLimits: limits, WaitTimeout: time.Minute}})
	var convs []conv
	for i := range 6 {
		convs = append(convs, h.mention(h.alice, fmt.Sprintf("stream 80 %dms", 100+5*i)))
	}
	for _, c := range convs {
		if got := joined(h.answer(c, "✅ done")); !strings.HasPrefix(got, chunks(80)) {
			t.Fatalf("answer = %q", got)
		}
	}
	if rl := h.srv.RateLimited(); len(rl) > 0 {
		t.Fatalf("%d calls met a 429, the first %s", len(rl), rl[0].Method)
	}
	var updates, posts []time.Time
	for _, call := range h.srv.Calls() {
		switch {
		case call.Method == "chat.update":
			updates = append(updates, call.At)
		case call.Method == "chat.postMessage" && call.Channel() == h.channel:
			posts = append(posts, call.At)
		}
	}
	if i := overLimit(updates, 50, time.Minute, 20); i >= 0 {
		t.Fatalf("chat.update call %d of %d went past 50 a minute", i, len(updates))
	}
	if i := overLimit(posts, 1, time.Second, 3); i >= 0 {
		t.Fatalf("chat.postMessage call %d of %d went past one a second", i, len(posts))
	}
	if s := h.client.Stats(); s.Throttled == 0 || s.RateLimited != 0 {
		t.Fatalf("stats %+v: the budget held nothing back, or a 429 came", s)
	}
}

// A storm of 429s on the answer's calls loses nothing: each waits out
// its Retry-After, and the whole answer arrives.
func TestResilience_429StormLosesNothing(t *testing.T) {
	h := newHarness(t, setup{})
	h.srv.Inject429(fakeslack.OnMethodIn("chat.postMessage", h.channel), 2, time.Second)
	h.srv.Inject429(fakeslack.OnMethod("chat.update"), 4, time.Second)
	c := h.mention(h.alice, "stream 40 100ms")
	msgs := h.answer(c, "✅ done")
	if !strings.HasPrefix(joined(msgs), chunks(40)) {
		t.Fatalf("answer after the storm = %q", joined(msgs))
	}
	if n := len(h.srv.RateLimited()); n < 6 {
		t.Fatalf("only %d calls met a 429; the storm did not happen", n)
	}
	if s := h.client.Stats(); s.RateLimited < 6 {
		t.Fatalf("429s counted = %d", s.RateLimited)
	}
}

// A dropped Socket Mode connection, and one Slack asks to refresh, are
// opened again; a message sent meanwhile is answered, once.
func TestResilience_ADroppedSocketIsOpenedAgain(t *testing.T) {
	h := newHarness(t, setup{fake: fakeslack.Options{DisconnectGrace: 500 * time.Millisecond}})
	c := h.mention(h.alice, "hello")
	h.answer(c, "✅")
	h.srv.DropConnections()
	h.say(c, h.alice, "are you still there")
	h.srv.Await("answer after the drop", func() bool {
		return strings.Contains(joined(h.botMessages(c)), "You said: are you still there")
	})
	h.until("the connection opened again", func() bool { return h.client.Stats().SocketReconnects == 1 })
	h.srv.RefreshConnections()
	h.until("the connection refreshed", func() bool { return h.client.Stats().SocketReconnects == 2 })
	h.say(c, h.alice, "and now")
	h.srv.Await("answer after the refresh", func() bool {
		return strings.Contains(joined(h.botMessages(c)), "You said: and now")
	})
	h.answer(c, "✅")
	all := joined(h.botMessages(c))
	if n := strings.Count(all, "You said: are you still there"); n != 1 {
		t.Fatalf("the message sent during the drop was answered %d times", n)
	}
	if err := h.client.Healthy(); err != nil {
		t.Fatalf("unhealthy after the reconnects: %v", err)
	}
}

// Slack sends an event again when its acknowledgement came late (here
// every acknowledgement is late: the fake waits a millisecond): each
// message is taken once, and answered once.
func TestResilience_SlacksRetriesAreTakenOnce(t *testing.T) {
	h := newHarness(t, setup{fake: fakeslack.Options{AckTimeout: time.Millisecond, RetryDelays: []time.Duration{0, 0}}})
	c := h.mention(h.alice, "hello")
	h.answer(c, "✅")
	for i := range 3 {
		h.say(c, h.alice, fmt.Sprintf("message %d", i))
	}
	h.srv.Await("three more answers", func() bool {
		all := joined(h.botMessages(c))
		return strings.Contains(all, "You said: message 2") && strings.Count(all, "✅ done") == 4
	})
	all := joined(h.botMessages(c))
	for i := range 3 {
		if n := strings.Count(all, fmt.Sprintf("You said: message %d", i)); n != 1 {
			t.Fatalf("message %d answered %d times", i, n)
		}
	}
	retried := 0
	for _, e := range h.srv.Envelopes() {
		if len(e.Attempts) > 1 {
			retried++
		}
	}
	if s := h.client.Stats(); retried == 0 || s.Deduplicated == 0 {
		t.Fatalf("%d envelopes sent again, %d taken as duplicates: the test did not do what it says", retried, s.Deduplicated)
	}
}

// An agent that crashes mid-turn: the user is told on one line, with the
// exit status and the end of its stderr, and keeps the answer so far;
// the next message gets a fresh agent.
func TestResilience_AgentCrashIsToldInWords(t *testing.T) {
	h := newHarness(t, setup{})
	c := h.mention(h.alice, "crash 3")
	msgs := h.answer(c, "❌ failed: agent exited with status 3")
	if last := text(msgs[len(msgs)-1]); !strings.Contains(last, "simulated crash") || !strings.HasPrefix(last, "about to crash") {
		t.Fatalf("answer = %q", last)
	}
	h.say(c, h.alice, "hello again")
	h.srv.Await("next answer", func() bool { return strings.Contains(joined(h.botMessages(c)), "You said: hello again") })
}

// A prompt deleted before its answer came: Slack would put a reply to it
// at the top of the channel, so the one it put there is taken back, and
// the answer is not tried there again; the loss is counted, and nothing
// of it stays in the channel.
func TestResilience_AnAnswerToADeletedMessageStaysOutOfTheChannel(t *testing.T) {
	h := newHarness(t, setup{})
	c := h.mention(h.alice, "silent 500ms")
	h.srv.DeleteMessage(c.channel, c.ts)
	h.until("the answer given up", func() bool { return h.client.Stats().LostAnswers == 1 })
	h.srv.Await("no message of the app's in the channel", func() bool {
		for _, m := range h.srv.Messages(h.channel) {
			if m.FromBot() {
				return false
			}
		}
		return true
	})
	posts := 0
	for _, call := range h.srv.CallsTo("chat.postMessage") {
		if call.Args["thread_ts"] == c.ts {
			posts++
		}
	}
	if posts != 1 {
		t.Fatalf("%d replies to the deleted message were posted", posts)
	}
}

// A status reaction Slack fails to make (a 503, twice) is made all the
// same: a reaction is the same made twice, so it is tried again.
func TestResilience_AStatusReactionSlackFailsIsTriedAgain(t *testing.T) {
	h := newHarness(t, setup{})
	h.srv.InjectError(fakeslack.OnMethod("reactions.add"), 2, http.StatusServiceUnavailable)
	c := h.mention(h.alice, "hello")
	h.answer(c, "✅")
	h.srv.Await("✅ on the message", func() bool { return h.hasReaction(c.channel, c.ts, "white_check_mark") })
	var tries []int
	for _, call := range h.srv.Calls() {
		if call.Method == "reactions.add" && call.Args["name"] == "gear" {
			tries = append(tries, call.Status)
		}
	}
	if !slices.Equal(tries, []int{http.StatusServiceUnavailable, http.StatusServiceUnavailable, http.StatusOK}) {
		t.Fatalf("⚙️ was tried with the answers %v, want two 503s and then 200", tries)
	}
}
