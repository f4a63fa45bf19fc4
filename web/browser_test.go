package web

import (
	"encoding/json"
	"net/url"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat/thread"
	"acpbroker/internal/browsertest"
)

// waitFor waits until the JavaScript expression is true in the page.
func waitFor(t *testing.T, br *browsertest.Browser, expr string) {
	t.Helper()
	deadline := time.Now().Add(browsertest.StepTimeout)
	for {
		var ok bool
		br.Eval("!!("+expr+")", &ok)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is not true within %s", expr, browsertest.StepTimeout)
		}
		<-time.After(20 * time.Millisecond)
	}
}

// A live update of the controls keeps what the person is editing: a
// select changed and not yet submitted keeps its value, the message box
// its text and the focus, while what changed around them (the turn
// ended: no Cancel) is updated.
func TestBrowser_AnUpdateOfTheControlsKeepsWhatThePersonEdits(t *testing.T) {
	x := newSite(t, Config{})
	x.withControls()
	x.chat.see["T1"] = []string{"201"}
	x.chat.act["T1"] = []string{"201"}
	turn := x.web.Observer.Turn("T1", thread.TurnStart{Prompt: "hi"})
	turn.Status(adapter.Status{Phase: adapter.PhaseWorking})
	l, err := x.s.SignInLink(Person{Platform: "chat", User: thread.User{ID: "201", Name: "Alice"}}, "T1")
	if err != nil {
		t.Fatal(err)
	}
	lu, _ := url.Parse(l)
	br := browsertest.New(t)
	br.Navigate(x.ts.URL + "/signin?t=" + url.QueryEscape(lu.Query().Get("t")))
	br.Click("#signin")
	br.WaitText("#who", "Alice")
	waitFor(t, br, `document.querySelector("#cancel-form") && document.querySelector("form.choice select")`)

	br.Eval(`(() => {
		const s = document.querySelector("form.choice select");
		s.value = "high";
		s.dispatchEvent(new Event("change", { bubbles: true }));
		return true;
	})()`, nil)
	br.Eval(`(() => {
		const m = document.querySelector("#message");
		m.focus();
		m.value = "half a thought";
		m.dispatchEvent(new Event("input", { bubbles: true }));
		return true;
	})()`, nil)
	turn.Done(adapter.Outcome{StopReason: acp.StopEndTurn, Text: "ok"})
	waitFor(t, br, `!document.querySelector("#cancel-form")`)

	var s string
	br.Eval(`JSON.stringify({
		Select: document.querySelector("form.choice select").value,
		Message: document.querySelector("#message").value,
		Focus: document.activeElement ? document.activeElement.id : "",
	})`, &s)
	var got struct{ Select, Message, Focus string }
	if err := json.Unmarshal([]byte(s), &got); err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	if want := (struct{ Select, Message, Focus string }{"high", "half a thought", "message"}); got != want {
		t.Fatalf("after the controls' update: %+v, want %+v", got, want)
	}
	if e := br.Exceptions(); len(e) > 0 {
		t.Fatalf("the page threw: %v", e)
	}
}
