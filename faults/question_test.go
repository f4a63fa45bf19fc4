package faults

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakeslack"
)

// An agent's question in a Slack thread, through the broker binary: its
// choices are menus on the message, its text and number a modal that
// ✏️ Fill in opens within the click's 3 seconds (Slack's life of a
// trigger_id); bob, who did not start the thread, cannot answer; the
// answer reaches the agent as typed, and the message says who answered
// which fields, never the values. Every interaction is acknowledged in
// time.
func TestQuestion_AFormAnsweredThroughASlackModal(t *testing.T) {
	w, front := newWorldOn(t, "slack", setup{})
	f := front.(*slackFront)
	s := w.Slack
	b := w.start()
	thread := f.mention(pAlice, "elicit-form")
	var q fakeslack.Message
	await(t, f, "the question", func() bool {
		for _, m := range s.Srv.Thread(s.Channel, thread) {
			if m.FromBot() && strings.HasPrefix(s.Text(m), "❓ *The agent asks*") && len(brokertest.SlackElements(m.Blocks)) > 0 {
				q = m
				return true
			}
		}
		return false
	})
	b.awaitMetric(`acp_broker_chat_open_questions{platform="slack"}`, func(v float64) bool { return v == 1 })
	ack := func(id string) {
		t.Helper()
		brokertest.MustGet(t, patience, func(ctx context.Context) (fakeslack.Envelope, error) { return s.AwaitAck(ctx, id) })
	}
	menu := func(field string) string {
		t.Helper()
		for _, e := range brokertest.SlackElements(q.Blocks) {
			if strings.HasSuffix(e.ActionID, ":f:"+field) {
				return e.ActionID
			}
		}
		t.Fatalf("no menu for field %s on %q", field, s.Text(q))
		return ""
	}
	button := func(label string) string {
		t.Helper()
		id, ok := brokertest.SlackButton(q.Blocks, label)
		if !ok {
			t.Fatalf("no button %q on %q", label, s.Text(q))
		}
		return id
	}

	ack(s.Srv.ChooseOption(s.Channel, q.TS, s.Bob.ID, menu("0"), "2"))
	f.whispered(pBob, "can answer this question; you can't", 0)
	ack(s.Srv.ChooseOption(s.Channel, q.TS, s.Alice.ID, menu("0"), "2"))
	ack(s.Srv.ChooseOption(s.Channel, q.TS, s.Alice.ID, menu("3"), "true"))

	clicked := time.Now()
	ack(s.Srv.ClickButton(s.Channel, q.TS, s.Alice.ID, button("✏️ Fill in")))
	var v fakeslack.View
	await(t, f, "the modal", func() bool {
		var ok bool
		v, ok = s.Srv.OpenView(s.Alice.ID)
		return ok && v.Opened.After(clicked)
	})
	if d := v.Opened.Sub(clicked); d > 3*time.Second {
		t.Fatalf("the modal opened %s after the click, past the trigger's life", d)
	}
	ids := map[string]string{}
	for _, raw := range v.Blocks {
		var in struct {
			Type  string `json:"type"`
			Label struct {
				Text string `json:"text"`
			} `json:"label"`
			Element struct {
				ActionID string `json:"action_id"`
			} `json:"element"`
		}
		json.Unmarshal(raw, &in)
		if in.Type == "input" {
			ids[in.Label.Text] = in.Element.ActionID
		}
	}
	if ids["Count"] == "" || ids["Name"] == "" {
		t.Fatalf("the modal %q asks %v, want Count and Name", v.Title, ids)
	}
	ack(s.Srv.SubmitView(v.ID, s.Alice.ID, map[string]any{ids["Count"]: "4", ids["Name"]: "v2 secret"}))
	f.whispered(pAlice, "Saved", 0)
	ack(s.Srv.ClickButton(s.Channel, q.TS, s.Alice.ID, button("Submit")))
	await(t, f, "the question closed with who answered", func() bool {
		m, _ := s.Srv.Message(s.Channel, q.TS)
		return len(brokertest.SlackElements(m.Blocks)) == 0 && strings.Contains(s.Text(m), "@"+s.Alice.DisplayName+" answered: *Colour*, *Count*, *Name*, *Ship it*")
	})
	if m, _ := s.Srv.Message(s.Channel, q.TS); strings.Contains(s.Text(m), "secret") || strings.Contains(s.Text(m), "blue") {
		t.Fatalf("the answered question shows the values: %q", s.Text(m))
	}
	got := f.awaitAnswers(thread, 1)[0]
	if !strings.Contains(got.text, `answer: accept {"colour":"blue","count":4,"name":"v2 secret","ship":true}`) {
		t.Fatalf("the agent was answered %q", got.text)
	}
	b.awaitMetric(`acp_broker_chat_open_questions{platform="slack"}`, func(v float64) bool { return v == 0 })
	b.awaitMetric(`acp_broker_elicitations_total{action="accept",by="user"}`, func(v float64) bool { return v == 1 })
}
