package faults

import (
	"strings"
	"testing"
	"time"
)

// A permission request nobody answers fails closed: with
// turn.permission_timeout = 2s the request message is closed about 2s
// after it appeared, saying no answer came within 2s and that the agent
// was told cancelled, its buttons gone; the turn ends with the agent's
// reaction to the refusal; and no request is left open, in the thread or
// in the broker. On every platform.
func TestPermission_UnansweredRequestFailsClosed(t *testing.T) {
	forEachPlatform(t, func(t *testing.T, platform string) {
		const timeout = 2 * time.Second
		w, f := newWorldOn(t, platform, setup{conf: settings{"turn.permission_timeout": "2s"}})
		b := w.start()
		thread := f.mention(pAlice, "permission")
		req := f.permissionRequest(thread)
		if n := len(req.buttons); n != 3 {
			t.Fatalf("%d buttons on the request, want one per option", n)
		}
		open := `acp_broker_chat_open_permission_requests{platform="` + platform + `"}`
		b.awaitMetric(open, func(v float64) bool { return v == 1 })

		closed := "Closed without an answer (no answer within 2s); the agent was told *cancelled*."
		if platform == "slack" {
			closed = "Closed without an answer (no answer within 2s); the agent was told _cancelled_."
		}
		await(t, f, "the request closed", func() bool {
			m := f.message(thread, req.id)
			return strings.Contains(m.text, closed) && len(m.buttons) == 0
		})
		shown := f.seenAt(thread, req.id, "Permission needed")
		within(t, "from the request to its closing", f.seenAt(thread, req.id, closed).Sub(shown), timeout-200*time.Millisecond, timeout+5*time.Second)

		got := f.awaitAnswers(thread, 1)[0]
		if !strings.Contains(got.text, `Permission for "Run rm -rf build" was not answered within 2s; answered cancelled.`) {
			t.Errorf("the answer does not say the request timed out: %q", got.text)
		}
		if !strings.Contains(got.text, "permission cancelled before session/cancel; carrying on") || got.footer == "" {
			t.Errorf("the agent's answer to the refusal is missing: %q", got.text)
		}
		if strings.Contains(got.text, "permission granted") {
			t.Errorf("an unanswered request was granted: %q", got.text)
		}
		for _, m := range f.botMessages(thread) {
			if len(m.buttons) > 0 {
				t.Errorf("a message still shows buttons: %q", m.text)
			}
		}
		if m := f.message(thread, req.id); len(m.buttons) > 0 {
			t.Errorf("the request still shows buttons: %q", m.text)
		}
		b.awaitMetric(open, func(v float64) bool { return v == 0 })
		b.awaitMetric("acp_broker_acp_pending_permission_requests", func(v float64) bool { return v == 0 })
	})
}
