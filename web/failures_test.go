package web

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"acpbroker/adapter"
	"acpbroker/chat/thread"
)

// The operator's view lists the turns that failed, with their causes,
// the newest first, at most maxFailures of them; a cancelled or answered
// turn is no failure, and a cause is text, never markup.
func TestAdmin_TheOperatorsViewListsRecentFailuresNewestFirst(t *testing.T) {
	x := newSite(t, Config{Admin: func(tok string) (string, bool) { return "ops", tok == "ops-token-0123456789" }})
	obs := x.web.Observer
	obs.Turn("T-ok", thread.TurnStart{Prompt: "fine"}).Done(adapter.Outcome{StopReason: "end_turn"})
	obs.Turn("T-cancel", thread.TurnStart{Prompt: "stopped"}).Done(adapter.Outcome{Err: adapter.CancelledBy("alice")})
	for i := range maxFailures + 2 {
		obs.Turn(fmt.Sprintf("T%d", i), thread.TurnStart{Prompt: fmt.Sprintf("prompt %d", i)}).
			Done(adapter.Outcome{Err: fmt.Errorf("cause %d: <b>agent exited</b>", i)})
		x.clock.add(1)
	}
	c := x.browser()
	resp, err := c.PostForm(x.ts.URL+"/admin/signin", url.Values{"token": {"ops-token-0123456789"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, body := x.get(c, "/admin")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the operator's view: %d", resp.StatusCode)
	}
	if n := strings.Count(body, `class="failure"`); n != maxFailures {
		t.Errorf("%d failures listed, want the last %d", n, maxFailures)
	}
	newest := strings.Index(body, fmt.Sprintf("cause %d:", maxFailures+1))
	older := strings.Index(body, fmt.Sprintf("cause %d:", maxFailures))
	if newest < 0 || older < 0 || newest > older {
		t.Errorf("the failures are not listed newest first (%d, %d):\n%s", newest, older, body)
	}
	for _, gone := range []string{"cause 0:", "cause 1:", `data-thread="T-ok"`, `data-thread="T-cancel"`, "<b>agent"} {
		if strings.Contains(body, gone) {
			t.Errorf("the operator's view shows %q", gone)
		}
	}
	if !strings.Contains(body, "&lt;b&gt;agent exited&lt;/b&gt;") || !strings.Contains(body, "Prompt: prompt 65") {
		t.Errorf("a failure's cause or prompt is not shown as text:\n%s", body)
	}
	if len(x.s.hub.recentFailures()) != maxFailures {
		t.Errorf("the hub keeps %d failures, want %d", len(x.s.hub.recentFailures()), maxFailures)
	}
}
