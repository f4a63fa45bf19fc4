package faults

import (
	"strings"
	"testing"

	"acpbroker/internal/brokertest"
)

// Steering on Slack keeps Discord's promises: a message written while a
// turn runs is marked ⏳ and the app's note under it offers Send now;
// bob's click is refused to him alone and changes nothing; alice's
// interrupts the turn, whose end says who and for what, and the message
// is the next prompt of the same session. Written to the app, `queue`
// lists what waits (to the writer alone) and `steer TEXT` interrupts
// with TEXT, the waiting message kept for after it.
func TestSteer_OnSlack(t *testing.T) {
	w := newWorld(t, setup{slack: true, conf: settings{"chat.platform": "slack"}})
	s := w.front("slack").(*slackFront)
	w.start()
	th := s.mention(pAlice, "hang")
	s.awaitBotText(th, "working…", 0)

	msg := s.post(th, pBob, "session")
	s.awaitReaction(th, msg, brokertest.Queued)
	note := s.awaitBotText(th, "Send now", 0)
	s.click(th, note, pBob, "Send now")
	s.whispered(pBob, "or an approver can interrupt this thread's turn; you can't", 0)
	s.click(th, note, pAlice, "Send now")
	got := s.awaitAnswers(th, 2)
	if !strings.Contains(got[0].footer, "interrupted by Alice: session") {
		t.Fatalf("the interrupted turn ended %q", got[0].footer)
	}
	if !strings.Contains(got[1].text, "(new); 1 earlier prompts; last: hang") || !strings.Contains(got[1].footer, "✅") {
		t.Fatalf("the message sent now got %q / %q", got[1].text, got[1].footer)
	}
	s.awaitReaction(th, msg, brokertest.Done)

	s.post(th, pAlice, "hang")
	bobs := s.post(th, pBob, "stream 1")
	s.awaitReaction(th, bobs, brokertest.Queued)
	s.command(th, pBob, "queue")
	s.whispered(pBob, "stream 1", 0)
	s.command(th, pAlice, "steer session")
	got = s.awaitAnswers(th, 5)
	if !strings.Contains(got[2].footer, "interrupted by Alice: session") {
		t.Fatalf("the steered turn ended %q", got[2].footer)
	}
	if !strings.Contains(got[3].text, "3 earlier prompts; last: hang") {
		t.Fatalf("the steer got %q", got[3].text)
	}
	if !strings.Contains(got[4].text, "chunk 1") {
		t.Fatalf("bob's waiting message, after the steer, got %q", got[4].text)
	}
	s.awaitReaction(th, bobs, brokertest.Done)
}
