package slack_test

import (
	"strings"
	"testing"
	"time"

	"acpbroker/chat/slack"
	"acpbroker/chat/thread"
	"acpbroker/internal/fakeslack"
)

// Removing a channel from the allow-list stops its threads at once: the
// running turn is cancelled with the reason, and a later message in the
// thread is refused in words, reaching nothing.
func TestAccess_RemovedChannelStopsItsThreads(t *testing.T) {
	h := newHarness(t, setup{})
	c := h.mention(h.alice, "hang")
	h.waitWorking(c)
	h.client.SetAccess(slack.Access{Access: thread.Access{AllowedChannels: []string{h.other}}})
	h.answer(c, "this channel is no longer served by the bot")
	sent := h.say(c, h.alice, "stream 1")
	h.srv.Await("the message refused", func() bool {
		msgs := h.botMessages(c)
		return len(msgs) > 0 && strings.Contains(text(msgs[len(msgs)-1]), "no longer served by the bot; nothing was sent")
	})
	if st := h.engine.Status(c.key); st.Busy || st.Queued != 0 {
		t.Fatalf("a message in a removed channel's thread reached the engine: %+v", st)
	}
	h.srv.Await("🚫 on the message", func() bool { return h.hasReaction(c.channel, sent, "no_entry_sign") })
	if s := h.client.Stats(); s.RefusedChannels != 1 {
		t.Fatalf("refused channel messages = %d, want 1", s.RefusedChannels)
	}
}

// A conversation the broker no longer holds in memory (idle past
// forget_after), with no store to recall it, is recognised again from
// Slack, once: its thread holds the app's messages marked as a
// conversation's. Its next message continues the same agent session,
// and its starter is read back from its first message, the author's,
// or for a thread /acp new opened, who gave the command: the starter may
// act on it, nobody else.
func TestAccess_AForgottenThreadIsAdoptedWithItsStarter(t *testing.T) {
	const forget = 300 * time.Millisecond
	h := newHarness(t, setup{slack: slack.Config{ForgetAfter: forget}})
	mentioned := h.mention(h.alice, "hello")
	h.answer(mentioned, "✅")
	session := h.engine.Status(mentioned.key).SessionID
	h.acked(h.srv.SlashCommand(h.channel, h.alice.ID, "/acp", "new"))
	var root fakeslack.Message
	h.srv.Await("the new thread", func() bool {
		for _, m := range h.srv.Messages(h.channel) {
			if m.FromBot() && strings.Contains(text(m), "started a thread") && m.Replies > 0 {
				root = m
				return true
			}
		}
		return false
	})
	commanded := conv{channel: h.channel, ts: root.TS, key: "slack:" + h.channel + "/" + root.TS}
	time.Sleep(forget + 100*time.Millisecond)
	h.answer(h.mention(h.bob, "hello"), "✅") // sweeps the idle conversations
	if n := h.client.Stats().Conversations; n != 1 {
		t.Fatalf("%d conversations, want two forgotten", n)
	}
	lookups := len(h.srv.CallsTo("conversations.replies"))
	for _, c := range []conv{mentioned, commanded} {
		h.say(c, h.alice, "hang")
		h.waitWorking(c)
		h.command(c, h.bob, "cancel")
		h.whispered(h.bob, "@Alice or an approver can")
		if !h.engine.Status(c.key).Busy {
			t.Fatal("bob cancelled alice's turn")
		}
		h.command(c, h.alice, "cancel")
		h.cancelled(c, "Alice")
	}
	if got := h.engine.Status(mentioned.key).SessionID; got != session {
		t.Fatalf("session %q after the thread was adopted again, want %q", got, session)
	}
	// Each thread looked up once for the conversation, once for its starter.
	if n := len(h.srv.CallsTo("conversations.replies")) - lookups; n != 4 {
		t.Fatalf("%d conversations.replies calls for two threads adopted, want 4", n)
	}
}

// An ordinary thread of an allowed channel is looked up once, and its
// later messages are let be without a call.
func TestAccess_AnOrdinaryThreadIsLookedUpOnce(t *testing.T) {
	h := newHarness(t, setup{})
	root := h.srv.PostMessage(h.channel, h.alice.ID, "lunch?")
	h.srv.PostMessage(h.channel, h.bob.ID, "yes", fakeslack.InThread(root))
	h.srv.PostMessage(h.channel, h.alice.ID, "noon", fakeslack.InThread(root))
	h.answer(h.mention(h.alice, "hello"), "✅") // the replies before it were seen
	h.srv.Await("the lookup", func() bool { return len(h.srv.CallsTo("conversations.replies")) >= 1 })
	h.close() // every message taken is handled: a wrong second lookup is made by now
	if n := len(h.srv.CallsTo("conversations.replies")); n != 1 {
		t.Fatalf("%d lookups of an ordinary thread", n)
	}
	for _, m := range h.srv.Thread(h.channel, root) {
		if m.FromBot() {
			t.Fatalf("the app wrote in an ordinary thread: %q", text(m))
		}
	}
}

// Direct messages with the app are served only with allow_dms: each
// opens a thread of its own, as a mention does, for allowed users; a
// reload taking allow_dms off stops their threads.
func TestAccess_DirectMessages(t *testing.T) {
	h := newHarness(t, setup{adjust: func(h *harness, c *slack.Config) { c.Access = h.access(h.alice.ID) }})
	dm := h.srv.AddDM(h.alice.ID)
	hello := h.srv.PostMessage(dm.ID, h.alice.ID, "hello there")
	h.answer(h.mention(h.alice, "hello"), "✅")
	on := h.access(h.alice.ID)
	on.AllowDMs = true
	h.client.SetAccess(on)
	ts := h.srv.PostMessage(dm.ID, h.alice.ID, "stream 2")
	c := conv{channel: dm.ID, ts: ts, key: "slack:" + dm.ID + "/" + ts}
	h.answer(c, "✅")
	bobDM := h.srv.AddDM(h.bob.ID)
	refused := h.srv.PostMessage(bobDM.ID, h.bob.ID, "me too")
	h.srv.Await("🚫 for bob", func() bool { return h.hasReaction(bobDM.ID, refused, "no_entry_sign") })

	h.say(c, h.alice, "hang")
	h.waitWorking(c)
	h.client.SetAccess(h.access(h.alice.ID))
	h.answer(c, "this channel is no longer served by the bot")
	h.close() // every message taken is handled: a wrong answer is posted by now
	for _, m := range h.srv.Thread(dm.ID, hello) {
		if m.FromBot() {
			t.Fatalf("a direct message was answered without allow_dms: %q", text(m))
		}
	}
	if marks := h.botReactions(dm.ID, hello); len(marks) > 0 {
		t.Fatalf("a direct message without allow_dms was marked %v", marks)
	}
}
