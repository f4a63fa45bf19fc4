package discord_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/fakediscord"
)

// waitWorking waits until the agent has started on the thread's prompt.
func (h *harness) waitWorking(thread string) {
	h.t.Helper()
	h.srv.Await("agent working", func() bool {
		return strings.Contains(joined(h.botMessages(thread)), "working")
	})
}

// A 🛑 reaction on a thread's message cancels the running turn within a
// second: the agent gets session/cancel, the answer says who cancelled it
// (keeping what had streamed), and the user's message shows ⏹️.
func TestControl_StopReactionCancels(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "hang")
	h.waitWorking(thread)
	start := time.Now()
	h.srv.AddReaction(h.channel, thread, alice.ID, "🛑")
	msgs := h.answer(thread, "⏹️ cancelled by Alice")
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("cancel shown after %s", took)
	}
	if !strings.HasPrefix(msgs[0].Content, "working…") {
		t.Fatalf("partial answer lost: %q", msgs[0].Content)
	}
	h.srv.Await("⏹️ reaction", func() bool { return h.srv.HasReaction(h.channel, thread, h.srv.Bot().ID, "⏹️") })
}

// /cancel in the thread stops the turn and says so; with nothing running
// it says that, privately. Only the thread's starter or an approver may
// cancel it: anyone else is told so, privately, and the turn runs on.
func TestControl_SlashCancel(t *testing.T) {
	h := newHarness(t, setup{})
	a := accessFor(h)
	a.Approvers = []string{bob.ID}
	h.client.SetAccess(a)
	thread := h.mention(alice, "hang")
	h.waitWorking(thread)
	r := h.response(h.srv.SlashCommand(thread, carol.ID, "cancel", nil))
	if !r.Ephemeral() || !strings.Contains(r.Content, "<@"+alice.ID+"> or an approver can /cancel this thread; you can't") {
		t.Fatalf("carol's /cancel answered %+v", r)
	}
	if st := h.engine.Status(thread); !st.Busy {
		t.Fatal("carol's /cancel ended the turn")
	}
	r = h.response(h.srv.SlashCommand(thread, bob.ID, "cancel", nil))
	if r.Ephemeral() || !strings.Contains(r.Content, "<@"+bob.ID+"> cancelled the current turn") {
		t.Fatalf("/cancel answered %+v", r)
	}
	h.answer(thread, "⏹️ cancelled by Bob")
	r = h.response(h.srv.SlashCommand(thread, bob.ID, "cancel", nil))
	if !r.Ephemeral() || r.Content != "Nothing is running in this thread." {
		t.Fatalf("/cancel with nothing running answered %+v", r)
	}
	r = h.response(h.srv.SlashCommand(h.channel, bob.ID, "cancel", nil))
	if !r.Ephemeral() || !strings.Contains(r.Content, "inside one of my conversation threads") {
		t.Fatalf("/cancel outside a thread answered %+v", r)
	}
}

// /status shows the agent's pid and uptime, the session, busy or idle and
// the queue; /reset
// ends the session, so the next message starts a fresh agent session.
func TestControl_StatusAndReset(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "hello")
	h.answer(thread, "✅")
	before := h.engine.Status(thread)
	r := h.response(h.srv.SlashCommand(thread, alice.ID, "status", nil))
	if !r.Ephemeral() || !strings.Contains(r.Content, "**State**: idle, 0 message(s) queued") || !strings.Contains(r.Content, before.SessionID) ||
		!strings.Contains(r.Content, fmt.Sprintf("**Agent**: pid %d, up ", before.PID)) {
		t.Fatalf("/status answered %+v", r)
	}
	// Busy, with a message waiting behind the turn.
	h.srv.SendMessage(thread, alice, "slow 400ms 4")
	h.srv.Await("the slow turn working", func() bool { return h.engine.Status(thread).Busy })
	h.srv.SendMessage(thread, alice, "queued behind it")
	h.srv.Await("a message queued", func() bool { return h.engine.Status(thread).Queued == 1 })
	r = h.response(h.srv.SlashCommand(thread, alice.ID, "status", nil))
	if !strings.Contains(r.Content, "**State**: busy (turn running for ") || !strings.Contains(r.Content, "), 1 message(s) queued") {
		t.Fatalf("/status while busy answered %q", r.Content)
	}
	h.srv.Await("the queued message answered", func() bool {
		return strings.Contains(joined(h.botMessages(thread)), "You said: queued behind it")
	})
	h.answer(thread, "✅")
	r = h.response(h.srv.SlashCommand(thread, alice.ID, "reset", nil))
	if !strings.Contains(r.Content, "reset the session") {
		t.Fatalf("/reset answered %+v", r)
	}
	h.srv.SendMessage(thread, alice, "fresh start")
	h.srv.Await("answer after reset", func() bool {
		return strings.Contains(joined(h.botMessages(thread)), "You said: fresh start")
	})
	if after := h.engine.Status(thread); after.SessionID == before.SessionID {
		t.Fatalf("session %q kept after /reset", after.SessionID)
	}
}

// reply waits for the bot's reply in thread (a message answering
// another) that says want, and returns it.
func (h *harness) reply(thread, want string) fakediscord.Message {
	h.t.Helper()
	var found fakediscord.Message
	h.srv.Await("a reply saying "+want, func() bool {
		for _, m := range h.srv.Messages(thread) {
			if m.Author.ID == h.srv.Bot().ID && m.ReferenceID != "" && strings.Contains(m.Content, want) {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

// A command may be written to the bot in a thread, "@bot cancel" as
// /cancel, under the same rule of who may act; Discord shows nobody a
// message alone outside an interaction, so every answer is a reply in
// the thread. A message that merely starts with a command's name is a
// prompt.
func TestControl_CommandsWrittenToTheBot(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "hang")
	h.waitWorking(thread)
	bot := h.srv.Bot().Mention()
	h.srv.SendMessage(thread, bob, bot+" cancel")
	h.reply(thread, "<@"+alice.ID+"> or an approver can /cancel this thread; you can't")
	if !h.engine.Status(thread).Busy {
		t.Fatal("bob's cancel ended alice's turn")
	}
	h.srv.SendMessage(thread, alice, bot+" cancel")
	h.reply(thread, "🛑 <@"+alice.ID+"> cancelled the current turn.")
	h.srv.Await("the turn cancelled", func() bool {
		for _, m := range h.botMessages(thread) {
			if strings.Contains(m.Content, "⏹️ cancelled by Alice") && finalFooter(m.Content) {
				return true
			}
		}
		return false
	})
	h.srv.SendMessage(thread, alice, bot+" status")
	h.reply(thread, "**State**: idle, 0 message(s) queued")
	h.srv.SendMessage(thread, alice, bot+" cancel the build")
	h.srv.Await("the prompt answered", func() bool {
		return strings.Contains(joined(h.botMessages(thread)), "You said: cancel the build")
	})
}
