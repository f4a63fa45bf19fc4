package faults

import (
	"strings"
	"testing"

	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakediscord"
)

// A lost gateway connection loses no conversation and doubles none: after
// a drop that is resumed, a message sent while the connection was down
// and one sent after it are each answered once; after a drop whose
// resume is refused (the broker identifies anew), the next message is
// answered once too.
func TestGateway_DropsAreSurvivedWithoutDuplicates(t *testing.T) {
	w := newWorld(t, setup{})
	b := w.start()
	thread := w.mention(alice, "hello")
	w.awaitAnswers(thread, 1)

	w.Srv.DropGateway()
	w.Discord.Post(thread, alice, "sent while down")
	w.Srv.Await("the session resumed", func() bool { st := w.Srv.Stats(); return st.Resumes >= 1 && st.Connected })
	w.Discord.Post(thread, alice, "sent after the resume")
	w.awaitAnswers(thread, 3)

	w.Srv.RejectNextResume()
	w.Srv.DropGateway()
	w.Srv.Await("a new session identified", func() bool {
		st := w.Srv.Stats()
		return st.ResumesRejected >= 1 && st.Identifies >= 2 && st.Connected
	})
	w.Discord.Post(thread, alice, "sent after identifying anew")
	w.awaitAnswers(thread, 4)

	// One more turn proves nothing else was still on its way.
	w.Discord.Post(thread, alice, "last one")
	got := w.awaitAnswers(thread, 5)
	for _, said := range []string{"hello", "sent while down", "sent after the resume", "sent after identifying anew", "last one"} {
		if n := strings.Count(joinedAnswers(got), "You said: "+said+"\n"); n != 1 {
			t.Errorf("%q was answered %d times", said, n)
		}
	}
	if len(got) != 5 {
		t.Errorf("%d answers to 5 messages", len(got))
	}
	for _, a := range got {
		if !strings.HasPrefix(a.Footer, "-# ✅ done") {
			t.Errorf("an answer ended with %q", a.Footer)
		}
	}
	if n := len(w.Srv.Threads()); n != 1 {
		t.Errorf("%d threads, want 1", n)
	}
	b.awaitMetric(`acp_broker_chat_reconnects_total{platform="discord"}`, func(v float64) bool { return v == 2 })
	checkNoUnknownRequests(t, w.Srv)
}

func joinedAnswers(as []brokertest.Answer) string {
	var b strings.Builder
	for _, a := range as {
		b.WriteString(a.Text + "\n")
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
