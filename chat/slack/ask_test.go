package slack_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"acpbroker/adapter"
	"acpbroker/internal/fakeslack"
)

// question waits for the app's message in the thread that starts with
// prefix and carries actions, and returns it.
func (h *harness) question(c conv, prefix string) fakeslack.Message {
	h.t.Helper()
	var found fakeslack.Message
	h.srv.Await("a question starting "+prefix, func() bool {
		for _, m := range h.srv.Thread(c.channel, c.ts) {
			if m.FromBot() && strings.HasPrefix(text(m), prefix) && len(elements(m.Blocks)) > 0 {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

// closedWith waits for a question's message to lose its actions and say
// want.
func (h *harness) closedWith(c conv, ts, want string) fakeslack.Message {
	h.t.Helper()
	var m fakeslack.Message
	h.srv.Await("the question closed with "+want, func() bool {
		m, _ = h.srv.Message(c.channel, ts)
		return len(elements(m.Blocks)) == 0 && strings.Contains(text(m), want)
	})
	return m
}

// menuID is the action id of the question's menu for field i.
func menuID(t *testing.T, m fakeslack.Message, i string) string {
	t.Helper()
	var ids []string
	for _, e := range elements(m.Blocks) {
		if strings.HasSuffix(e.ActionID, ":f:"+i) {
			return e.ActionID
		}
		ids = append(ids, e.ActionID)
	}
	t.Fatalf("no menu for field %s among %q", i, ids)
	return ""
}

// The agent's permission request shows a button per option. Only the
// thread's starter (or an approver) may click: anyone else is told so
// privately. Every click is acknowledged within Slack's 3 seconds; the
// buttons give way to who chose what, and the agent gets the choice.
func TestPermission_StarterClicksAllow(t *testing.T) {
	h := newHarness(t, setup{})
	c := h.mention(h.alice, "permission")
	q := h.question(c, "🔐 *Permission needed*")
	if got := len(elements(q.Blocks)); got != 3 {
		t.Fatalf("%d buttons, want one per option", got)
	}
	h.acked(h.srv.ClickButton(c.channel, q.TS, h.bob.ID, buttonID(t, q.Blocks, "Allow")))
	h.whispered(h.bob, "can answer this request; you can't")
	h.acked(h.srv.ClickButton(c.channel, q.TS, h.alice.ID, buttonID(t, q.Blocks, "Allow")))
	h.closedWith(c, q.TS, "@Alice chose *Allow*")
	h.answer(c, "permission granted: allow")
	if s := h.client.Stats(); s.OpenPermissions != 0 {
		t.Fatalf("open permissions = %d after the answer", s.OpenPermissions)
	}
}

// turn.permission_timeout: with no click, the request closes (saying so,
// buttons gone), and the agent is told "cancelled".
func TestPermission_TimeoutFailsClosed(t *testing.T) {
	h := newHarness(t, setup{engine: adapter.Config{PermissionTimeout: time.Second}})
	c := h.mention(h.alice, "permission")
	q := h.question(c, "🔐")
	h.closedWith(c, q.TS, "Closed without an answer (no answer within 1s); the agent was told _cancelled_")
	msgs := h.answer(c, "permission cancelled")
	if !strings.Contains(joined(msgs), "was not answered within 1s; answered cancelled") {
		t.Fatalf("the answer does not say the request timed out: %q", joined(msgs))
	}
	if s := h.client.Stats(); s.OpenPermissions != 0 {
		t.Fatalf("open permissions = %d after the timeout", s.OpenPermissions)
	}
}

// inputs are a modal's text inputs: label, action id, value shown,
// whether it may be left empty.
type input struct {
	Label, ID, Value string
	Optional, Multi  bool
}

func inputs(v fakeslack.View) []input {
	var out []input
	for _, raw := range v.Blocks {
		var b struct {
			Type  string `json:"type"`
			Label struct {
				Text string `json:"text"`
			} `json:"label"`
			Optional bool `json:"optional"`
			Element  struct {
				ActionID     string `json:"action_id"`
				InitialValue string `json:"initial_value"`
				Multiline    bool   `json:"multiline"`
			} `json:"element"`
		}
		json.Unmarshal(raw, &b)
		if b.Type == "input" {
			out = append(out, input{b.Label.Text, b.Element.ActionID, b.Element.InitialValue, b.Optional, b.Element.Multiline})
		}
	}
	return out
}

// fill has u press ✏️ Fill in on the question and returns the modal
// opened, checking it opened within the click's 3 seconds.
func (h *harness) fill(c conv, q fakeslack.Message, u fakeslack.User) fakeslack.View {
	h.t.Helper()
	clicked := time.Now()
	h.acked(h.srv.ClickButton(c.channel, q.TS, u.ID, buttonID(h.t, q.Blocks, "✏️ Fill in")))
	var v fakeslack.View
	h.srv.Await("the modal", func() bool {
		var ok bool
		v, ok = h.srv.OpenView(u.ID)
		return ok && v.Opened.After(clicked)
	})
	if d := v.Opened.Sub(clicked); d > 3*time.Second {
		h.t.Fatalf("the modal opened %s after the click", d)
	}
	return v
}

// A form: menus on the message for the choice and the yes/no, a modal
// for the text and the number. Only the starter may answer; Submit
// insists on the required field; a bad number is refused privately; the
// modal shows again what was typed; the answer reaches the agent as
// typed content, and the thread says who answered which fields, without
// their values.
func TestQuestion_FormAnsweredThroughModalAndMenus(t *testing.T) {
	h := newHarness(t, setup{})
	c := h.mention(h.alice, "elicit-form")
	q := h.question(c, "❓ *The agent asks*: Tell me about the release")
	for _, want := range []string{"*Colour*", "one of: red, green, blue", "*Name* _(required)_", "a whole number from 1 to 10", "*Ship it*"} {
		if !strings.Contains(text(q), want) {
			t.Fatalf("question %q lacks %q", text(q), want)
		}
	}
	submit := buttonID(t, q.Blocks, "Submit")
	h.acked(h.srv.ChooseOption(c.channel, q.TS, h.bob.ID, menuID(t, q, "0"), "2"))
	h.whispered(h.bob, "can answer this question; you can't")
	h.acked(h.srv.ClickButton(c.channel, q.TS, h.alice.ID, submit))
	h.whispered(h.alice, "Still needed: *Name*")
	h.acked(h.srv.ChooseOption(c.channel, q.TS, h.alice.ID, menuID(t, q, "0"), "2"))
	h.acked(h.srv.ChooseOption(c.channel, q.TS, h.alice.ID, menuID(t, q, "3"), "true"))

	v := h.fill(c, q, h.alice)
	in := inputs(v)
	if len(in) != 2 || in[0].Label != "Count" || in[1].Label != "Name" || in[1].Optional || v.Title != "Release" {
		t.Fatalf("modal %q: %+v", v.Title, in)
	}
	h.acked(h.srv.SubmitView(v.ID, h.alice.ID, map[string]any{in[0].ID: "many", in[1].ID: "v2 secret"}))
	h.whispered(h.alice, "Saved *Name*")
	h.whispered(h.alice, "*Count*: not a whole number")
	v = h.fill(c, q, h.alice)
	if in = inputs(v); in[1].Value != "v2 secret" {
		t.Fatalf("the second modal does not keep the name: %+v", in)
	}
	h.acked(h.srv.SubmitView(v.ID, h.alice.ID, map[string]any{in[0].ID: "4", in[1].ID: "v2 secret"}))
	h.acked(h.srv.ClickButton(c.channel, q.TS, h.alice.ID, submit))
	after := h.closedWith(c, q.TS, "@Alice answered: *Colour*, *Count*, *Name*, *Ship it*")
	if strings.Contains(text(after), "secret") || strings.Contains(text(after), "blue") {
		t.Fatalf("the answered question shows the values: %q", text(after))
	}
	h.answer(c, `answer: accept {"colour":"blue","count":4,"name":"v2 secret","ship":true}`)
	if s := h.client.Stats(); s.OpenQuestions != 0 {
		t.Fatalf("open questions = %d after the answer", s.OpenQuestions)
	}
}

// A url question shows the whole link, as text and as a URL button the
// app never follows (its click is acknowledged and nothing more); Done
// accepts, Decline declines.
func TestQuestion_URLIsALinkButton(t *testing.T) {
	h := newHarness(t, setup{})
	const link = "https://tracker.example/auth?state=x1&next=/t"
	c := h.mention(h.alice, "elicit-url")
	q := h.question(c, "🔗 *The agent asks you to open a link*: Sign in to the tracker")
	if !strings.Contains(text(q), "`https://tracker.example/auth?state=x1&amp;next=/t`") {
		t.Fatalf("question %q", text(q))
	}
	els := elements(q.Blocks)
	if len(els) != 3 || els[0].URL != link || els[0].Text.Text != link || q.UnfurlLinks == nil || *q.UnfurlLinks {
		t.Fatalf("buttons %+v, unfurl %v", els, q.UnfurlLinks)
	}
	h.acked(h.srv.ClickButton(c.channel, q.TS, h.alice.ID, els[0].ActionID))
	h.acked(h.srv.ClickButton(c.channel, q.TS, h.alice.ID, buttonID(t, q.Blocks, "Done")))
	h.closedWith(c, q.TS, "says it is done")
	h.answer(c, "answer: accept")

	c = h.mention(h.alice, "elicit-url")
	q = h.question(c, "🔗")
	h.acked(h.srv.ClickButton(c.channel, q.TS, h.alice.ID, buttonID(t, q.Blocks, "Decline")))
	h.closedWith(c, q.TS, "@Alice declined")
	h.answer(c, "answer: decline")
}
