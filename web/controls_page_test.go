package web

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat/thread"
)

// controlsOf is threadsOf with the agent's options (an "effort" select)
// and a queue: a command's answer names who gave it by id, as the
// chat's does.
type controlsOf struct {
	*threadsOf
	queue []thread.WaitingMessage
}

func (f *controlsOf) CommandFor(ctx context.Context, th string, u thread.User, via, name string, args map[string]string) (string, error) {
	return "⚙️ <@" + u.ID + "> set **" + args["option"] + "** to **" + args["value"] + "**; <@q1> waits.", nil
}

func (f *controlsOf) Options(th string) adapter.ThreadOptions {
	return adapter.ThreadOptions{SessionState: acp.SessionState{Options: []acp.ConfigOption{{
		ID: "effort", Name: "Effort", Type: acp.ConfigSelect, Value: "low",
		Choices: []acp.ConfigChoice{{Value: "low", Name: "Low"}, {Value: "high", Name: "High"}},
	}}}}
}

func (f *controlsOf) QueueFor(th string, u thread.User) []thread.WaitingMessage  { return f.queue }
func (f *controlsOf) SendNowFor(th, key string, u thread.User, via string) error { return nil }
func (f *controlsOf) RemoveFor(th, key string, u thread.User, via string) error  { return nil }
func (f *controlsOf) MessageLink(ref string) string                              { return "" }

// withControls makes the site's "chat" offer controlsOf's controls.
func (x *site) withControls() *controlsOf {
	c := &controlsOf{threadsOf: x.chat}
	x.web = x.s.Platform("chat", c)
	return c
}

// signInAs signs u in with a client of its own, to thread th.
func (x *site) signInAs(u thread.User, th string) *http.Client {
	x.t.Helper()
	l, err := x.s.SignInLink(Person{Platform: "chat", User: u}, th)
	if err != nil {
		x.t.Fatal(err)
	}
	lu, _ := url.Parse(l)
	c := x.browser()
	x.signIn(c, lu.Query().Get("t"))
	return c
}

// What the page says after a command names people as the chat shows
// them: the person who gave it, and the authors of the messages waiting.
func TestChoose_TheStatusNamesPeopleByTheirNames(t *testing.T) {
	x := newSite(t, Config{})
	ctl := x.withControls()
	ctl.queue = []thread.WaitingMessage{{Key: "k1", AuthorID: "q1", Author: "Quinn", Title: "next"}}
	x.chat.see["T1"] = []string{"201"}
	x.chat.act["T1"] = []string{"201"}
	x.web.Observer.Turn("T1", thread.TurnStart{Prompt: "hi"})
	c := x.signInAs(thread.User{ID: "201", Name: "Alice"}, "T1")
	_, body := x.get(c, "/t/chat/T1")
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no form token in the page: %s", body)
	}
	req, _ := http.NewRequest("POST", x.ts.URL+"/t/chat/T1/choose", strings.NewReader(url.Values{
		"csrf": {m[1]}, "command": {"config"}, "option": {"effort"}, "value": {"high"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d struct{ Message string }
	json.NewDecoder(resp.Body).Decode(&d)
	if want := "⚙️ @Alice set effort to high; @Quinn waits."; resp.StatusCode != 200 || d.Message != want {
		t.Fatalf("status %d %q, want %q", resp.StatusCode, d.Message, want)
	}
}
