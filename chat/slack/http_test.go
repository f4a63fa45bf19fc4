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
