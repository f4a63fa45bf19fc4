package faults

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakeslack"
)

// A broker taking Slack's events over HTTP (slack.mode = "http"),
// through the binary: Slack's URL verification is answered; signed
// events, clicks and the slash command are taken, each acknowledged
// within Slack's 3 seconds, and a turn runs with its permission request
// answered by a click; a request signed with another secret, one ten
// minutes old, one unsigned, and a replay of one taken are each refused
// with 401, reach nothing, and are counted
// (acp_broker_chat_refused_requests_total{platform="slack"}); an event
// Slack sends again (a retry, signed anew) is answered 200 and taken
// once (acp_broker_chat_deduplicated_events_total).
func TestSlackHTTP_SignedEventsAreTakenAndForgedOnesRefused(t *testing.T) {
	w, front := newWorldOn(t, "slack", setup{})
	f := front.(*slackFront)
	s := w.Slack
	if err := w.SlackOverHTTP(); err != nil {
		t.Fatal(err)
	}
	b := w.start()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := s.Srv.VerifyURL(ctx); err != nil {
		t.Fatalf("the Request URL's verification: %v", err)
	}
	if st := s.Srv.SocketStats(); st.Opens != 0 {
		t.Errorf("a broker in http mode opened %d Socket Mode connections", st.Opens)
	}

	thread := f.mention(pAlice, "permission")
	req := f.permissionRequest(thread)
	f.click(thread, req, pAlice, "Allow")
	got := f.awaitAnswers(thread, 1)[0]
	if !strings.Contains(got.text, "permission granted: allow") || !strings.HasPrefix(got.footer, "-# ✅ done") {
		t.Fatalf("the turn over HTTP got %q", got.text)
	}
	cmd := s.Srv.SlashCommand(s.Channel, s.Alice.ID, "/acp", "help")
	brokertest.MustGet(t, patience, func(ctx context.Context) (fakeslack.Envelope, error) { return s.AwaitAck(ctx, cmd) })
	f.whispered(pAlice, "/acp new", 0)

	var mention fakeslack.Envelope
	for _, e := range s.Srv.EnvelopesOf("app_mention") {
		mention = e
	}
	if len(mention.Attempts) == 0 || mention.Attempts[0].Status != http.StatusOK {
		t.Fatalf("the mention was not delivered over HTTP: %+v", mention)
	}
	for _, tc := range []struct {
		name string
		send func() (fakeslack.HTTPResponse, error)
	}{
		{"another secret", func() (fakeslack.HTTPResponse, error) {
			return s.Srv.SendSigned(ctx, fakeslack.SignedRequest{Secret: "not-the-signing-secret"})
		}},
		{"ten minutes old", func() (fakeslack.HTTPResponse, error) {
			return s.Srv.SendSigned(ctx, fakeslack.SignedRequest{Timestamp: time.Now().Add(-10 * time.Minute)})
		}},
		{"unsigned", func() (fakeslack.HTTPResponse, error) {
			return s.Srv.SendSigned(ctx, fakeslack.SignedRequest{Unsigned: true})
		}},
		{"a replay", func() (fakeslack.HTTPResponse, error) { return s.Srv.Replay(ctx, mention.ID) }},
	} {
		r, err := tc.send()
		if err != nil || r.Status != http.StatusUnauthorized {
			t.Errorf("%s: answered %d, %v; want 401", tc.name, r.Status, err)
		}
	}
	b.awaitMetric(`acp_broker_chat_refused_requests_total{platform="slack"}`, func(v float64) bool { return v == 4 })

	dedup := `acp_broker_chat_deduplicated_events_total{platform="slack"}`
	before, _ := b.metric(dedup)
	retry := http.Header{"X-Slack-Retry-Num": {"1"}, "X-Slack-Retry-Reason": {"http_timeout"}}
	r, err := s.Srv.SendSigned(ctx, fakeslack.SignedRequest{Body: mention.Attempts[0].Body, Timestamp: time.Now().Add(2 * time.Second), Header: retry})
	if err != nil || r.Status != http.StatusOK {
		t.Fatalf("Slack's retry of the mention answered %d, %v; want 200", r.Status, err)
	}
	b.awaitMetric(dedup, func(v float64) bool { return v == before+1 })
	f.post(thread, pAlice, "and then?")
	if got := f.awaitAnswers(thread, 2); len(got) != 2 || !strings.Contains(got[1].text, "You said: and then?") {
		t.Fatalf("after the retry the thread shows %d answers: %q", len(got), joinedTexts(got))
	}
	if n := len(f.answers(thread)); n != 2 {
		t.Errorf("the mention retried was answered again: %d answers", n)
	}
	if n := threadsOf(f); n != 1 {
		t.Errorf("%d threads, want 1: a refused request reached the app", n)
	}
}
