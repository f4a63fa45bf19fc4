package faults

import (
	"strings"
	"testing"

	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakediscord"
)

// A lost connection loses no conversation and doubles none: after a
// drop, a message sent while the connection was down and one sent after
// it are each answered once; after a second fault (Discord: a drop whose
// resume is refused, so the broker identifies anew; Slack: the
// connection told to refresh), the next message is answered once too.
// On every platform.
func TestGateway_DropsAreSurvivedWithoutDuplicates(t *testing.T) {
	forEachPlatform(t, func(t *testing.T, platform string) {
		w, f := newWorldOn(t, platform, setup{})
		b := w.start()
		thread := f.mention(pAlice, "hello")
		f.awaitAnswers(thread, 1)

		f.drop()
		f.post(thread, pAlice, "sent while down")
		f.reconnected(1)
		f.post(thread, pAlice, "sent after the reconnection")
		f.awaitAnswers(thread, 3)

		switch f := f.(type) {
		case *discordFront:
			f.w.Srv.RejectNextResume()
			f.w.Srv.DropGateway()
			f.w.Srv.Await("a new session identified", func() bool {
				st := f.w.Srv.Stats()
				return st.ResumesRejected >= 1 && st.Identifies >= 2 && st.Connected
			})
		case *slackFront:
			f.s.Srv.RefreshConnections()
			f.reconnected(2)
		}
		f.post(thread, pAlice, "sent after the second fault")
		f.awaitAnswers(thread, 4)

		// One more turn proves nothing else was still on its way.
		f.post(thread, pAlice, "last one")
		got := f.awaitAnswers(thread, 5)
		all := joinedTexts(got)
		for _, said := range []string{"hello", "sent while down", "sent after the reconnection", "sent after the second fault", "last one"} {
			if n := strings.Count(all, "You said: "+said+"\n"); n != 1 {
				t.Errorf("%q was answered %d times", said, n)
			}
		}
		if len(got) != 5 {
			t.Errorf("%d answers to 5 messages", len(got))
		}
		for _, a := range got {
			if !strings.HasPrefix(a.footer, "-# ✅ done") {
				t.Errorf("an answer ended with %q", a.footer)
			}
		}
		if n := threadsOf(f); n != 1 {
			t.Errorf("%d threads, want 1", n)
		}
		b.awaitMetric(`acp_broker_chat_reconnects_total{platform="`+platform+`"}`, func(v float64) bool { return v == 2 })
		switch f := f.(type) {
		case *discordFront:
			checkNoUnknownRequests(t, f.w.Srv)
		case *slackFront:
			checkNoUnknownMethods(t, f.s)
		}
	})
}

func joinedAnswers(as []brokertest.Answer) string {
	var b strings.Builder
	for _, a := range as {
		b.WriteString(a.Text + "\n")
	}
	return b.String()
}

func joinedTexts(as []answer) string {
	var b strings.Builder
	for _, a := range as {
		b.WriteString(a.text + "\n")
	}
	return b.String()
}

// checkNoUnknownRequests fails the test if the broker called a route
// Discord does not have.
func checkNoUnknownRequests(t *testing.T, srv *fakediscord.Server) {
	t.Helper()
	for _, r := range srv.UnknownRequests() {
		t.Errorf("request to a route Discord does not have: %s %s", r.Method, r.Path)
	}
}

// checkNoUnknownMethods fails the test if the broker called a Web API
// method Slack does not have, or no longer has.
func checkNoUnknownMethods(t *testing.T, s *brokertest.Slack) {
	t.Helper()
	for _, c := range s.Srv.Calls() {
		if c.Error == "unknown_method" || c.Error == "method_deprecated" {
			t.Errorf("a call Slack does not take: %s (%s)", c.Method, c.Error)
		}
	}
}
