package faults

import (
	"strings"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
)

// A permission request nobody answers fails closed: with
// turn.permission_timeout = 2s the request message is closed about 2s
// after it appeared, saying no answer came within 2s and that the agent
// was told cancelled, its buttons gone; the turn ends with the agent's
// reaction to the refusal; and no request is left open, in the thread or
// in the broker.
func TestPermission_UnansweredRequestFailsClosed(t *testing.T) {
	const timeout = 2 * time.Second
	w := newWorld(t, setup{conf: settings{"turn.permission_timeout": "2s"}})
	b := w.start()
	thread := w.mention(alice, "permission")
	req := w.permissionRequest(thread)
	if n := len(req.Buttons()); n != 3 {
		t.Fatalf("%d buttons on the request, want one per option", n)
	}
	b.awaitMetric(`acp_broker_chat_open_permission_requests{platform="discord"}`, func(v float64) bool { return v == 1 })

	const closed = "Closed without an answer (no answer within 2s); the agent was told *cancelled*."
	w.Srv.Await("the request closed", func() bool {
		m, _ := w.Srv.Message(thread, req.ID)
		return strings.Contains(m.Content, closed) && len(m.Buttons()) == 0
	})
	shown := w.Discord.SeenAt(thread, req.ID, "Permission needed")
	within(t, "from the request to its closing", w.Discord.SeenAt(thread, req.ID, closed).Sub(shown), timeout-200*time.Millisecond, timeout+5*time.Second)

	got := w.awaitAnswers(thread, 1)[0]
	if !strings.Contains(got.Text, `Permission for "Run rm -rf build" was not answered within 2s; answered cancelled.`) {
		t.Errorf("the answer does not say the request timed out: %q", got.Text)
	}
	if !strings.Contains(got.Text, "permission cancelled before session/cancel; carrying on") || brokertest.Footer(got.Text) == "" {
		t.Errorf("the agent's answer to the refusal is missing: %q", got.Text)
	}
	if strings.Contains(got.Text, "permission granted") {
		t.Errorf("an unanswered request was granted: %q", got.Text)
	}

	for _, m := range w.Srv.Messages(thread) {
		if len(m.Buttons()) > 0 {
			t.Errorf("a message still shows buttons: %q", m.Content)
		}
	}
	b.awaitMetric(`acp_broker_chat_open_permission_requests{platform="discord"}`, func(v float64) bool { return v == 0 })
	b.awaitMetric("acp_broker_acp_pending_permission_requests", func(v float64) bool { return v == 0 })
}
