package discord_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"acpbroker/chat"
	"acpbroker/internal/fakediscord"
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

// What follows a prompt is not always its own turn's outcome: an earlier
// turn still being shown when the prompt was sent ends after it (its
// message known from the store, or claimed by that turn itself when it
// too was not noted as shown), and an answered permission request's line
// says who chose what, not how a turn ended. Each turn is told unless a
// line of its own shows it.
func TestReport_AnotherTurnsOutcomeAfterThePromptIsNotThisOnes(t *testing.T) {
	type prompt struct{ channel, id string }
	var b1, a2, b2, b3, c prompt
	var noted string
	h := newHarness(t, setup{before: func(h *harness) {
		bot := h.srv.Bot()
		say := func(ch string, u fakediscord.User, text string) prompt {
			return prompt{ch, h.srv.SendMessage(ch, u, text)}
		}
		// 1: A's answer ends after B was sent, and A was noted as shown
		// there; B ended but its answer never went out.
		one := h.srv.AddChannel(guildID, "", "one")
		say(one, alice, "hang")
		b1 = say(one, alice, "sent while busy")
		noted = say(one, bot, "working…\n-# ⏹️ cancelled by Alice after 3s").id
		// 2: the same, but neither was noted: A2 claims its own line.
		two := h.srv.AddChannel(guildID, "", "two")
		a2 = say(two, alice, "another hang")
		b2 = say(two, alice, "sent while busy again")
		say(two, bot, "-# ❌ failed: timed out after 20s (after 21s)")
		// 3: B3 was noted nowhere but shows its own line after A3's.
		three := h.srv.AddChannel(guildID, "", "three")
		say(three, alice, "a third hang")
		b3 = say(three, alice, "shown")
		say(three, bot, "-# ⏹️ cancelled by Alice after 1s")
		say(three, bot, "chunk 1\n-# ✅ done in 1s")
		// 4: C's permission was answered; its answer never went out.
		four := h.srv.AddChannel(guildID, "", "four")
		c = say(four, alice, "ask first")
		say(four, bot, "🔐 Run rm -rf build\n-# ✅ <@1> chose **Allow**")
		time.Sleep(5 * time.Millisecond) // the next process starts later
	}})
	turn := func(id uint64, p prompt, outcome string, elsewhere ...string) chat.Interruption {
		return chat.Interruption{ID: id, Thread: p.channel, Ref: guildID + "/" + p.channel + "/" + p.id, Title: "t",
			Queued: time.Now(), Ended: outcome, Outcome: outcome, Elsewhere: elsewhere}
	}
	reported := make(chan uint64, 5)
	h.client.Report([]chat.Interruption{
		turn(5, b2, "done"), turn(2, b1, "done", noted), turn(4, a2, "failed"), turn(6, b3, "done"), turn(7, c, "done"),
	}, func(id uint64) { reported <- id })
	for range 5 {
		select {
		case <-reported:
		case <-time.After(h.wait):
			t.Fatal("not every turn was marked reported")
		}
	}
	want := map[prompt]string{b1: "❌", a2: "❌", b2: "❌", b3: "✅", c: "❌"}
	told := map[prompt]bool{b1: true, b2: true, c: true}
	t.Cleanup(func() {
		if t.Failed() {
			for p := range want {
				m, _ := h.srv.Message(p.channel, p.id)
				t.Logf("%q: %v", m.Content, h.botReactions(p.channel, p.id))
			}
		}
	})
	h.srv.Await("the status reactions", func() bool {
		for p, e := range want {
			if !slices.Equal(h.botReactions(p.channel, p.id), []string{e}) {
				return false
			}
		}
		return true
	})
	for p := range want {
		var notices []string
		for _, m := range h.botMessages(p.channel) {
			if strings.HasPrefix(m.Content, "⚠️") && strings.HasSuffix(m.Content, "/"+p.id) {
				notices = append(notices, m.Content)
			}
		}
		if n := len(notices); told[p] != (n == 1) || n > 1 {
			t.Errorf("prompt %s: notices %q, want told %v", p.id, notices, told[p])
		}
	}
}
