package faults

import (
	"strings"
	"testing"

	"acpbroker/internal/fakediscord"
)

// Two people clicking the same permission request at the same moment get
// one decision: the thread's starter (Allow) and an approver (Reject)
// click together; one click decides and replaces the buttons with who
// chose what, the other is told privately that the request is no longer
// open, and the agent acts on exactly the choice shown. Three rounds.
func TestDoubleClick_OneDecisionPerRequest(t *testing.T) {
	w := newWorld(t, setup{conf: settings{"discord.approvers": []string{carol.ID}}})
	b := w.start()
	thread := w.mention(alice, "permission")
	var seen []string
	for round := range 3 {
		if round > 0 {
			w.Discord.Post(thread, alice, "permission")
		}
		req := w.permissionRequest(thread, seen...)
		seen = append(seen, req.ID)
		allow, reject := req.ButtonID(t, "Allow"), req.ButtonID(t, "Reject")

		ids := w.Srv.ClickTogether(thread, req.ID,
			fakediscord.Click{UserID: alice.ID, CustomID: allow},
			fakediscord.Click{UserID: carol.ID, CustomID: reject})

		var decisions []fakediscord.InteractionResponse
		refused := 0
		for _, id := range ids {
			r := w.response(id)
			switch {
			case r.Type == 7 && strings.Contains(r.Content, "chose"):
				decisions = append(decisions, r)
			case r.Ephemeral() && r.Content == "This permission request is no longer open.":
				refused++
			default:
				t.Fatalf("round %d: unexpected answer to a click: %+v", round, r)
			}
		}
		if len(decisions) != 1 || refused != 1 {
			t.Fatalf("round %d: %d decisions and %d refusals, want one of each", round, len(decisions), refused)
		}
		want, other := "permission granted: allow", "permission denied: reject"
		if strings.Contains(decisions[0].Content, "<@"+carol.ID+"> chose **Reject**") {
			want, other = other, want
		} else if !strings.Contains(decisions[0].Content, "<@"+alice.ID+"> chose **Allow**") {
			t.Fatalf("round %d: the decision reads %q", round, decisions[0].Content)
		}
		got := w.awaitAnswers(thread, round+1)[round]
		if strings.Count(got.Text, want) != 1 || strings.Contains(got.Text, other) || strings.Contains(got.Text, "cancelled") {
			t.Errorf("round %d: the decision was %q but the agent answered %q", round, decisions[0].Content, got.Text)
		}
		if m, _ := w.Srv.Message(thread, req.ID); len(m.Buttons()) != 0 || m.Content != decisions[0].Content {
			t.Errorf("round %d: the request shows %q with %d buttons, want the decision", round, m.Content, len(m.Buttons()))
		}
	}
	b.awaitMetric(`acp_broker_chat_open_permission_requests{platform="discord"}`, func(v float64) bool { return v == 0 })
	b.awaitMetric("acp_broker_acp_pending_permission_requests", func(v float64) bool { return v == 0 })
}
