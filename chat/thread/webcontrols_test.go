package thread_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"acpbroker/chat/thread"
)

// A choice made on the web is the model command's: who may not act on
// the thread is refused, the starter's changes the model and the thread
// says so, on the web; a command a page does not give is refused, and
// once the Server takes no more events, neither does the web.
func TestCommandFor_IsTheChatsCommandAndStopsWithTheServer(t *testing.T) {
	h := newBoardHarness(t, thread.Config{}, "--config-options")
	th := h.start(alice, "hello")
	h.last(th, "the answer", func(m boardMsg) bool { return m.view.Outcome })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := h.srv.CommandFor(ctx, th, bob, "on the web", "model", map[string]string{"value": "fake-large"}); err != thread.ErrNotAllowed {
		t.Fatalf("bob's choice: %v, want ErrNotAllowed", err)
	}
	said, err := h.srv.CommandFor(ctx, th, alice, "on the web", "model", map[string]string{"value": "fake-large"})
	if err != nil || said != "⚙️ <@alice> set **Model** to **Fake Large**." {
		t.Fatalf("alice's choice: %q, %v", said, err)
	}
	h.last(th, "the change said in the thread", func(m boardMsg) bool {
		return strings.Contains(m.view.Text, "set **Model** to **Fake Large**") && strings.Contains(m.view.Text, "on the web")
	})
	if st := h.engine.Status(th); st.Model != "Fake Large" {
		t.Errorf("the thread's model is %q", st.Model)
	}
	if _, err := h.srv.CommandFor(ctx, th, alice, "on the web", "reset", nil); err == nil {
		t.Errorf("reset, no command of a page, was given")
	}
	h.srv.Accept(false)
	if _, err := h.srv.CommandFor(ctx, th, alice, "on the web", "model", map[string]string{"value": "fake-huge"}); err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("a choice while the Server takes no events: %v", err)
	}
	if st := h.engine.Status(th); st.Model != "Fake Large" {
		t.Errorf("the thread's model became %q while the Server took no events", st.Model)
	}
}
