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

// An agent's question in a Slack thread, through the broker binary: one
// modal holds its fields, choices and yes or no as menus and buttons,
// text and number as inputs, opened by ✏️ Answer within the click's 3
// seconds (Slack's life of a trigger_id); bob, who did not start the
// thread, cannot open it; the modal's Submit answers: the answer reaches
// the agent as typed, and the message says who answered which fields,
// never the values. Every interaction is acknowledged in time.
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
	button := func(label string) string {
		t.Helper()
		id, ok := brokertest.SlackButton(q.Blocks, label)
		if !ok {
			t.Fatalf("no button %q on %q", label, s.Text(q))
		}
		return id
	}

	ack(s.Srv.ClickButton(s.Channel, q.TS, s.Bob.ID, button("✏️ Answer")))
	f.whispered(pBob, "can answer this question; you can't", 0)
	clicked := time.Now()
	ack(s.Srv.ClickButton(s.Channel, q.TS, s.Alice.ID, button("✏️ Answer")))
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
	if len(ids) != 4 || ids["Colour"] == "" || ids["Count"] == "" || ids["Name"] == "" || ids["Ship it"] == "" {
		t.Fatalf("the modal %q asks %v, want Colour, Count, Name and Ship it", v.Title, ids)
	}
	ack(s.Srv.SubmitView(v.ID, s.Alice.ID, map[string]any{ids["Colour"]: "2", ids["Count"]: "4", ids["Name"]: "v2 secret", ids["Ship it"]: "true"}))
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
