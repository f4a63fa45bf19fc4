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

// input is one of a modal's inputs: its label, element type, action
// id, block id, value shown, options and those shown chosen, and
// whether it may be left empty.
type input struct {
	Label, Type, ID, Block, Value string
	Options, Chosen               []string
	Optional, Multi, Decimal      bool
}

func inputs(v fakeslack.View) []input {
	type option struct {
		Value string `json:"value"`
	}
	var out []input
	for _, raw := range v.Blocks {
		var b struct {
			Type    string `json:"type"`
			BlockID string `json:"block_id"`
			Label   struct {
				Text string `json:"text"`
			} `json:"label"`
			Optional bool `json:"optional"`
			Element  struct {
				Type           string   `json:"type"`
				ActionID       string   `json:"action_id"`
				InitialValue   string   `json:"initial_value"`
				Multiline      bool     `json:"multiline"`
				Decimal        bool     `json:"is_decimal_allowed"`
				Options        []option `json:"options"`
				InitialOption  *option  `json:"initial_option"`
				InitialOptions []option `json:"initial_options"`
			} `json:"element"`
		}
		json.Unmarshal(raw, &b)
		if b.Type != "input" {
			continue
		}
		in := input{Label: b.Label.Text, Type: b.Element.Type, ID: b.Element.ActionID, Block: b.BlockID, Value: b.Element.InitialValue,
			Optional: b.Optional, Multi: b.Element.Multiline, Decimal: b.Element.Decimal}
		for _, o := range b.Element.Options {
			in.Options = append(in.Options, o.Value)
		}
		if b.Element.InitialOption != nil {
			in.Chosen = append(in.Chosen, b.Element.InitialOption.Value)
		}
		for _, o := range b.Element.InitialOptions {
			in.Chosen = append(in.Chosen, o.Value)
		}
		out = append(out, in)
	}
	return out
}

// fill has u press ✏️ Answer on the question and returns the modal
// opened, checking it opened within the click's 3 seconds.
func (h *harness) fill(c conv, q fakeslack.Message, u fakeslack.User) fakeslack.View {
	h.t.Helper()
	clicked := time.Now()
	h.acked(h.srv.ClickButton(c.channel, q.TS, u.ID, buttonID(h.t, q.Blocks, "✏️ Answer")))
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

// submitted has u submit the modal with values and returns the
// submission's envelope, acknowledged within Slack's 3 seconds.
func (h *harness) submitted(v fakeslack.View, u fakeslack.User, values map[string]any) fakeslack.Envelope {
	h.t.Helper()
	env := h.acked(h.srv.SubmitView(v.ID, u.ID, values))
	if a := env.Attempts[len(env.Attempts)-1]; a.Latency > 3*time.Second {
		h.t.Fatalf("the submission was acknowledged after %s", a.Latency)
	}
	if env.AckError != "" {
		h.t.Fatalf("Slack would refuse the acknowledgement: %s", env.AckError)
	}
	return env
}

// A form is one modal, opened by ✏️ Answer, holding every field as it
// asks (a menu for the choice, a number input, a text input, Yes and No
// for the yes or no), whose Submit answers: only the starter may open
// it; a bad value is shown under its field, the modal kept open and the
// question with it; a good one closes the modal, reaches the agent as
// typed content, and the thread says who answered which fields, without
// their values.
func TestQuestion_FormIsOneModalWhoseSubmitAnswers(t *testing.T) {
	h := newHarness(t, setup{})
	c := h.mention(h.alice, "elicit-form")
	q := h.question(c, "❓ *The agent asks*: Tell me about the release")
	for _, want := range []string{"*Colour*", "one of: red, green, blue", "*Name* _(required)_", "a whole number from 1 to 10", "*Ship it*",
		"*✏️ Answer* opens the form, and its *Submit* sends the answer"} {
		if !strings.Contains(text(q), want) {
			t.Fatalf("question %q lacks %q", text(q), want)
		}
	}
	if els := elements(q.Blocks); len(els) != 2 || els[0].Text.Text != "✏️ Answer" || els[1].Text.Text != "Decline" {
		t.Fatalf("the question's actions: %+v", els)
	}
	h.acked(h.srv.ClickButton(c.channel, q.TS, h.bob.ID, buttonID(t, q.Blocks, "✏️ Answer")))
	h.whispered(h.bob, "can answer this question; you can't")
	if _, open := h.srv.OpenView(h.bob.ID); open {
		t.Fatal("bob was shown the form")
	}

	v := h.fill(c, q, h.alice)
	in := inputs(v)
	if len(in) != 4 || v.Title != "Release" {
		t.Fatalf("modal %q: %+v", v.Title, in)
	}
	colour, count, name, ship := in[0], in[1], in[2], in[3]
	switch {
	case colour.Label != "Colour" || colour.Type != "static_select" || strings.Join(colour.Options, ",") != "0,1,2" || !colour.Optional,
		count.Label != "Count" || count.Type != "number_input" || count.Decimal,
		name.Label != "Name" || name.Type != "plain_text_input" || name.Optional,
		ship.Label != "Ship it" || ship.Type != "radio_buttons" || strings.Join(ship.Options, ",") != "true,false":
		t.Fatalf("the modal's inputs: %+v", in)
	}
	values := map[string]any{colour.ID: "2", count.ID: "11", name.ID: "v2 secret", ship.ID: "true"}
	h.submitted(v, h.alice, values)
	if v, _ = h.srv.View(v.ID); !v.Open || !strings.Contains(v.Errors[count.Block], "At most 10") || len(v.Errors) != 1 {
		t.Fatalf("after a count of 11 the modal is open %v with errors %v", v.Open, v.Errors)
	}
	if m, _ := h.srv.Message(c.channel, q.TS); len(elements(m.Blocks)) != 2 {
		t.Fatal("the question closed on a refused answer")
	}
	values[count.ID] = "4"
	good := h.submitted(v, h.alice, values)
	if v, _ = h.srv.View(v.ID); v.Open {
		t.Fatal("the modal stayed open after a good answer")
	}
	nextSecond()
	h.acked(h.srv.Redeliver(good.ID)) // taken once: nothing said of it
	after := h.closedWith(c, q.TS, "@Alice answered: *Colour*, *Count*, *Name*, *Ship it*")
	if strings.Contains(text(after), "secret") || strings.Contains(text(after), "blue") {
		t.Fatalf("the answered question shows the values: %q", text(after))
	}
	h.answer(c, `answer: accept {"colour":"blue","count":4,"name":"v2 secret","ship":true}`)
	if s := h.client.Stats(); s.OpenQuestions != 0 {
		t.Fatalf("open questions = %d after the answer", s.OpenQuestions)
	}
	if n := len(h.srv.Ephemerals(h.alice.ID)); n != 0 {
		t.Fatalf("alice was told %d things privately", n)
	}
}

// Choices of several are checkboxes in the modal (a menu past ten
// options), shown with the agent's default, and a decimal number a number
// input that takes one; choosing more than the form allows is shown in
// the modal; the answer is the options' values.
func TestQuestion_FormChoicesAreCheckboxes(t *testing.T) {
	h := newHarness(t, setup{http: true})
	c := h.mention(h.alice, `elicit-json {"message":"Tag it","requestedSchema":{"type":"object","properties":{`+
		`"tags":{"type":"array","title":"Tags","items":{"enum":["alpha","beta","gamma"]},"maxItems":2,"default":["beta"]},`+
		`"ratio":{"type":"number","title":"Ratio"}},"required":["tags"]}}`)
	q := h.question(c, "❓ *The agent asks*: Tag it")
	v := h.fill(c, q, h.alice)
	in := inputs(v)
	if len(in) != 2 {
		t.Fatalf("the modal's inputs: %+v", in)
	}
	ratio, tags := in[0], in[1]
	if tags.Type != "checkboxes" || strings.Join(tags.Options, ",") != "0,1,2" || strings.Join(tags.Chosen, ",") != "1" ||
		ratio.Type != "number_input" || !ratio.Decimal {
		t.Fatalf("the modal's inputs: %+v", in)
	}
	h.submitted(v, h.alice, map[string]any{tags.ID: []string{"0", "1", "2"}, ratio.ID: "0.5"})
	if v, _ = h.srv.View(v.ID); !v.Open || !strings.Contains(v.Errors[tags.Block], "At most 2") {
		t.Fatalf("three tags of two: the modal is open %v with errors %v", v.Open, v.Errors)
	}
	h.submitted(v, h.alice, map[string]any{tags.ID: []string{"0", "2"}, ratio.ID: "0.5"})
	h.closedWith(c, q.TS, "@Alice answered: *Ratio*, *Tags*")
	h.answer(c, `answer: accept {"ratio":0.5,"tags":["alpha","gamma"]}`)
}

// Who may answer is checked again when the form is sent: a starter
// no longer allowed to use the app by then is told so, the modal closes
// and the question stays open for whoever may answer.
func TestQuestion_FormSentByWhoMayNoLongerAnswer(t *testing.T) {
	h := newHarness(t, setup{})
	c := h.mention(h.alice, "elicit-form")
	q := h.question(c, "❓ *The agent asks*: Tell me about the release")
	v := h.fill(c, q, h.alice)
	h.client.SetAccess(h.access(h.bob.ID))
	h.submitted(v, h.alice, map[string]any{inputs(v)[2].ID: "v2"})
	h.whispered(h.alice, "can answer this question; you can't")
	if v, _ = h.srv.View(v.ID); v.Open {
		t.Fatal("the modal stayed open")
	}
	if m, _ := h.srv.Message(c.channel, q.TS); len(elements(m.Blocks)) != 2 {
		t.Fatal("the question closed on a refused answer")
	}
	if s := h.client.Stats(); s.OpenQuestions != 1 {
		t.Fatalf("open questions = %d", s.OpenQuestions)
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
