package slack_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"acpbroker/chat/thread"
	"acpbroker/internal/fakeslack"
)

// running waits for the running turn's message carrying the Cancel
// button and returns it.
func (h *harness) running(c conv) fakeslack.Message {
	h.t.Helper()
	var found fakeslack.Message
	h.srv.Await("the Cancel button", func() bool {
		for _, m := range h.botMessages(c) {
			for _, e := range elements(m.Blocks) {
				if e.Type == "button" && e.Text.Text == "Cancel" {
					found = m
					return true
				}
			}
		}
		return false
	})
	return found
}

// cancelled waits for the turn's end saying who cancelled it.
func (h *harness) cancelled(c conv, by string) {
	h.t.Helper()
	h.srv.Await("the turn cancelled by "+by, func() bool {
		for _, m := range h.botMessages(c) {
			if s := text(m); strings.Contains(s, "⏹️ cancelled by "+by) && finalFooter(s) {
				return true
			}
		}
		return false
	})
}

// threadCount is how many messages the thread shows.
func (h *harness) threadCount(c conv) int { return len(h.srv.Thread(c.channel, c.ts)) }

// Every way to stop a turn in a thread, each used first by someone who
// may not act on it (answered privately, or ignored for a 🛑, the turn
// running on and the thread showing nothing more), then by someone who
// may: the Cancel button on the running turn's message, a 🛑 on the
// message the thread hangs from or on the answer, and "@app cancel".
// The turn's end says who cancelled it, and the user's message shows ⏹️.
func TestControl_WhoMayActStopsTheTurn(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(h *harness, c conv, answer fakeslack.Message, who fakeslack.User)
		// refusal is what a stranger is told privately ("": nothing).
		refusal string
	}{
		{"cancel button", func(h *harness, c conv, answer fakeslack.Message, who fakeslack.User) {
			h.acked(h.srv.ClickButton(c.channel, answer.TS, who.ID, buttonID(h.t, answer.Blocks, "Cancel")))
		}, "can cancel this thread's turn; you can't"},
		{"stop on the first message", func(h *harness, c conv, _ fakeslack.Message, who fakeslack.User) {
			h.srv.AddReaction(c.channel, c.ts, who.ID, "octagonal_sign")
		}, ""},
		{"stop on the answer", func(h *harness, c conv, answer fakeslack.Message, who fakeslack.User) {
			h.srv.AddReaction(c.channel, answer.TS, who.ID, "octagonal_sign")
		}, ""},
		{"written", func(h *harness, c conv, _ fakeslack.Message, who fakeslack.User) {
			h.command(c, who, "cancel")
		}, "can @fakebot cancel this thread; you can't"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, setup{})
			h.client.SetAccess(h.access(h.alice.ID, h.bob.ID)) // carol is on no list
			c := h.mention(h.alice, "hang")
			h.waitWorking(c)
			answer := h.running(c)
			before := h.threadCount(c)
			for _, stranger := range []fakeslack.User{h.bob, h.carol} {
				tc.stop(h, c, answer, stranger)
				switch {
				case tc.name == "written" && stranger == h.carol:
					// On no list, what she writes is refused as any message.
					h.srv.Await("🚫 on carol's command", func() bool {
						msgs := h.srv.Thread(c.channel, c.ts)
						last := msgs[len(msgs)-1]
						return last.User == h.carol.ID && h.hasReaction(c.channel, last.TS, "no_entry_sign")
					})
				case tc.refusal != "":
					h.whispered(stranger, tc.refusal)
				}
			}
			if tc.refusal == "" {
				h.until("the strangers' 🛑 ignored", func() bool { return h.client.Stats().IgnoredCancels == 2 })
			}
			if !h.engine.Status(c.key).Busy {
				t.Fatal("a stranger stopped alice's turn")
			}
			written := 0
			if tc.name == "written" {
				written = 2 // the strangers' own messages
			}
			if n := h.threadCount(c); n != before+written {
				t.Fatalf("the thread shows %d more messages after the strangers tried", n-before-written)
			}
			start := time.Now()
			tc.stop(h, c, answer, h.alice)
			h.cancelled(c, "Alice")
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("cancelled after %s", took)
			}
			h.srv.Await("⏹️ on alice's message", func() bool { return h.hasReaction(c.channel, c.ts, "black_square_for_stop") })
			for _, m := range h.botMessages(c) {
				if len(elements(m.Blocks)) > 0 {
					t.Fatalf("%q still carries buttons after the turn", text(m))
				}
			}
			if !strings.HasPrefix(text(h.botMessages(c)[0]), "working…") {
				t.Fatalf("the answer so far was lost: %q", text(h.botMessages(c)[0]))
			}
		})
	}
}

// A command written to the app in its thread is served as a slash
// command is: its private answers are shown to the writer alone, the
// public ones in the thread; a message that merely starts with a
// command's name is a prompt.
func TestControl_CommandsWrittenToTheApp(t *testing.T) {
	h := newHarness(t, setup{})
	c := h.mention(h.alice, "hello")
	h.answer(c, "✅")
	shown := h.threadCount(c)
	h.command(c, h.alice, "status")
	h.whispered(h.alice, "*State*: idle, 0 message(s) queued")
	h.command(c, h.alice, "cancel")
	h.whispered(h.alice, "Nothing is running in this thread.")
	if n := h.threadCount(c); n != shown+2 {
		t.Fatalf("the thread shows %d messages more than alice's two", n-shown-2)
	}
	session := h.engine.Status(c.key).SessionID
	h.command(c, h.alice, "reset")
	h.said(c, "reset the session")
	h.say(c, h.alice, "fresh start")
	h.srv.Await("answer after reset", func() bool {
		return strings.Contains(joined(h.botMessages(c)), "You said: fresh start")
	})
	if got := h.engine.Status(c.key).SessionID; got == session {
		t.Fatalf("session %q kept after reset", got)
	}
	h.command(c, h.alice, "cancel the build")
	h.srv.Await("the prompt answered", func() bool {
		return strings.Contains(joined(h.botMessages(c)), "You said: cancel the build")
	})
}

// /acp serves what makes sense outside a thread: help, new (a thread
// opened from its answer, its prompt the first turn), agents, status and
// schedules;
// a thread's command is told to be written in the thread. Every
// command is acknowledged within Slack's 3 seconds.
func TestControl_SlashCommand(t *testing.T) {
	h := newHarness(t, setup{})
	h.acked(h.srv.SlashCommand(h.channel, h.alice.ID, "/acp", ""))
	h.whispered(h.alice, "/acp new [agent] [prompt]")
	h.acked(h.srv.SlashCommand(h.channel, h.alice.ID, "/acp", "cancel"))
	h.whispered(h.alice, "write `@fakebot cancel` to me in the thread")
	h.acked(h.srv.SlashCommand(h.channel, h.alice.ID, "/acp", "status"))
	h.whispered(h.alice, "This bot runs one agent")
	h.acked(h.srv.SlashCommand(h.channel, h.alice.ID, "/acp", "schedules"))
	h.whispered(h.alice, "No schedules are configured here.")

	h.acked(h.srv.SlashCommand(h.channel, h.alice.ID, "/acp", "new stream 3"))
	var root fakeslack.Message
	h.srv.Await("the thread's first message", func() bool {
		for _, m := range h.srv.Messages(h.channel) {
			if m.FromBot() && strings.Contains(text(m), "started a thread with") {
				root = m
				return true
			}
		}
		return false
	})
	c := conv{channel: h.channel, ts: root.TS, key: "slack:" + h.channel + "/" + root.TS}
	h.answer(c, "✅")
	// The thread is alice's: she may act on it, bob may not.
	h.say(c, h.alice, "hang")
	h.waitWorking(c)
	h.command(c, h.bob, "cancel")
	h.whispered(h.bob, "@Alice or an approver can")
	h.command(c, h.alice, "cancel")
	h.cancelled(c, "Alice")
}

// oneSchedule is a schedule list of one, which posts to a channel.
type oneSchedule struct{ channel string }

func (s oneSchedule) List() []thread.ScheduleInfo {
	return []thread.ScheduleInfo{{Name: "nightly-report", Spec: "0 3 * * *", Where: "<#" + s.channel + ">", Enabled: true,
		Last: "❌ failed: the build is red"}}
}
func (oneSchedule) Run(string, thread.User) (string, error) { return "", errors.New("not here") }
func (oneSchedule) Pause(string, bool, thread.User) error   { return errors.New("not here") }

// /acp agents and /acp schedules from a channel the app does not serve
// are refused as /acp new is there, telling nothing of the schedules;
// in a channel it serves they answer.
func TestControl_ChannelCommandsOnlyWhereServed(t *testing.T) {
	h := newHarness(t, setup{})
	h.client.Threads().SetSchedules(oneSchedule{channel: h.channel})
	for _, cmd := range []string{"schedules", "agents", "new hello"} {
		h.acked(h.srv.SlashCommand(h.other, h.bob.ID, "/acp", cmd))
		h.whispered(h.bob, "I don't answer in this channel; use /acp "+strings.Fields(cmd)[0]+" in one I serve.")
	}
	h.acked(h.srv.SlashCommand(h.channel, h.alice.ID, "/acp", "schedules"))
	h.whispered(h.alice, "nightly-report")
	for _, e := range h.srv.Ephemerals(h.bob.ID) {
		if s := shown(e.Blocks, e.Text); strings.Contains(s, "nightly-report") || strings.Contains(s, "build is red") || strings.Contains(s, "This bot runs one agent") {
			t.Fatalf("bob, in a channel the app does not serve, was told %q", s)
		}
	}
}
