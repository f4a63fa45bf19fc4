package slack_test

import (
	"strings"
	"testing"

	"acpbroker/chat/slack"
	"acpbroker/internal/fakeslack"
)

// A mention in an allowed channel opens a thread of that message, and the
// answer streams into it: a first reply as soon as the agent says
// something, edited as more arrives, ending with how the turn ended. The
// message shows ⚙️ while the agent works and ✅ at the end, and the
// conversation is the engine's thread "slack:CHANNEL/TS".
func TestConversation_MentionOpensAThreadAndTheAnswerStreams(t *testing.T) {
	h := newHarness(t, setup{})
	c := h.mention(h.alice, "slow 300ms 6")
	h.srv.Await("first chunk shown", func() bool {
		msgs := h.botMessages(c)
		return len(msgs) > 0 && strings.Contains(text(msgs[0]), "chunk 1")
	})
	h.srv.Await("a status reaction", func() bool {
		return h.hasReaction(c.channel, c.ts, "gear") || h.hasReaction(c.channel, c.ts, "white_check_mark")
	})
	if !h.hasReaction(c.channel, c.ts, "gear") {
		t.Error("no ⚙️ on the user's message while the agent works")
	}
	msgs := h.answer(c, "✅ done in")
	if len(msgs) != 1 {
		t.Fatalf("answer in %d messages, want 1: %q", len(msgs), joined(msgs))
	}
	want := "chunk 1\nchunk 2\nchunk 3\nchunk 4\nchunk 5\nchunk 6"
	if !strings.HasPrefix(text(msgs[0]), want) {
		t.Fatalf("answer = %q", text(msgs[0]))
	}
	if msgs[0].ThreadTS != c.ts {
		t.Fatalf("the answer is in thread %q, want %q", msgs[0].ThreadTS, c.ts)
	}
	revs := h.srv.Revisions(c.channel, msgs[0].TS)
	if len(revs) < 2 || strings.Contains(shown(revs[0].Blocks, revs[0].Text), "chunk 6") {
		t.Fatalf("the answer was not streamed: %d revisions", len(revs))
	}
	h.srv.Await("✅", func() bool { return h.hasReaction(c.channel, c.ts, "white_check_mark") })
	if h.hasReaction(c.channel, c.ts, "gear") {
		t.Error("⚙️ left after the turn ended")
	}
	if st := h.engine.Status(c.key); st.SessionID == "" {
		t.Fatalf("the engine knows no session of %s: %+v", c.key, st)
	}
	for _, call := range h.srv.Calls() {
		if call.Error == "unknown_method" || call.Error == "method_deprecated" {
			t.Fatalf("a call Slack does not take: %+v", call)
		}
	}
}

// Later messages in the thread, without a mention, are the next prompts of
// the same agent session.
func TestConversation_FollowUpsContinueTheSameSession(t *testing.T) {
	h := newHarness(t, setup{})
	c := h.mention(h.alice, "hello")
	h.answer(c, "✅")
	first := h.engine.Status(c.key)
	h.say(c, h.alice, "and another thing")
	h.srv.Await("second answer", func() bool {
		return strings.Contains(joined(h.botMessages(c)), "You said: and another thing")
	})
	h.answer(c, "✅")
	if second := h.engine.Status(c.key); second.SessionID != first.SessionID || second.PID != first.PID {
		t.Fatalf("session %q (pid %d) then %q (pid %d): want the same agent session", first.SessionID, first.PID, second.SessionID, second.PID)
	}
}

// A user who is not allowed gets a 🚫 and nothing else; other bots and
// chatter without a mention are ignored, and so are ordinary threads of
// an allowed channel; a channel not allowed is not answered.
func TestConversation_OnlyAllowedUsersInAllowedChannels(t *testing.T) {
	h := newHarness(t, setup{})
	h.client.SetAccess(h.access(h.alice.ID))
	refused := h.srv.PostMessage(h.channel, h.bob.ID, h.srv.Bot().Mention()+" let me in")
	h.srv.Await("🚫 for bob", func() bool { return h.hasReaction(h.channel, refused, "no_entry_sign") })
	chatter := h.srv.PostMessage(h.channel, h.alice.ID, "just talking, no mention")
	h.srv.PostMessage(h.channel, h.bob.ID, "a reply in an ordinary thread", fakeslack.InThread(chatter))
	h.srv.PostMessage(h.other, h.alice.ID, h.srv.Bot().Mention()+" wrong channel")
	// A message that is answered proves the ones before it were seen.
	c := h.mention(h.alice, "hello")
	h.answer(c, "✅")
	for _, ch := range []string{h.channel, h.other} {
		for _, m := range h.srv.Messages(ch) {
			if m.FromBot() && m.ThreadTS != c.ts {
				t.Fatalf("the app wrote in %s: %q", ch, text(m))
			}
		}
	}
	if s := h.client.Stats(); s.RefusedUsers != 1 {
		t.Fatalf("refused users = %d", s.RefusedUsers)
	}
}

// The engine's name of a Slack thread starts with the prefix the wiring
// gives (so that no other platform's can be the same), and the app's
// texts name its slash command as configured.
func TestConversation_ThreadPrefixAndCommandAreTheConfigured(t *testing.T) {
	h := newHarness(t, setup{slack: slack.Config{ThreadPrefix: "sl-7:", Command: "/agent"}})
	ts := h.srv.PostMessage(h.channel, h.alice.ID, h.srv.Bot().Mention()+" hello")
	c := conv{channel: h.channel, ts: ts, key: "sl-7:" + h.channel + "/" + ts}
	h.answer(c, "✅")
	if st := h.engine.Status(c.key); st.SessionID == "" {
		t.Fatalf("no session under %s", c.key)
	}
	if st := h.engine.Status("slack:" + h.channel + "/" + ts); st.SessionID != "" {
		t.Fatal("a session under the default prefix")
	}
	h.acked(h.srv.SlashCommand(h.channel, h.alice.ID, "/agent", "help"))
	h.whispered(h.alice, "`/agent new [agent] [prompt]` starts a thread")
}

// Nothing the app posts notifies anyone: a user named in an answer (the
// agent echoes what it was told) shows as "@name", not as a mention, and
// a broadcast the agent writes (<!channel>, <!here>) is shown, escaped,
// not sent.
func TestConversation_NothingTheAppPostsPingsAnyone(t *testing.T) {
	h := newHarness(t, setup{})
	// Bob has spoken, so his name is known without asking Slack.
	h.say(h.mention(h.bob, "hello"), h.bob, "hi")
	c := h.mention(h.alice, "tell <@"+h.bob.ID+"> and <!channel> and <!here|here>")
	msgs := h.answer(c, "✅ done in")
	answer := joined(msgs)
	if !strings.Contains(answer, "@") || strings.Contains(answer, "<@"+h.bob.ID) {
		t.Fatalf("the answer names Bob as %q, want @name and no mention", answer)
	}
	for _, call := range h.srv.Calls() {
		if call.Method != "chat.postMessage" && call.Method != "chat.update" && call.Method != "chat.postEphemeral" {
			continue
		}
		for _, v := range call.Args {
			v = unescapeJSON.Replace(v)
			if strings.Contains(v, "<@"+h.bob.ID) || strings.Contains(v, "<!channel") || strings.Contains(v, "<!here") {
				t.Fatalf("%s sent a mention or a broadcast: %q", call.Method, v)
			}
		}
	}
}

// unescapeJSON undoes the escapes encoding/json writes for <, > and &.
var unescapeJSON = strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&")

// With BareThreads the engine knows a Slack thread by its channel and ts
// alone, and the thread is served as any: its answer, a follow-up, and
// who started it.
func TestConversation_BareThreadsAreNamedByChannelAndTS(t *testing.T) {
	h := newHarness(t, setup{slack: slack.Config{BareThreads: true, ThreadPrefix: "ignored:"}})
	ts := h.srv.PostMessage(h.channel, h.alice.ID, h.srv.Bot().Mention()+" hello")
	c := conv{channel: h.channel, ts: ts, key: h.channel + "/" + ts}
	h.answer(c, "✅")
	h.say(c, h.alice, "again")
	h.srv.Await("the follow-up answered", func() bool { return strings.Contains(joined(h.botMessages(c)), "You said: again") })
	if st := h.engine.Status(c.key); st.SessionID == "" {
		t.Fatalf("no session under %s", c.key)
	}
	for _, other := range []string{"slack:" + c.key, "ignored:" + c.key} {
		if st := h.engine.Status(other); st.SessionID != "" {
			t.Fatalf("a session under %s", other)
		}
	}
	if ch, starter, ok := h.client.Conversation(c.key); !ok || ch != h.channel || starter != h.alice.ID {
		t.Fatalf("Conversation(%s) = %s, %s, %v", c.key, ch, starter, ok)
	}
}
