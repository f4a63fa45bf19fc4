package faults

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"testing"

	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakeslack"
)

// Only allowed users reach an agent: with discord.allowed_users = [alice],
// bob's mention gets 🚫 and nothing else (no thread, no reply); in
// alice's thread his message gets 🚫 and is not a prompt, his /cancel and
// his click on her permission buttons get a private refusal, and his 🛑
// does nothing but count (no word in the thread); alice is served
// throughout.
func TestAccess_OnlyAllowedUsersAreServed(t *testing.T) {
	w := newWorld(t, setup{conf: settings{"discord.allowed_users": []string{alice.ID}}})
	b := w.start()
	refused := w.Srv.SendMessage(w.Channel, bob, w.Srv.Bot().Mention()+" let me in")
	w.awaitReaction(w.Channel, refused, "🚫")

	thread := w.mention(alice, "permission")
	req := w.permissionRequest(thread)
	r := w.response(w.Srv.ClickButton(thread, req.ID, bob.ID, req.ButtonID(t, "Allow")))
	if !r.Ephemeral() || !strings.Contains(r.Content, "can answer this request; you can't") {
		t.Errorf("bob's click answered %+v", r)
	}
	r = w.slash(thread, bob, "cancel")
	if !r.Ephemeral() || r.Content != "You are not allowed to use this bot." {
		t.Errorf("bob's /cancel answered %+v", r)
	}
	w.Srv.AddReaction(w.Channel, thread, bob.ID, "🛑")
	// Gateway events are handled in order: once bob's message is refused,
	// his reaction has been seen too.
	intruder := w.Discord.Post(thread, bob, "stream 3")
	w.awaitReaction(thread, intruder, "🚫")
	if m, _ := w.Srv.Message(thread, req.ID); len(m.Buttons()) != 3 {
		t.Fatalf("bob's actions changed alice's request: %q", m.Content)
	}

	r = w.response(w.Srv.ClickButton(thread, req.ID, alice.ID, req.ButtonID(t, "Allow")))
	if r.Type != 7 || !strings.Contains(r.Content, "<@"+alice.ID+"> chose **Allow**") {
		t.Errorf("alice's click answered %+v", r)
	}
	got := w.awaitAnswers(thread, 1)
	if !strings.Contains(got[0].Text, "permission granted: allow") || !strings.HasPrefix(got[0].Footer, "-# ✅ done") {
		t.Fatalf("alice's turn got %q", got[0].Text)
	}
	w.Discord.Post(thread, alice, "thanks")
	got = w.awaitAnswers(thread, 2)
	if !strings.Contains(got[1].Text, "You said: thanks") {
		t.Fatalf("alice's next message got %q", got[1].Text)
	}
	if strings.Contains(joinedAnswers(got), "chunk") {
		t.Errorf("bob's message reached the agent: %q", joinedAnswers(got))
	}

	if ch, ok := w.Srv.Channel(refused); ok && ch.IsThread() {
		t.Error("a thread was opened for bob")
	}
	if n := len(w.Srv.Threads()); n != 1 {
		t.Errorf("%d threads, want alice's only", n)
	}
	for _, m := range w.Srv.Messages(w.Channel) {
		if m.Author.ID == w.Srv.Bot().ID {
			t.Errorf("the bot wrote in the channel: %q", m.Content)
		}
	}
	for _, id := range []string{refused, intruder} {
		ch := w.Channel
		if id == intruder {
			ch = thread
		}
		if got := w.Discord.BotReactions(ch, id); !slices.Equal(got, []string{"🚫"}) {
			t.Errorf("bob's message %s shows the bot's reactions %v, want only 🚫", id, got)
		}
	}
	for _, m := range w.Srv.Messages(thread) {
		if m.Author.ID == w.Srv.Bot().ID && strings.Contains(m.Content, "🛑") {
			t.Errorf("the bot answered bob's 🛑: %q", m.Content)
		}
	}
	b.awaitMetric(`acp_broker_chat_refused_messages_total{platform="discord"}`, func(v float64) bool { return v == 2 })
	b.awaitMetric(`acp_broker_chat_ignored_cancel_reactions_total{platform="discord"}`, func(v float64) bool { return v == 1 })
}

// A SIGHUP that takes a channel out of discord.allowed_channels stops the
// threads there at once: the running turn ends saying why, its open
// permission request is answered and its buttons are gone, and from then
// on a message, /status, /reset and /model in such a thread are refused
// in words, before and after a restart of the broker.
func TestAccess_AReloadThatRemovesAChannelStopsItsThreads(t *testing.T) {
	w := newWorld(t, setup{conf: settings{"agent.args": []string{"--config-options"}}})
	b := w.start()
	thread := w.mention(alice, "permission")
	req := w.permissionRequest(thread)

	w.Conf["discord.allowed_channels"] = []string{w.Srv.AddChannel(brokertest.GuildID, "", "elsewhere")}
	w.writeConfig()
	b.Signal(syscall.SIGHUP)
	brokertest.MustGet(t, patience, func(ctx context.Context) (string, error) {
		return b.Log.Await(ctx, "configuration reloaded")
	})
	got := w.awaitAnswers(thread, 1)[0]
	if !strings.Contains(got.Footer, "no longer served by the bot") {
		t.Fatalf("the running turn ended with %q", got.Footer)
	}

	if m, _ := w.Srv.Message(thread, req.ID); len(m.Buttons()) != 0 {
		t.Errorf("the permission request still offers %d buttons: %q", len(m.Buttons()), m.Content)
	}
	refusedEverything := func(when string) {
		t.Helper()
		for _, name := range []string{"status", "reset", "model"} {
			if r := w.slash(thread, alice, name); !r.Ephemeral() || !strings.Contains(r.Content, "no longer served") {
				t.Errorf("%s: /%s answered %+v", when, name, r)
			}
		}
		sent := w.Discord.Post(thread, alice, "stream 1")
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		err := w.Srv.WaitFor(ctx, func() bool {
			for _, m := range w.Srv.Messages(thread) {
				if m.ReferenceID == sent && strings.Contains(m.Content, "no longer served by the bot; nothing was sent") {
					return true
				}
			}
			return false
		})
		if err != nil {
			t.Errorf("%s: the message was not refused in a reply: %v", when, err)
		}
	}
	refusedEverything("after the reload")
	b.stop()
	w.start()
	refusedEverything("after a restart")
	if got := w.awaitAnswers(thread, 1); len(got) != 1 {
		t.Errorf("the thread shows %d answers, want the one cancelled turn", len(got))
	}
}

// The same on Slack, with user groups: with slack.allowed_users =
// [alice], carol a member of a group in slack.allowed_groups and of one
// in slack.approver_groups, and bob on no list, bob's mention gets 🚫
// and nothing else; in alice's thread his message and his "@app cancel"
// get 🚫 and are not prompts, his click on her permission buttons is
// refused privately, and his 🛑 does nothing but count; carol, by her
// groups, is served in a thread of her own and may answer alice's
// request. Every click is acknowledged within Slack's 3 seconds.
func TestAccess_OnlyAllowedUsersAndGroupsAreServedOnSlack(t *testing.T) {
	w, _ := newWorldOn(t, "slack", setup{})
	s := w.Slack
	users := s.Srv.AddUserGroup(fakeslack.UserGroup{Handle: "agent-users", Members: []string{s.Carol.ID}})
	approvers := s.Srv.AddUserGroup(fakeslack.UserGroup{Handle: "agent-approvers", Members: []string{s.Carol.ID}})
	w.Conf = w.Conf.With(settings{"slack.allowed_users": []string{s.Alice.ID}, "slack.allowed_groups": []string{users.ID}, "slack.approver_groups": []string{approvers.ID}})
	f := w.front("slack").(*slackFront)
	b := w.start()

	refused := s.Srv.PostMessage(s.Channel, s.Bob.ID, s.Srv.Bot().Mention()+" let me in")
	f.awaitReaction(refused, refused, "🚫")
	thread := f.mention(pAlice, "permission")
	req := f.permissionRequest(thread)
	f.click(thread, req, pBob, "Allow")
	f.whispered(pBob, "can answer this request; you can't", 0)
	command := f.command2(thread, pBob, "cancel")
	f.react(thread, thread, pBob, "🛑")
	intruder := f.post(thread, pBob, "stream 3")
	f.awaitReaction(thread, intruder, "🚫")
	f.awaitReaction(thread, command, "🚫")
	if m := f.message(thread, req.id); len(m.buttons) != 3 {
		t.Fatalf("bob's actions changed alice's request: %q", m.text)
	}

	mine := f.mention(pCarol, "hello from a group")
	if got := f.awaitAnswers(mine, 1)[0]; !strings.Contains(got.text, "You said: hello from a group") {
		t.Fatalf("carol's thread got %q", got.text)
	}
	f.click(thread, req, pCarol, "Allow")
	await(t, f, "the request answered by carol", func() bool {
		return strings.Contains(f.message(thread, req.id).text, "@"+s.Carol.DisplayName+" chose *Allow*")
	})
	got := f.awaitAnswers(thread, 1)
	if !strings.Contains(got[0].text, "permission granted: allow") || !strings.HasPrefix(got[0].footer, "-# ✅ done") {
		t.Fatalf("alice's turn got %q", got[0].text)
	}
	f.post(thread, pAlice, "thanks")
	got = f.awaitAnswers(thread, 2)
	if !strings.Contains(got[1].text, "You said: thanks") {
		t.Fatalf("alice's next message got %q", got[1].text)
	}
	if strings.Contains(joinedTexts(got), "chunk") {
		t.Errorf("bob's message reached the agent: %q", joinedTexts(got))
	}
	for _, m := range s.Srv.Thread(s.Channel, refused) {
		if m.FromBot() {
			t.Errorf("the app answered bob's mention: %q", f.s.Text(m))
		}
	}
	for _, id := range []string{refused, intruder, command} {
		if got := f.botReactions(thread, id); !slices.Equal(got, []string{"🚫"}) {
			t.Errorf("bob's message %s shows the app's reactions %v, want only 🚫", id, got)
		}
	}
	for _, m := range f.botMessages(thread) {
		if strings.Contains(m.text, "🛑") || strings.Contains(m.text, "cancelled") {
			t.Errorf("the app answered bob's 🛑 or cancel: %q", m.text)
		}
	}
	for _, e := range s.Srv.Ephemerals(s.Bob.ID) {
		if strings.Contains(brokertest.SlackText(e.Blocks, e.Text), "can cancel") {
			t.Errorf("bob, on no list, was told who may cancel: his command is refused as a message: %q", e.Text)
		}
	}
	b.awaitMetric(`acp_broker_chat_refused_messages_total{platform="slack"}`, func(v float64) bool { return v == 3 })
	b.awaitMetric(`acp_broker_chat_ignored_cancel_reactions_total{platform="slack"}`, func(v float64) bool { return v == 1 })
}

// A SIGHUP that takes a channel out of slack.allowed_channels stops the
// threads there at once: the running turn ends saying why, its open
// permission request is answered and its buttons are gone, and from then
// on a message and "@app status" in such a thread are refused in words,
// before and after a restart of the broker.
func TestAccess_AReloadThatRemovesAChannelStopsItsThreadsOnSlack(t *testing.T) {
	w, front := newWorldOn(t, "slack", setup{})
	f := front.(*slackFront)
	b := w.start()
	thread := f.mention(pAlice, "permission")
	req := f.permissionRequest(thread)

	w.Conf["slack.allowed_channels"] = []string{w.Slack.Srv.AddChannel(fakeslack.Channel{Name: "elsewhere"}).ID}
	w.writeConfig()
	b.Signal(syscall.SIGHUP)
	brokertest.MustGet(t, patience, func(ctx context.Context) (string, error) {
		return b.Log.Await(ctx, "configuration reloaded")
	})
	got := f.awaitAnswers(thread, 1)[0]
	if !strings.Contains(got.footer, "no longer served by the bot") {
		t.Fatalf("the running turn ended with %q", got.footer)
	}
	if m := f.message(thread, req.id); len(m.buttons) != 0 {
		t.Errorf("the permission request still offers %d buttons: %q", len(m.buttons), m.text)
	}
	// A command written to the app is a message of the thread like any
	// other: refused as one.
	refusedEverything := func(when string) {
		t.Helper()
		for _, sent := range []string{f.command2(thread, pAlice, "status"), f.post(thread, pAlice, "stream 1")} {
			f.awaitReaction(thread, sent, "🚫")
			await(t, f, when+": the message refused in words", func() bool {
				for _, m := range w.Slack.Srv.Thread(w.Slack.Channel, thread) {
					if m.FromBot() && m.TS > sent && strings.Contains(f.s.Text(m), "no longer served by the bot; nothing was sent") {
						return true
					}
				}
				return false
			})
		}
	}
	refusedEverything("after the reload")
	b.stop()
	w.start()
	refusedEverything("after a restart")
	if got := f.answers(thread); len(got) != 1 {
		t.Errorf("the thread shows %d answers, want the one cancelled turn", len(got))
	}
}
