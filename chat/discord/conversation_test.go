package discord_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"acpbroker/chat/discord"
	"acpbroker/internal/fakediscord"
)

// A mention in an allowed channel opens a thread named after the prompt,
// and the answer streams into it: a first message as soon as the agent
// says something, edited as more arrives, ending with how the turn ended.
// The user's message shows ⚙️ while the agent works and ✅ at the end.
func TestConversation_MentionOpensAThreadAndTheAnswerStreams(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "slow 300ms 6")
	ch, _ := h.srv.Channel(thread)
	if ch.ParentID != h.channel || ch.Name != "slow 300ms 6" {
		t.Fatalf("thread = %+v", ch)
	}
	// While the turn runs: a first message with part of the answer, and
	// the working reaction.
	h.srv.Await("first chunk shown", func() bool {
		msgs := h.botMessages(thread)
		return len(msgs) > 0 && strings.Contains(msgs[0].Content, "chunk 1")
	})
	// Reactions go their own way (they must not hold up the answer), so
	// ⚙️ may land a moment after the first chunk; it is there before ✅.
	bot := h.srv.Bot().ID
	h.srv.Await("a status reaction", func() bool {
		return h.srv.HasReaction(h.channel, thread, bot, "⚙️") || h.srv.HasReaction(h.channel, thread, bot, "✅")
	})
	if !h.srv.HasReaction(h.channel, thread, bot, "⚙️") {
		t.Error("no ⚙️ reaction on the user's message while the agent works")
	}
	msgs := h.answer(thread, "✅ done in")
	if len(msgs) != 1 {
		t.Fatalf("answer in %d messages, want 1: %q", len(msgs), joined(msgs))
	}
	want := "chunk 1\nchunk 2\nchunk 3\nchunk 4\nchunk 5\nchunk 6"
	if !strings.HasPrefix(msgs[0].Content, want) {
		t.Fatalf("answer = %q", msgs[0].Content)
	}
	revs := h.srv.Revisions(thread, msgs[0].ID)
	if len(revs) < 2 || strings.Contains(revs[0].Content, "chunk 6") {
		t.Fatalf("the answer was not streamed: %d revisions, first %q", len(revs), revs[0].Content)
	}
	h.srv.Await("✅ reaction", func() bool { return h.srv.HasReaction(h.channel, thread, h.srv.Bot().ID, "✅") })
	if h.srv.HasReaction(h.channel, thread, h.srv.Bot().ID, "⚙️") {
		t.Error("⚙️ reaction left after the turn ended")
	}
	if h.srv.Typing(thread) == 0 {
		t.Error("no typing indicator while the agent worked")
	}
	if u := h.srv.UnknownRequests(); len(u) > 0 {
		t.Fatalf("requests to routes Discord does not have: %+v", u)
	}
}

// Later messages in the thread, without a mention, are the next prompts of
// the same agent session.
func TestConversation_FollowUpsContinueTheSameSession(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "hello")
	h.answer(thread, "✅")
	first := h.engine.Status(thread)
	h.srv.SendMessage(thread, alice, "and another thing")
	h.srv.Await("second answer", func() bool {
		return strings.Contains(joined(h.botMessages(thread)), "You said: and another thing")
	})
	h.answer(thread, "✅")
	if second := h.engine.Status(thread); second.SessionID != first.SessionID || second.PID != first.PID {
		t.Fatalf("session %q (pid %d) then %q (pid %d): want the same agent session", first.SessionID, first.PID, second.SessionID, second.PID)
	}
}

// A user who is not allowed gets a 🚫 and nothing else; other bots and
// chatter without a mention are ignored; a channel not allowed is not
// answered.
func TestConversation_OnlyAllowedUsersInAllowedChannels(t *testing.T) {
	h := newHarness(t, setup{})
	h.client.SetAccess(accessFor(h, alice.ID))
	refused := h.srv.SendMessage(h.channel, bob, h.srv.Bot().Mention()+" let me in")
	h.srv.Await("🚫 for bob", func() bool { return h.srv.HasReaction(h.channel, refused, h.srv.Bot().ID, "🚫") })
	otherBot := fakediscord.User{ID: "299", Username: "otherbot", Bot: true}
	h.srv.SendMessage(h.channel, otherBot, h.srv.Bot().Mention()+" I am a bot")
	h.srv.SendMessage(h.channel, alice, "just talking, no mention")
	h.srv.SendMessage(h.other, alice, h.srv.Bot().Mention()+" wrong channel")
	// A message that is answered proves the ones before it were seen.
	thread := h.mention(alice, "hello")
	h.answer(thread, "✅")
	if n := len(h.srv.Threads()); n != 1 {
		t.Fatalf("%d threads, want only alice's", n)
	}
	for _, ch := range []string{h.channel, h.other} {
		for _, m := range h.srv.Messages(ch) {
			if m.Author.ID == h.srv.Bot().ID {
				t.Fatalf("the bot wrote in %s: %q", ch, m.Content)
			}
		}
	}
	if s := h.client.Stats(); s.RefusedUsers != 1 {
		t.Fatalf("refused users = %d", s.RefusedUsers)
	}
}

// A long answer is split into messages of at most 2,000 characters; a code
// block open at a cut is closed there and reopened in the next message.
func TestConversation_LongAnswersSplitWithoutBreakingCodeFences(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "code 120")
	msgs := h.answer(thread, "✅")
	if len(msgs) < 3 {
		t.Fatalf("a 6,000-character answer came in %d message(s)", len(msgs))
	}
	lines := 0
	for i, m := range msgs {
		if n := len([]rune(m.Content)); n > 2000 {
			t.Fatalf("message %d has %d characters", i, n)
		}
		if fences := strings.Count(m.Content, "```"); fences%2 != 0 {
			t.Fatalf("message %d leaves a code fence open:\n%s", i, m.Content)
		}
		if i > 0 && i < len(msgs)-1 && !strings.HasPrefix(m.Content, "```go") {
			t.Fatalf("message %d does not reopen the go block: %.40q", i, m.Content)
		}
		lines += strings.Count(m.Content, "of the generated program")
	}
	if lines != 120 {
		t.Fatalf("%d of 120 code lines shown", lines)
	}
}

// An answer longer than discord.max_answer_messages is attached in full
// when the turn ends; one larger than a message may carry goes in parts,
// one per message, in order, cut at line breaks, the footer on the last.
func TestConversation_AnswerPastTheMessageLimitIsAttachedInParts(t *testing.T) {
	h := newHarness(t, setup{discord: discord.Config{MaxMessages: 2, MaxFileBytes: 4 << 10}})
	thread := h.mention(alice, "code 120")
	msgs := h.answer(thread, "✅")
	var names []string
	var parts [][]byte
	for _, m := range msgs {
		for _, a := range m.Attachments {
			names = append(names, a.Filename)
			parts = append(parts, a.Data)
			if len(a.Data) > 4<<10 {
				t.Errorf("%s has %d bytes, over the 4 KiB limit", a.Filename, len(a.Data))
			}
		}
	}
	for i, p := range parts[:max(0, len(parts)-1)] {
		if !bytes.HasSuffix(p, []byte("\n")) {
			t.Errorf("%s is not cut at a line break: …%q", names[i], p[max(0, len(p)-20):])
		}
	}
	file := bytes.Join(parts, nil)
	if len(names) < 2 || names[0] != "answer-1.md" || names[len(names)-1] != fmt.Sprintf("answer-%d.md", len(names)) {
		t.Fatalf("attachments %v, want answer-1.md … answer-N.md", names)
	}
	if n := bytes.Count(file, []byte("of the generated program")); n != 120 {
		t.Fatalf("the attachments hold %d of the 120 lines", n)
	}
	last := msgs[len(msgs)-1].Content
	if !strings.Contains(last, fmt.Sprintf("attached in %d parts; this is answer-%d.md.", len(names), len(names))) || !strings.Contains(last, "-# ✅ done") {
		t.Fatalf("the last message reads %q", last)
	}
}

// Under a fast agent the answer's message calls stay within Discord's limit
// of 5 per 5 seconds per channel: no call is refused, and the whole answer
// arrives.
func TestConversation_EditsStayWithinTheChannelLimit(t *testing.T) {
	h := newHarness(t, setup{
		fake:    fakediscord.Options{RateLimits: fakediscord.DefaultRateLimits()},
		discord: discord.Config{EditInterval: 1250 * time.Millisecond},
	})
	thread := h.mention(alice, "burst 3000")
	start := time.Now()
	msgs := h.answer(thread, "✅")
	if got := strings.Count(joined(msgs), "x"); got != 3000 {
		t.Fatalf("%d of 3000 chunks shown", got)
	}
	var calls []time.Time
	for _, r := range h.srv.Requests() {
		if r.Major == thread && (r.Route == fakediscord.RouteCreateMessage || r.Route == fakediscord.RouteEditMessage) {
			calls = append(calls, r.At)
			if r.RateLimited {
				t.Fatalf("a message call was refused with 429 at %s", r.At.Sub(start))
			}
		}
	}
	for i := range calls {
		n := 0
		for j := i; j < len(calls) && calls[j].Sub(calls[i]) < 5*time.Second; j++ {
			n++
		}
		if n > 5 {
			t.Fatalf("%d message calls within 5s", n)
		}
	}
}

// Conversations do not pile up in memory: one idle longer than
// ForgetAfter is dropped when the next conversation starts (one with a
// turn still running is kept), and its thread's next message adopts it
// again from Discord and continues the same agent session.
func TestConversation_IdleConversationsAreForgottenAndAdoptedAgain(t *testing.T) {
	const forget = 300 * time.Millisecond
	h := newHarness(t, setup{discord: discord.Config{ForgetAfter: forget}})
	idle := h.mention(alice, "hello")
	h.answer(idle, "✅")
	session := h.engine.Status(idle).SessionID
	busy := h.mention(alice, "slow 500ms 4")
	h.srv.Await("the slow turn working", func() bool { return h.engine.Status(busy).Busy })
	time.Sleep(forget + 100*time.Millisecond)

	third := h.mention(alice, "a third thread")
	h.answer(third, "✅")
	if n := h.client.Stats().Conversations; n != 2 {
		t.Fatalf("%d conversations after the sweep, want 2 (the busy one and the new one)", n)
	}
	if !h.engine.Status(busy).Busy {
		t.Fatal("the slow turn ended before the sweep could be checked against it")
	}

	h.srv.SendMessage(idle, alice, "are you still there")
	h.srv.Await("the forgotten thread answered", func() bool {
		return strings.Contains(joined(h.botMessages(idle)), "You said: are you still there")
	})
	h.answer(idle, "✅")
	if got := h.engine.Status(idle).SessionID; got != session {
		t.Fatalf("session %q after the thread was adopted again, want %q", got, session)
	}
	h.answer(busy, "✅")
}

// discord.allowed_roles admits a user by role; discord.allowed_bots lets a
// listed bot be treated like a user (here admitted by id), while a bot not
// listed is ignored without a word, even when its id is allowed.
func TestConversation_AllowedRolesAndBots(t *testing.T) {
	h := newHarness(t, setup{})
	helper := fakediscord.User{ID: "299", Username: "helperbot", Bot: true}
	stranger := fakediscord.User{ID: "298", Username: "strangerbot", Bot: true}
	a := accessFor(h, helper.ID, stranger.ID)
	a.AllowedRoles = []string{"700"}
	a.AllowedBots = []string{helper.ID}
	h.client.SetAccess(a)

	ignored := h.srv.SendMessage(h.channel, stranger, h.srv.Bot().Mention()+" from a bot not listed")
	refused := h.srv.SendMessage(h.channel, bob, h.srv.Bot().Mention()+" no role", fakediscord.WithRoles("701"))
	h.srv.Await("🚫 for bob", func() bool { return h.srv.HasReaction(h.channel, refused, h.srv.Bot().ID, "🚫") })
	byRole := h.mention(carol, "hello by role", fakediscord.WithRoles("701", "700"))
	h.answer(byRole, "✅")
	byBot := h.mention(helper, "hello from a bot")
	h.answer(byBot, "✅")

	if ch, ok := h.srv.Channel(ignored); ok && ch.IsThread() {
		t.Fatal("a thread was opened for a bot not listed")
	}
	if r := h.srv.Reactions(h.channel, ignored); len(r) != 0 {
		t.Fatalf("the unlisted bot's message got reactions %v, want none", r)
	}
	if n := len(h.srv.Threads()); n != 2 {
		t.Fatalf("%d threads, want carol's and the helper bot's", n)
	}
	if s := h.client.Stats(); s.RefusedUsers != 1 {
		t.Fatalf("refused users = %d, want 1 (bob)", s.RefusedUsers)
	}
}

// The thread is named after the prompt's first line, whitespace folded
// and cut to 90 characters. A message sent while the thread's turn runs shows ⏳ until
// its own turn starts, then ✅.
func TestConversation_ThreadNameAndQueuedReaction(t *testing.T) {
	h := newHarness(t, setup{})
	// Long enough for the queued message to be seen waiting on a loaded
	// machine: 4 s.
	first := "slow 2s 3   " + strings.Repeat("very long words ", 12)
	thread := h.mention(alice, first+"\nand a second line")
	ch, _ := h.srv.Channel(thread)
	name := []rune(ch.Name)
	if len(name) != 90 || name[89] != '…' || !strings.HasPrefix(ch.Name, "slow 2s 3 very long words very") {
		t.Fatalf("thread named %q (%d runes), want the first line folded and cut to 90", ch.Name, len(name))
	}
	queued := h.srv.SendMessage(thread, alice, "next in line")
	h.srv.Await("⏳ on the queued message", func() bool { return h.srv.HasReaction(thread, queued, h.srv.Bot().ID, "⏳") })
	if st := h.engine.Status(thread); !st.Busy {
		t.Fatalf("the first turn ended before the queued message could be checked (status %+v); the thread shows:\n%s", st, joined(h.botMessages(thread)))
	}
	h.srv.Await("✅ on the queued message", func() bool { return h.srv.HasReaction(thread, queued, h.srv.Bot().ID, "✅") })
	if h.srv.HasReaction(thread, queued, h.srv.Bot().ID, "⏳") {
		t.Fatal("⏳ stayed on the message after its turn")
	}
	all := joined(h.botMessages(thread))
	if !strings.Contains(all, "You said: next in line") {
		t.Fatalf("the queued message was not answered: %q", all)
	}
}

// Messages in a thread are prompts in the order they were sent, even when
// the first takes longer to prepare: here its attachment downloads for
// half a second while the second, plain, arrives.
func TestConversation_MessagesKeepTheirOrder(t *testing.T) {
	h := newHarness(t, setup{fake: fakediscord.Options{AttachmentDelay: 500 * time.Millisecond}})
	thread := h.mention(alice, "hello")
	h.answer(thread, "✅")
	h.srv.SendMessage(thread, alice, "first, with a file", fakediscord.WithAttachment("notes.txt", "text/plain", []byte("a note\n")))
	h.srv.SendMessage(thread, alice, "second, plain")
	h.srv.Await("both answered", func() bool {
		all := joined(h.botMessages(thread))
		return strings.Contains(all, "You said: first") && strings.Contains(all, "You said: second")
	})
	all := joined(h.botMessages(thread))
	if strings.Index(all, "You said: first") > strings.Index(all, "You said: second") {
		t.Fatalf("the second message was answered first:\n%s", all)
	}
}
