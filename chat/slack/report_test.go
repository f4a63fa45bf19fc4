package slack_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"acpbroker/chat"

	slackapi "github.com/slack-go/slack"
)

// After a restart, each thread is told which of its messages the broker
// did not finish, with a link to it, and that message shows ❌.
func TestReport_InterruptedTurnsAreReported(t *testing.T) {
	h := newHarness(t, setup{})
	c := h.mention(h.alice, "hello")
	h.answer(c, "✅")
	h.srv.Await("✅", func() bool { return h.hasReaction(c.channel, c.ts, "white_check_mark") })
	reported := make(chan uint64, 1)
	h.client.Report([]chat.Interruption{{ID: 7, Thread: c.key, Ref: c.channel + "/" + c.ts, Title: "build the thing", Queued: time.Now()}},
		func(id uint64) { reported <- id })
	select {
	case id := <-reported:
		if id != 7 {
			t.Fatalf("reported %d", id)
		}
	case <-time.After(h.wait):
		t.Fatal("not reported")
	}
	notice := h.said(c, "The broker restarted while working on your message “build the thing”")
	if link := "/archives/" + c.channel + "/p" + strings.ReplaceAll(c.ts, ".", ""); !strings.Contains(text(notice), link) {
		t.Fatalf("the notice %q has no link to the message", text(notice))
	}
	h.srv.Await("❌ alone on the message", func() bool { return slices.Equal(h.botReactions(c.channel, c.ts), []string{"x"}) })
}

// A turn that ended but was not noted as shown is looked up at the next
// start: the app's message after the prompt whose metadata says it shows
// an outcome means the thread shows it (only the status reaction is
// settled); a message that shows none leaves the turn to be told.
func TestReport_AnEndedTurnIsToldOnlyWhenTheThreadDoesNotShowIt(t *testing.T) {
	var shown, notShown string
	h := newHarness(t, setup{before: func(h *harness) {
		// What an earlier process left: two prompts, an answer to each,
		// one of them finished.
		api := slackapi.New(h.srv.BotToken(), slackapi.OptionAPIURL(h.srv.APIURL()), slackapi.OptionHTTPClient(h.srv.HTTPClient()))
		reply := func(ts, text string, outcome bool) {
			_, _, err := api.PostMessage(h.channel, slackapi.MsgOptionText(text, false), slackapi.MsgOptionTS(ts),
				slackapi.MsgOptionMetadata(slackapi.SlackMetadata{EventType: "acp_broker", EventPayload: map[string]any{"thread": true, "outcome": outcome}}))
			if err != nil {
				t.Fatal(err)
			}
		}
		shown = h.srv.PostMessage(h.channel, h.alice.ID, "first")
		reply(shown, "the answer, done in 2s", true)
		notShown = h.srv.PostMessage(h.channel, h.alice.ID, "second")
		reply(notShown, "working…", false)
		time.Sleep(5 * time.Millisecond) // the next process starts later
	}})
	turn := func(id uint64, ts string) chat.Interruption {
		return chat.Interruption{ID: id, Thread: "slack:" + h.channel + "/" + ts, Ref: h.channel + "/" + ts, Title: "t",
			Queued: time.Now(), Ended: "done", Outcome: "done"}
	}
	reported := make(chan uint64, 2)
	h.client.Report([]chat.Interruption{turn(1, shown), turn(2, notShown)}, func(id uint64) { reported <- id })
	for range 2 {
		select {
		case <-reported:
		case <-time.After(h.wait):
			t.Fatal("not every turn was marked reported")
		}
	}
	h.srv.Await("the status reactions", func() bool {
		return slices.Equal(h.botReactions(h.channel, shown), []string{"white_check_mark"}) &&
			slices.Equal(h.botReactions(h.channel, notShown), []string{"x"})
	})
	for ts, want := range map[string]int{shown: 0, notShown: 1} {
		notices := 0
		for _, m := range h.srv.Thread(h.channel, ts) {
			if m.FromBot() && strings.HasPrefix(text(m), "⚠️") {
				notices++
			}
		}
		if notices != want {
			t.Errorf("the thread of %s shows %d notices, want %d", ts, notices, want)
		}
	}
}
