package discord_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"acpbroker/adapter"
	"acpbroker/chat/discord"
	"acpbroker/internal/fakediscord"
)

// question waits for the agent's question in thread (a message starting
// with prefix and carrying components) and returns it.
func (h *harness) question(thread, prefix string) fakediscord.Message {
	h.t.Helper()
	var msg fakediscord.Message
	h.srv.Await("question", func() bool {
		for _, m := range h.srv.Messages(thread) {
			if strings.HasPrefix(m.Content, prefix) && len(m.CustomIDs()) > 0 {
				msg = m
				return true
			}
		}
		return false
	})
	return msg
}

// menu returns the custom id of the question's select menu for field
// index i.
func menu(t *testing.T, m fakediscord.Message, i string) string {
	t.Helper()
	for _, id := range m.CustomIDs() {
		if strings.HasSuffix(id, ":f:"+i) {
			return id
		}
	}
	t.Fatalf("no menu for field %s in %q", i, m.CustomIDs())
	return ""
}

// awaitEdit waits for the question message to lose its components and
// say want.
func (h *harness) awaitEdit(thread, id, want string) fakediscord.Message {
	h.t.Helper()
	var m fakediscord.Message
	h.srv.Await("question closed with "+want, func() bool {
		m, _ = h.srv.Message(thread, id)
		return len(m.CustomIDs()) == 0 && len(m.Buttons()) == 0 && strings.Contains(m.Content, want)
	})
	return m
}

// A form: menus on the message for the choice and the yes/no, a modal for
// the text and the number. Only the starter may answer; Submit insists on
// the required field; a bad number is refused privately; the answer
// reaches the agent as typed content, and the thread says who answered
// which fields, without their values.
func TestQuestion_FormAnsweredThroughModalAndMenus(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "elicit-form")
	q := h.question(thread, "❓ **The agent asks**: Tell me about the release")
	// Fields in the agent's order: colour, count, name, ship.
	for _, want := range []string{"**Colour**", "one of: red, green, blue", "**Name** *(required)*", "a whole number from 1 to 10", "**Ship it**"} {
		if !strings.Contains(q.Content, want) {
			t.Fatalf("question %q lacks %q", q.Content, want)
		}
	}
	if len(q.Components) != 3 {
		t.Fatalf("%d rows, want two menus and the buttons", len(q.Components))
	}
	submit, fill := q.ButtonID(t, "Submit"), q.ButtonID(t, "✏️ Fill in")

	if r := h.response(h.srv.SelectMenu(thread, q.ID, bob.ID, menu(t, q, "0"), "2")); !r.Ephemeral() || !strings.Contains(r.Content, "can answer this question; you can't") {
		t.Fatalf("bob's choice answered %+v", r)
	}
	if r := h.response(h.srv.ClickButton(thread, q.ID, bob.ID, submit)); !r.Ephemeral() || !strings.Contains(r.Content, "you can't") {
		t.Fatalf("bob's submit answered %+v", r)
	}
	if r := h.response(h.srv.ClickButton(thread, q.ID, alice.ID, submit)); !r.Ephemeral() || !strings.Contains(r.Content, "Still needed: **Name**") {
		t.Fatalf("an early submit answered %+v", r)
	}
	if r := h.response(h.srv.SelectMenu(thread, q.ID, alice.ID, menu(t, q, "0"), "2")); r.Type != 6 {
		t.Fatalf("the choice answered %+v", r)
	}
	h.response(h.srv.SelectMenu(thread, q.ID, alice.ID, menu(t, q, "3"), "true"))

	open := h.srv.ClickButton(thread, q.ID, alice.ID, fill)
	if r := h.response(open); r.Type != 9 {
		t.Fatalf("Fill in answered %+v, want a modal", r)
	}
	modal, _ := h.srv.Modal(open)
	if len(modal.Inputs) != 2 || modal.Inputs[0].Label != "Count" || modal.Inputs[1].Label != "Name" || !modal.Inputs[1].Required {
		t.Fatalf("modal = %+v", modal)
	}
	r := h.response(h.srv.SubmitModal(open, alice.ID, map[string]string{modal.Inputs[0].CustomID: "many", modal.Inputs[1].CustomID: "v2 secret"}))
	if !r.Ephemeral() || !strings.Contains(r.Content, "Saved **Name**") || !strings.Contains(r.Content, "**Count**: not a whole number") {
		t.Fatalf("the modal answered %+v", r)
	}
	open = h.srv.ClickButton(thread, q.ID, alice.ID, fill)
	h.response(open)
	if modal, _ = h.srv.Modal(open); modal.Inputs[1].Value != "v2 secret" {
		t.Fatalf("the second modal does not keep the name: %+v", modal)
	}
	h.response(h.srv.SubmitModal(open, alice.ID, map[string]string{modal.Inputs[0].CustomID: "4"}))

	r = h.response(h.srv.ClickButton(thread, q.ID, alice.ID, submit))
	if r.Type != 7 || !strings.Contains(r.Content, "<@"+alice.ID+"> answered: **Colour**, **Count**, **Name**, **Ship it**") {
		t.Fatalf("submit answered %+v", r)
	}
	after, _ := h.srv.Message(thread, q.ID)
	if len(after.CustomIDs()) != 0 || strings.Contains(after.Content, "secret") || strings.Contains(after.Content, "blue") {
		t.Fatalf("the answered question reads %q with %q", after.Content, after.CustomIDs())
	}
	h.answer(thread, `answer: accept {"colour":"blue","count":4,"name":"v2 secret","ship":true}`)
	if s := h.client.Stats(); s.OpenQuestions != 0 {
		t.Fatalf("open questions = %d after the answer", s.OpenQuestions)
	}
}

// A url question shows the whole link, as text and as a link button the
// bot never follows; Done accepts, Decline declines.
func TestQuestion_URLDoneOrDecline(t *testing.T) {
	h := newHarness(t, setup{})
	const link = "https://tracker.example/auth?state=x1&next=/t"
	thread := h.mention(alice, "elicit-url")
	q := h.question(thread, "🔗 **The agent asks you to open a link**: Sign in to the tracker")
	if !strings.Contains(q.Content, "`"+link+"`") || q.Flags&fakediscord.FlagSuppressEmbeds == 0 {
		t.Fatalf("question %q (flags %d)", q.Content, q.Flags)
	}
	if b := q.Buttons(); len(b) != 3 || b[0].URL != link || b[0].Label != link {
		t.Fatalf("buttons %+v", b)
	}
	r := h.response(h.srv.ClickButton(thread, q.ID, alice.ID, q.ButtonID(t, "Done")))
	if r.Type != 7 || !strings.Contains(r.Content, "says it is done") {
		t.Fatalf("Done answered %+v", r)
	}
	h.answer(thread, "answer: accept")

	thread = h.mention(alice, "elicit-url")
	q = h.question(thread, "🔗")
	h.response(h.srv.ClickButton(thread, q.ID, alice.ID, q.ButtonID(t, "Decline")))
	h.awaitEdit(thread, q.ID, "<@"+alice.ID+"> declined")
	h.answer(thread, "answer: decline")
}

// turn.permission_timeout bounds a question: unanswered, it closes
// (saying so), the agent is told "cancel" and the thread is told.
func TestQuestion_TimeoutAnswersCancel(t *testing.T) {
	h := newHarness(t, setup{engine: adapter.Config{PermissionTimeout: time.Second}})
	thread := h.mention(alice, "elicit-form")
	q := h.question(thread, "❓")
	h.awaitEdit(thread, q.ID, "Closed without an answer (no answer within 1s)")
	msgs := h.answer(thread, "answer: cancel")
	if text := joined(msgs); !strings.Contains(text, "was not answered within 1s; answered cancel") {
		t.Fatalf("thread reads %q", text)
	}
	if s := h.client.Stats(); s.OpenQuestions != 0 {
		t.Fatalf("open questions = %d", s.OpenQuestions)
	}
}

// /cancel with a question open: the question closes and the agent is
// told "cancel" before the turn gives up on it, so the agent, which waits
// for the answer, ends its turn "cancelled" and is kept.
func TestQuestion_CancelledTurnAnswersCancelFirst(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "elicit-form")
	q := h.question(thread, "❓")
	h.response(h.srv.SlashCommand(thread, alice.ID, "cancel", nil))
	h.awaitEdit(thread, q.ID, "cancelled by Alice")
	msgs := h.answer(thread, "⏹️ cancelled by Alice")
	if text := joined(msgs); !strings.Contains(text, "answer: cancel") {
		t.Fatalf("thread reads %q", text)
	}
	if s := h.engine.Stats().Pool; s.Killed != 0 {
		t.Fatalf("pool %+v: the agent answered the cancel and should be kept", s)
	}
}

// A form too big for Discord (six text fields, a choice of 30) is
// declined with the reason in the thread; nothing is left open.
func TestQuestion_TooBigFormIsDeclined(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "elicit-big")
	var shown fakediscord.Message
	h.srv.Await("the refusal", func() bool {
		for _, m := range h.srv.Messages(thread) {
			if strings.HasPrefix(m.Content, "❓ **The agent asks**: Fill in all of this") {
				shown = m
				return true
			}
		}
		return false
	})
	if !strings.Contains(shown.Content, "can't be shown in Discord: the choice “pick” has 30 options") || len(shown.CustomIDs()) != 0 {
		t.Fatalf("refusal %q", shown.Content)
	}
	h.answer(thread, "answer: decline")
	if s := h.client.Stats(); s.OpenQuestions != 0 {
		t.Fatalf("open questions = %d", s.OpenQuestions)
	}
}

// The agent withdrawing its question ($/cancel_request) or saying the
// link's task is complete closes the question in the thread.
func TestQuestion_AgentWithdrawsOrCompletes(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "elicit-cancel-request 500ms")
	q := h.question(thread, "❓")
	h.awaitEdit(thread, q.ID, "The agent withdrew the question")
	h.answer(thread, "answer: error -32800")

	thread = h.mention(alice, "elicit-url complete 500ms")
	q = h.question(thread, "🔗")
	h.awaitEdit(thread, q.ID, "The agent says the task at the link is complete")
	h.answer(thread, "answer: cancel")
	if s := h.client.Stats(); s.OpenQuestions != 0 {
		t.Fatalf("open questions = %d", s.OpenQuestions)
	}
}

// Many turns abandoned with a question open leave no question open, in
// the chat layer or the agent's connection.
func TestQuestion_AbandonedTurnsLeaveNothingOpen(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "elicit-url")
	for i := range 10 {
		h.srv.Await("a question open", func() bool { return h.client.Stats().OpenQuestions == 1 })
		h.response(h.srv.SlashCommand(thread, alice.ID, "cancel", nil))
		h.srv.Await("the turn ended", func() bool { return len(h.discord.Answers(thread)) == i+1 })
		if i < 9 {
			h.discord.Post(thread, alice, "elicit-url")
		}
	}
	h.srv.Await("nothing left open", func() bool {
		s := h.engine.Stats()
		return h.client.Stats().OpenQuestions == 0 && s.Pool.Conn.PendingElicitations == 0 && s.Running == 0
	})
	if s := h.engine.Stats(); s.Pool.Spawned != 1 || s.Pool.Conn.AgentRequests != 0 {
		t.Fatalf("pool %+v", s.Pool)
	}
}

// elicitJSON is the prompt that has the fake agent ask the question of
// params (a JSON object, the session left out).
func elicitJSON(t *testing.T, params map[string]any) string {
	t.Helper()
	b, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	return "elicit-json " + string(b)
}

// text is a form's string field.
func text(title string) map[string]any { return map[string]any{"type": "string", "title": title} }

// A form question keeps its lines: the agent's message as written, a
// line per field, and the line that says who may answer as Discord's
// small print.
func TestQuestion_FormKeepsItsLines(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, elicitJSON(t, map[string]any{"message": "Two things:\nthe name,\nand the colour.",
		"requestedSchema": map[string]any{"type": "object", "properties": map[string]any{
			"name":   text("Name"),
			"colour": map[string]any{"type": "string", "title": "Colour", "enum": []string{"red", "blue"}},
		}}}))
	q := h.question(thread, "❓")
	for _, want := range []string{
		"❓ **The agent asks**: Two things:\nthe name,\nand the colour.\n• **Colour** — one of: red, blue\n• **Name** — text\n",
		"\n-# <@" + alice.ID + "> or an approver can answer: ",
	} {
		if !strings.Contains(q.Content, want) {
			t.Fatalf("question reads %q, want it to hold %q", q.Content, want)
		}
	}
	h.response(h.srv.ClickButton(thread, q.ID, alice.ID, q.ButtonID(t, "Decline")))
	if m := h.awaitEdit(thread, q.ID, "declined"); !strings.HasPrefix(m.Content, "❓ **The agent asks**: Two things:\nthe name,\n") {
		t.Fatalf("the answered question reads %q", m.Content)
	}
	h.answer(thread, "answer: decline")
}

// fill opens the question's modal as u and returns the interaction and
// the modal.
func (h *harness) fill(thread string, q fakediscord.Message, u fakediscord.User) (string, fakediscord.Modal) {
	h.t.Helper()
	open := h.srv.ClickButton(thread, q.ID, u.ID, q.ButtonID(h.t, "✏️ Fill in"))
	if r := h.response(open); r.Type != 9 {
		h.t.Fatalf("Fill in answered %+v, want a modal", r)
	}
	modal, _ := h.srv.Modal(open)
	return open, modal
}

// An answer typed in the modal is shown again as typed when the modal is
// reopened, newlines and all, up to Discord's 4000 characters: Discord
// sends back what the modal shows, so anything lost there would be lost
// from the answer. The agent's own multi-line default is shown as it is
// too, and a default longer than a form field holds is refused.
func TestQuestion_ModalKeepsValuesIntact(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "elicit-form")
	q := h.question(thread, "❓")
	const answer = "first line\n\n  second line, indented\nthird"
	open, modal := h.fill(thread, q, alice)
	h.response(h.srv.SubmitModal(open, alice.ID, map[string]string{modal.Inputs[1].CustomID: answer}))
	_, modal = h.fill(thread, q, alice)
	if modal.Inputs[1].Value != answer || modal.Inputs[1].Style != 2 {
		t.Fatalf("reopened, the name reads %q (style %d), want %q in a paragraph", modal.Inputs[1].Value, modal.Inputs[1].Style, answer)
	}
	long := strings.Repeat("é", 3990) + "\nend\n..."
	open, modal = h.fill(thread, q, alice)
	h.response(h.srv.SubmitModal(open, alice.ID, map[string]string{modal.Inputs[1].CustomID: long}))
	if _, modal = h.fill(thread, q, alice); modal.Inputs[1].Value != long {
		t.Fatalf("reopened, a 4000-character name reads %d characters", len([]rune(modal.Inputs[1].Value)))
	}
	h.response(h.srv.ClickButton(thread, q.ID, alice.ID, q.ButtonID(t, "Submit")))
	msgs := h.answer(thread, `éé\nend\n..."}`)
	if text := joined(msgs); !strings.Contains(text, `answer: accept {"name":"é`) || strings.Count(text, "é") != 3990 {
		t.Fatalf("the agent was answered %q", text)
	}

	thread = h.mention(alice, elicitJSON(t, map[string]any{"message": "Notes?", "requestedSchema": map[string]any{"type": "object", "properties": map[string]any{
		"notes": map[string]any{"type": "string", "title": "Notes", "maxLength": 50, "default": "one\ntwo"},
	}}}))
	q = h.question(thread, "❓")
	if _, modal = h.fill(thread, q, alice); modal.Inputs[0].Value != "one\ntwo" || modal.Inputs[0].Style != 2 {
		t.Fatalf("the agent's default shows as %q (style %d)", modal.Inputs[0].Value, modal.Inputs[0].Style)
	}
	h.response(h.srv.ClickButton(thread, q.ID, alice.ID, q.ButtonID(t, "Submit")))
	h.answer(thread, `answer: accept {"notes":"one\ntwo"}`)

	thread = h.mention(alice, elicitJSON(t, map[string]any{"message": "Paste it", "requestedSchema": map[string]any{"type": "object", "properties": map[string]any{
		"text": map[string]any{"type": "string", "title": "Text", "default": strings.Repeat("x", 4001)},
	}}}))
	msgs = h.answer(thread, "answer: decline")
	if text := joined(msgs); !strings.Contains(text, "can't be shown in Discord: the agent's suggestion for “Text” is longer than the 4000 characters a Discord form field holds") {
		t.Fatalf("thread reads %q", text)
	}
}

// Discord's limits on a form: more than 5 text fields, or more than 4
// choices, are declined saying which; a label is cut to 45 characters.
func TestQuestion_ModalLimits(t *testing.T) {
	h := newHarness(t, setup{})
	six := map[string]any{}
	for i := range 6 {
		six[fmt.Sprintf("t%d", i)] = text(fmt.Sprintf("Text %d", i))
	}
	thread := h.mention(alice, elicitJSON(t, map[string]any{"message": "Six", "requestedSchema": map[string]any{"type": "object", "properties": six}}))
	if text := joined(h.answer(thread, "answer: decline")); !strings.Contains(text, "can't be shown in Discord: it has 6 text fields, more than the 5 one Discord form holds") {
		t.Fatalf("six text fields: thread reads %q", text)
	}

	five := map[string]any{}
	for i := range 5 {
		five[fmt.Sprintf("b%d", i)] = map[string]any{"type": "boolean", "title": fmt.Sprintf("Flag %d", i)}
	}
	thread = h.mention(alice, elicitJSON(t, map[string]any{"message": "Five", "requestedSchema": map[string]any{"type": "object", "properties": five}}))
	if text := joined(h.answer(thread, "answer: decline")); !strings.Contains(text, "can't be shown in Discord: it has 5 choices, more than the 4 menus one Discord message holds") {
		t.Fatalf("five choices: thread reads %q", text)
	}

	long := "A field whose title goes on well past what Discord shows"
	props := map[string]any{"long": text(long)}
	for i := range 4 {
		props[fmt.Sprintf("t%d", i)] = text(fmt.Sprintf("Text %d", i))
	}
	for i := range 4 {
		props[fmt.Sprintf("b%d", i)] = map[string]any{"type": "boolean", "title": fmt.Sprintf("Flag %d", i)}
	}
	thread = h.mention(alice, elicitJSON(t, map[string]any{"message": "As much as fits", "requestedSchema": map[string]any{"type": "object", "properties": props}}))
	q := h.question(thread, "❓")
	if len(q.Components) != 5 {
		t.Fatalf("%d rows, want four menus and the buttons", len(q.Components))
	}
	_, modal := h.fill(thread, q, alice)
	if len(modal.Inputs) != 5 {
		t.Fatalf("the modal has %d inputs, want 5", len(modal.Inputs))
	}
	var label string
	for _, in := range modal.Inputs {
		if strings.HasPrefix(in.Label, "A field") {
			label = in.Label
		}
	}
	if n := len([]rune(label)); n != 45 || !strings.HasSuffix(label, "…") || !strings.HasPrefix(long, strings.TrimSuffix(label, "…")) {
		t.Fatalf("the long label reads %q (%d characters)", label, n)
	}
	h.response(h.srv.ClickButton(thread, q.ID, alice.ID, q.ButtonID(t, "Decline")))
	h.answer(thread, "answer: decline")
}

// A field with no name (an empty key and no title, or a blank title) is
// shown as "field N", and a choice whose value is "" as "(empty)": what
// Discord would refuse to show is never sent, and "" can be chosen.
func TestQuestion_NamelessFieldsAndEmptyValues(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, elicitJSON(t, map[string]any{"message": "Odd names", "requestedSchema": map[string]any{"type": "object", "properties": map[string]any{
		"":     map[string]any{"type": "string"},
		"pick": map[string]any{"type": "string", "title": "  ", "enum": []string{"", "b"}},
	}, "required": []string{"", "pick"}}}))
	q := h.question(thread, "❓")
	if !strings.Contains(q.Content, "• **field 1** *(required)*") || !strings.Contains(q.Content, "• **pick** *(required)* — one of: (empty), b") {
		t.Fatalf("question reads %q", q.Content)
	}
	open, modal := h.fill(thread, q, alice)
	if len(modal.Inputs) != 1 || modal.Inputs[0].Label != "field 1" {
		t.Fatalf("modal %+v", modal)
	}
	h.response(h.srv.SubmitModal(open, alice.ID, map[string]string{modal.Inputs[0].CustomID: "hello"}))
	h.response(h.srv.SelectMenu(thread, q.ID, alice.ID, menu(t, q, "1"), "0"))
	h.response(h.srv.ClickButton(thread, q.ID, alice.ID, q.ButtonID(t, "Submit")))
	h.answer(thread, `answer: accept {"":"hello","pick":""}`)
}

// An approver who did not start the thread may answer its question.
func TestQuestion_AnApproverAnswers(t *testing.T) {
	h := newHarness(t, setup{adjust: func(h *harness, d *discord.Config) { d.Access.Approvers = []string{bob.ID} }})
	thread := h.mention(alice, "elicit-url")
	q := h.question(thread, "🔗")
	if r := h.response(h.srv.ClickButton(thread, q.ID, carol.ID, q.ButtonID(t, "Done"))); !r.Ephemeral() || !strings.Contains(r.Content, "you can't") {
		t.Fatalf("carol's click answered %+v", r)
	}
	r := h.response(h.srv.ClickButton(thread, q.ID, bob.ID, q.ButtonID(t, "Done")))
	if r.Type != 7 || !strings.Contains(r.Content, "<@"+bob.ID+"> says it is done") {
		t.Fatalf("bob's Done answered %+v", r)
	}
	h.answer(thread, "answer: accept")
}
