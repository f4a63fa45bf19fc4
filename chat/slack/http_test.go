package slack_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/fakeslack"
)

// In HTTP mode the app takes events, interactions and the slash command
// on its listener, each request verified with the signing secret over
// its timestamp: a conversation, a permission click and /acp work as
// over Socket Mode, each request answered within Slack's 3 seconds;
// the URL's verification is answered; a forged, stale or unsigned
// request is refused and counted, and so is a replay of a request
// taken; an event Slack sends again (X-Slack-Retry-Num) is taken once.
func TestHTTP_RequestsAreVerifiedAndTakenOnce(t *testing.T) {
	h := newHarness(t, setup{http: true})
	ctx, cancel := context.WithTimeout(context.Background(), h.wait)
	defer cancel()
	if err := h.srv.VerifyURL(ctx); err != nil {
		t.Fatalf("url_verification: %v", err)
	}
	c := h.mention(h.alice, "permission")
	q := h.question(c, "🔐")
	for _, e := range h.srv.EnvelopesOf("app_mention") {
		e = h.acked(e.ID)
		if len(e.Attempts) != 1 || e.Attempts[0].Status != http.StatusOK || e.Attempts[0].Latency > 3*time.Second {
			t.Fatalf("the mention's delivery: status %d after %s, %d attempts", e.Attempts[0].Status, e.Attempts[0].Latency, len(e.Attempts))
		}
	}
	h.acked(h.srv.ClickButton(c.channel, q.TS, h.alice.ID, buttonID(t, q.Blocks, "Allow")))
	h.answer(c, "permission granted: allow")
	h.acked(h.srv.SlashCommand(h.channel, h.alice.ID, "/acp", "help"))
	h.whispered(h.alice, "/acp new [agent] [prompt]")

	for name, req := range map[string]fakeslack.SignedRequest{
		"forged":   {Secret: "not-the-secret"},
		"stale":    {Timestamp: time.Now().Add(-10 * time.Minute)},
		"unsigned": {Unsigned: true},
	} {
		resp, err := h.srv.SendSigned(ctx, req)
		if err != nil || resp.Status != http.StatusUnauthorized {
			t.Errorf("a %s request answered %d, %v", name, resp.Status, err)
		}
	}
	if n := h.client.Stats().RefusedRequests; n != 3 {
		t.Fatalf("refused requests = %d, want 3", n)
	}

	// The mention again, as an attacker who captured it would send it,
	// and as Slack sends it again, signed anew.
	var mention fakeslack.Envelope
	for _, e := range h.srv.EnvelopesOf("app_mention") {
		mention = e
	}
	replayed, err := h.srv.Replay(ctx, mention.ID)
	if err != nil || replayed.Status != http.StatusUnauthorized {
		t.Fatalf("a replay answered %d, %v", replayed.Status, err)
	}
	retry, err := h.srv.SendSigned(ctx, fakeslack.SignedRequest{Body: mention.Attempts[0].Body, Timestamp: time.Now().Add(time.Second),
		Header: http.Header{"X-Slack-Retry-Num": {"1"}, "X-Slack-Retry-Reason": {"http_timeout"}}})
	if err != nil || retry.Status != http.StatusOK {
		t.Fatalf("Slack's retry answered %d, %v", retry.Status, err)
	}
	h.say(c, h.alice, "one more")
	h.srv.Await("the next message answered", func() bool {
		return strings.Contains(joined(h.botMessages(c)), "You said: one more")
	})
	if n := strings.Count(joined(h.botMessages(c)), "permission granted"); n != 1 {
		t.Fatalf("the mention was answered %d times", n)
	}
	if s := h.client.Stats(); s.RefusedRequests != 4 || s.Deduplicated == 0 {
		t.Fatalf("stats %+v: want the replay refused and the retry taken as a duplicate", s)
	}
}

// started waits until n of the app's messages in the channel say a
// thread was started with /acp new (n counted once the last of them
// has its answer), and returns how many say so.
func (h *harness) started(prompt string) int {
	h.t.Helper()
	h.srv.Await("a thread started for "+prompt, func() bool {
		for _, m := range h.srv.Messages(h.channel) {
			if m.FromBot() && strings.Contains(text(m), "started a thread with") && strings.Contains(text(m), prompt) {
				c := conv{channel: h.channel, ts: m.TS}
				return strings.Contains(joined(h.botMessages(c)), "You said: "+prompt) && finalFooter(text(h.botMessages(c)[len(h.botMessages(c))-1]))
			}
		}
		return false
	})
	n := 0
	for _, m := range h.srv.Messages(h.channel) {
		if m.FromBot() && strings.Contains(text(m), "started a thread with") {
			n++
		}
	}
	return n
}

// A captured /acp new sent again with its signature's hex in upper case
// (the same MAC, spelt otherwise) is refused as the replay it is: a
// request is remembered by what it signs, not by its header's text.
func TestHTTP_ReplayInAnotherCaseIsRefused(t *testing.T) {
	h := newHarness(t, setup{http: true})
	ctx, cancel := context.WithTimeout(context.Background(), h.wait)
	defer cancel()
	env := h.acked(h.srv.SlashCommand(h.channel, h.alice.ID, "/acp", "new first"))
	if n := h.started("first"); n != 1 {
		t.Fatalf("%d threads after one /acp new", n)
	}
	a := env.Attempts[0]
	for name, sig := range map[string]string{
		"as it was":     a.Header.Get("X-Slack-Signature"),
		"in upper case": "v0=" + strings.ToUpper(strings.TrimPrefix(a.Header.Get("X-Slack-Signature"), "v0=")),
	} {
		hdr := a.Header.Clone()
		hdr.Set("X-Slack-Signature", sig)
		resp, err := h.srv.SendSigned(ctx, fakeslack.SignedRequest{URL: a.URL, ContentType: a.Header.Get("Content-Type"), Body: a.Body, Header: hdr})
		if err != nil || resp.Status != http.StatusUnauthorized {
			t.Fatalf("the command replayed %s answered %d, %v", name, resp.Status, err)
		}
	}
	if n := h.client.Stats().RefusedRequests; n != 2 {
		t.Fatalf("refused requests = %d, want the 2 replays", n)
	}
	h.acked(h.srv.SlashCommand(h.channel, h.alice.ID, "/acp", "new second"))
	if n := h.started("second"); n != 2 {
		t.Fatalf("%d threads after two /acp new and two replays", n)
	}
}

// Slack's retry of an event already taken, sent with the signature and
// timestamp of the first delivery, is answered 200 (anything else counts
// as a failed delivery) and not handled again.
func TestHTTP_RetryOfATakenEventIsAcknowledged(t *testing.T) {
	h := newHarness(t, setup{http: true})
	ctx, cancel := context.WithTimeout(context.Background(), h.wait)
	defer cancel()
	c := h.mention(h.alice, "once")
	h.answer(c, "You said: once")
	var mention fakeslack.Envelope
	for _, e := range h.srv.EnvelopesOf("app_mention") {
		mention = e
	}
	a := mention.Attempts[0]
	hdr := a.Header.Clone()
	hdr.Set("X-Slack-Retry-Num", "1")
	hdr.Set("X-Slack-Retry-Reason", "http_timeout")
	resp, err := h.srv.SendSigned(ctx, fakeslack.SignedRequest{URL: a.URL, Body: a.Body, Header: hdr})
	if err != nil || resp.Status != http.StatusOK {
		t.Fatalf("Slack's retry of a taken event answered %d, %v", resp.Status, err)
	}
	if s := h.client.Stats(); s.Deduplicated != 1 || s.RefusedRequests != 0 {
		t.Fatalf("stats %+v: want the retry counted as a duplicate, nothing refused", s)
	}
	h.say(c, h.alice, "then this")
	h.answer(c, "You said: then this")
	if n := strings.Count(joined(h.botMessages(c)), "You said: once"); n != 1 {
		t.Fatalf("the mention was answered %d times", n)
	}
}

// An interaction or a slash command Slack delivers again, in a request
// of its own signed anew, acts once: one thread for /acp new, one answer
// for a click.
func TestHTTP_InteractionsAndCommandsAreTakenOnce(t *testing.T) {
	h := newHarness(t, setup{http: true})
	testTakenOnce(t, h)
}

// Over Socket Mode, an interaction or a slash command sent again, under
// its own envelope id or another's, acts once.
func TestSocket_InteractionsAndCommandsAreTakenOnce(t *testing.T) {
	h := newHarness(t, setup{})
	testTakenOnce(t, h)
	id := h.acked(h.srv.SlashCommand(h.channel, h.alice.ID, "/acp", "new third")).ID
	h.started("third")
	h.srv.Resend(id)
	h.acked(id)
	h.until("the envelope sent again counted as a duplicate", func() bool { return h.client.Stats().Deduplicated == 3 })
	h.acked(h.srv.SlashCommand(h.channel, h.alice.ID, "/acp", "new fourth"))
	if n := h.started("fourth"); n != 4 {
		t.Fatalf("%d threads after four /acp new, one sent again", n)
	}
}

func testTakenOnce(t *testing.T, h *harness) {
	t.Helper()
	id := h.acked(h.srv.SlashCommand(h.channel, h.alice.ID, "/acp", "new first")).ID
	h.started("first")
	nextSecond()
	h.acked(h.srv.Redeliver(id))

	c := h.mention(h.alice, "permission")
	q := h.question(c, "🔐")
	click := h.acked(h.srv.ClickButton(c.channel, q.TS, h.alice.ID, buttonID(t, q.Blocks, "Allow"))).ID
	h.answer(c, "permission granted: allow")
	nextSecond()
	h.acked(h.srv.Redeliver(click))
	h.until("both sent again counted as duplicates", func() bool { return h.client.Stats().Deduplicated == 2 })

	h.acked(h.srv.SlashCommand(h.channel, h.alice.ID, "/acp", "new second"))
	if n := h.started("second"); n != 2 {
		t.Fatalf("%d threads after two /acp new, one delivered twice", n)
	}
	h.say(c, h.alice, "one more")
	h.answer(c, "You said: one more")
	if n := strings.Count(joined(h.botMessages(c)), "permission granted"); n != 1 {
		t.Fatalf("the permission was answered %d times", n)
	}
	if n := len(h.srv.Ephemerals(h.alice.ID)); n != 0 {
		for _, e := range h.srv.Ephemerals(h.alice.ID) {
			t.Log(shown(e.Blocks, e.Text))
		}
		t.Fatalf("alice was told %d things privately", n)
	}
}

// nextSecond waits for the clock's next second: a request Slack
// delivers again over HTTP is signed anew, and in the same second it
// would be the first byte for byte, a replay.
func nextSecond() {
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
}
