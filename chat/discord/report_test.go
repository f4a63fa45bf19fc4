package discord_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"acpbroker/chat"
)

// botReactions are the bot's reactions on a message.
func (h *harness) botReactions(channel, message string) []string {
	var mine []string
	for _, r := range h.srv.Reactions(channel, message) {
		if r.UserID == h.srv.Bot().ID {
			mine = append(mine, r.Emoji)
		}
	}
	return mine
}

// A turn that ended but was not noted as shown is looked up at the next
// start: an outcome line the earlier process posted after the prompt
// means the thread shows it (only the status reaction is settled); a
// later turn's line, posted by this process, does not.
func TestReport_AnEndedTurnIsToldOnlyWhenTheThreadDoesNotShowIt(t *testing.T) {
	var shown, notShown string
	h := newHarness(t, setup{before: func(h *harness) {
		shown = h.srv.SendMessage(h.channel, alice, "first")
		h.srv.SendMessage(h.channel, h.srv.Bot(), "the answer\n-# ✅ done in 2s")
		notShown = h.srv.SendMessage(h.channel, alice, "second")
		time.Sleep(5 * time.Millisecond) // the next process starts later
	}})
	// This process's own turn ends in the thread after the restart.
	h.srv.SendMessage(h.channel, h.srv.Bot(), "a later answer\n-# ✅ done in 1s")
	ref := func(id string) string { return guildID + "/" + h.channel + "/" + id }
	reported := make(chan uint64, 2)
	h.client.Report([]chat.Interruption{
		{ID: 1, Thread: h.channel, Ref: ref(shown), Title: "first", Queued: time.Now(), Ended: "done", Outcome: "done"},
		{ID: 2, Thread: h.channel, Ref: ref(notShown), Title: "second", Queued: time.Now(), Ended: "done", Outcome: "done"},
	}, func(id uint64) { reported <- id })
	for range 2 {
		select {
		case <-reported:
		case <-time.After(h.wait):
			t.Fatal("not every turn was marked reported")
		}
	}
	h.srv.Await("the status reactions", func() bool {
		return slices.Equal(h.botReactions(h.channel, shown), []string{"✅"}) &&
			slices.Equal(h.botReactions(h.channel, notShown), []string{"❌"})
	})
	var notices []string
	for _, m := range h.botMessages(h.channel) {
		if strings.HasPrefix(m.Content, "⚠️") {
			notices = append(notices, m.Content)
		}
	}
	if len(notices) != 1 || !strings.Contains(notices[0], "“second”") {
		t.Fatalf("notices = %q, want one, for “second”", notices)
	}
}
