package discord_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"acpbroker/adapter"
	"acpbroker/broker"
	"acpbroker/chat/discord"
	"acpbroker/internal/agenttest"
	"acpbroker/internal/fakediscord"
	"acpbroker/store"
)

// Removing a channel from the allow-list stops its threads at once: the
// running turn is cancelled with the reason, and a later message and a
// command in the thread are refused in words.
func TestAccess_RemovedChannelStopsItsThreads(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "hang")
	h.waitWorking(thread)
	h.client.SetAccess(discord.Access{AllowedChannels: []string{h.other}})
	h.answer(thread, "this channel is no longer served by the bot")

	before := len(h.botMessages(thread))
	h.srv.SendMessage(thread, alice, "stream 1")
	h.srv.Await("the message refused", func() bool {
		msgs := h.botMessages(thread)
		return len(msgs) > before && strings.Contains(msgs[len(msgs)-1].Content, "no longer served by the bot; nothing was sent")
	})
	if st := h.engine.Status(thread); st.Busy || st.Queued != 0 {
		t.Fatalf("a message in a removed channel's thread reached the engine: %+v", st)
	}
	r := h.response(h.srv.SlashCommand(thread, alice.ID, "status", nil))
	if !r.Ephemeral() || !strings.Contains(r.Content, "no longer served") {
		t.Fatalf("/status answered %+v", r)
	}
	if s := h.client.Stats(); s.RefusedChannels != 1 {
		t.Fatalf("refused channel messages = %d, want 1", s.RefusedChannels)
	}
}

// A thread the broker no longer holds in memory (idle past ForgetAfter),
// in a channel taken off the list meanwhile, is still the bot's: a
// message or a command there is refused in words, not ignored.
func TestAccess_AForgottenThreadOfARemovedChannelIsRefusedInWords(t *testing.T) {
	const forget = 300 * time.Millisecond
	h := newHarness(t, setup{discord: discord.Config{ForgetAfter: forget}})
	thread := h.mention(alice, "hello")
	h.answer(thread, "✅")
	time.Sleep(forget + 100*time.Millisecond)
	h.answer(h.mention(bob, "hello"), "✅") // sweeps alice's idle conversation
	if n := h.client.Stats().Conversations; n != 1 {
		t.Fatalf("%d conversations, want alice's forgotten", n)
	}
	h.client.SetAccess(discord.Access{AllowedChannels: []string{h.other}})

	sent := h.srv.SendMessage(thread, alice, "stream 1")
	h.srv.Await("the message refused in a reply", func() bool {
		for _, m := range h.srv.Messages(thread) {
			if m.ReferenceID == sent && strings.Contains(m.Content, "no longer served by the bot; nothing was sent") {
				return true
			}
		}
		return false
	})
	r := h.response(h.srv.SlashCommand(thread, alice.ID, "status", nil))
	if !r.Ephemeral() || !strings.Contains(r.Content, "no longer served") {
		t.Fatalf("/status answered %+v", r)
	}
	if st := h.engine.Status(thread); st.Busy || st.Queued != 0 {
		t.Fatalf("a message in a removed channel's thread reached the engine: %+v", st)
	}
}

// /cancel, /reset and 🛑 follow the rule of permission answers: the
// thread's starter, an approver, or a member of an approver role; anyone
// else is told privately when they use a command, and their 🛑 is
// ignored, and nothing happens.
func TestAccess_OnlyTheStarterOrAnApproverMayCancelOrReset(t *testing.T) {
	h := newHarness(t, setup{})
	a := accessFor(h)
	a.ApproverRoles = []string{"900"}
	h.client.SetAccess(a)
	h.srv.SetRoles(guildID, carol.ID, "900")
	thread := h.mention(alice, "hang")
	h.waitWorking(thread)

	r := h.response(h.srv.SlashCommand(thread, bob.ID, "reset", nil))
	if !r.Ephemeral() || !strings.Contains(r.Content, "<@"+alice.ID+"> or an approver can /reset this thread; you can't") {
		t.Fatalf("bob's /reset answered %+v", r)
	}
	h.srv.AddReaction(h.channel, thread, bob.ID, "🛑")
	h.until("bob's 🛑 ignored", func() bool { return h.client.Stats().IgnoredCancels == 1 })
	if !h.engine.Status(thread).Busy {
		t.Fatal("bob's /reset or 🛑 ended alice's turn")
	}
	r = h.response(h.srv.SlashCommand(thread, carol.ID, "cancel", nil))
	if r.Ephemeral() || !strings.Contains(r.Content, "cancelled the current turn") {
		t.Fatalf("carol's /cancel (approver role) answered %+v", r)
	}
	h.srv.Await("the turn cancelled by carol", func() bool {
		for _, m := range h.botMessages(thread) {
			if strings.Contains(m.Content, "⏹️ cancelled by Carol") && finalFooter(m.Content) {
				return true
			}
		}
		return false
	})
	if said := joined(h.botMessages(thread)); strings.Contains(said, "🛑") {
		t.Fatalf("the thread answered bob's 🛑:\n%s", said)
	}
}

// A 🛑 from someone who may not act on the thread (not its starter, not
// an approver, or on no list at all) is ignored without a word: nothing
// is posted, however often it comes, so strangers cannot spend the
// thread's messages; each is counted, and logged at most
// ignoredCancelBurst (5) lines a second. The starter's 🛑 still cancels.
func TestAccess_AStopFromSomeoneWhoMayNotActIsIgnoredWithoutAWord(t *testing.T) {
	var logs agenttest.Buffer
	h := newHarness(t, setup{discordLog: &logs})
	h.client.SetAccess(accessFor(h, alice.ID, bob.ID)) // carol is on no list
	thread := h.mention(alice, "hang")
	h.waitWorking(thread)
	inThread := h.botMessages(thread)[0].ID // the answer, working
	before := len(h.srv.Messages(thread))

	const rounds = 15
	start := time.Now()
	for range rounds {
		for _, u := range []fakediscord.User{bob, carol} {
			h.srv.AddReaction(h.channel, thread, u.ID, "🛑")
			h.srv.AddReaction(thread, inThread, u.ID, "🛑")
			h.srv.RemoveReaction(h.channel, thread, u.ID, "🛑")
			h.srv.RemoveReaction(thread, inThread, u.ID, "🛑")
		}
	}
	const ignored = rounds * 2 * 2
	h.until("every stranger's 🛑 counted", func() bool { return h.client.Stats().IgnoredCancels == ignored })
	took := time.Since(start)
	if !h.engine.Status(thread).Busy {
		t.Fatal("a stranger's 🛑 ended alice's turn")
	}
	lines := strings.Count(logs.String(), "🛑 ignored")
	if most := 5 * (int(took/time.Second) + 1); lines < 1 || lines > most || lines >= ignored {
		t.Errorf("%d ignored 🛑 logged for %d in %s, want at least one and at most %d", lines, ignored, took.Round(time.Millisecond), most)
	}

	h.srv.AddReaction(thread, inThread, alice.ID, "🛑")
	h.answer(thread, "⏹️ cancelled by Alice")
	for _, m := range h.srv.Messages(thread)[before:] {
		if m.Author.ID == h.srv.Bot().ID && (strings.Contains(m.Content, "🛑") || strings.Contains(m.Content, "was not taken")) {
			t.Errorf("the bot answered a 🛑 in the thread: %q", m.Content)
		}
	}
	for _, m := range h.srv.Messages(h.channel) {
		if m.Author.ID == h.srv.Bot().ID && strings.Contains(m.Content, "🛑") {
			t.Errorf("the bot answered a 🛑 in the channel: %q", m.Content)
		}
	}
	if n := h.client.Stats().IgnoredCancels; n != ignored {
		t.Errorf("ignored 🛑 = %d, want %d: the starter's was counted", n, ignored)
	}
}

// A thread adopted again while Discord fails to say who started it keeps
// the starter the broker recorded; with none recorded, only approvers may
// answer its questions until the lookup succeeds (fail closed), and the
// record is never overwritten with nothing.
func TestAccess_StarterLookupFailureNeverWidensWhoMayApprove(t *testing.T) {
	for _, recorded := range []bool{true, false} {
		name := "starter recorded"
		if !recorded {
			name = "nothing recorded"
		}
		t.Run(name, func(t *testing.T) {
			const forget = 300 * time.Millisecond
			var st *store.Store
			cfg := discord.Config{ForgetAfter: forget}
			if recorded {
				var err error
				st, err = store.Open(store.Options{Dir: t.TempDir()})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Close() })
				cfg.Memory = st
			}
			h := newHarness(t, setup{discord: cfg})
			a := accessFor(h)
			a.Approvers = []string{carol.ID}
			h.client.SetAccess(a)
			thread := h.mention(alice, "hello")
			h.answer(thread, "✅")
			time.Sleep(forget + 100*time.Millisecond)
			other := h.mention(bob, "hello") // sweeps alice's idle conversation
			h.answer(other, "✅")
			if n := h.client.Stats().Conversations; n != 1 {
				t.Fatalf("%d conversations, want alice's forgotten", n)
			}

			h.srv.InjectError(fakediscord.OnRouteIn(fakediscord.RouteGetMessage, h.channel), 100, 500)
			h.srv.SendMessage(thread, alice, "permission")
			msg := h.permissionMessage(thread)
			r := h.response(h.srv.ClickButton(thread, msg.ID, bob.ID, msg.ButtonID(t, "Allow")))
			if !r.Ephemeral() || !strings.Contains(r.Content, "can answer this request; you can't") {
				t.Fatalf("bob's click answered %+v", r)
			}
			decider := carol
			if recorded {
				decider = alice // the recorded starter
			}
			r = h.response(h.srv.ClickButton(thread, msg.ID, decider.ID, msg.ButtonID(t, "Allow")))
			if r.Ephemeral() || !strings.Contains(r.Content, "chose **Allow**") {
				t.Fatalf("%s's click answered %+v", decider.Username, r)
			}
			h.answer(thread, "permission granted: allow")
			if recorded {
				rec, _ := st.Thread(thread)
				var v struct{ Starter string }
				json.Unmarshal(rec.Chat, &v)
				if v.Starter != alice.ID {
					t.Fatalf("the recorded starter is %q after the failed lookup, want alice", v.Starter)
				}
			}
		})
	}
}

// auditLog is an adapter.Auditor that keeps the decisions.
type auditLog struct {
	mu   sync.Mutex
	list []adapter.Decision
}

func (a *auditLog) Decided(d adapter.Decision) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.list = append(a.list, d)
}

func (a *auditLog) decisions() []adapter.Decision {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]adapter.Decision(nil), a.list...)
}

// A permission answer is recorded with the id and name of whoever
// clicked: here a member of an approver role, then the thread's starter.
// A user who is neither the starter, nor an approver, nor in an approver
// role (though in another role) cannot answer, and nothing is recorded
// for the attempt.
func TestAccess_TheClickerIsRecordedAndNobodyElseMayAnswer(t *testing.T) {
	audit := &auditLog{}
	h := newHarness(t, setup{engine: adapter.Config{Auditor: audit}})
	a := accessFor(h)
	a.ApproverRoles = []string{"900"}
	h.client.SetAccess(a)
	h.srv.SetRoles(guildID, carol.ID, "900")
	h.srv.SetRoles(guildID, bob.ID, "901")
	thread := h.mention(alice, "permission-twice")

	msg := h.permissionMessage(thread)
	r := h.response(h.srv.ClickButton(thread, msg.ID, bob.ID, msg.ButtonID(t, "Allow")))
	if !r.Ephemeral() || !strings.Contains(r.Content, "can answer this request; you can't") {
		t.Fatalf("bob's click answered %+v", r)
	}
	if d := audit.decisions(); len(d) != 0 {
		t.Fatalf("bob's refused click was recorded: %+v", d)
	}
	r = h.response(h.srv.ClickButton(thread, msg.ID, carol.ID, msg.ButtonID(t, "Reject")))
	if r.Ephemeral() || !strings.Contains(r.Content, "chose **Reject**") {
		t.Fatalf("carol's click answered %+v", r)
	}
	var second fakediscord.Message
	h.srv.Await("the second request", func() bool {
		second = h.permissionMessage(thread)
		return second.ID != msg.ID
	})
	h.response(h.srv.ClickButton(thread, second.ID, alice.ID, second.ButtonID(t, "Allow")))
	h.answer(thread, "permission granted: allow")

	var got []adapter.Decision
	h.srv.Await("two decisions recorded", func() bool { got = audit.decisions(); return len(got) == 2 })
	for i, want := range []struct {
		by, name, option, kind string
	}{
		{carol.ID, carol.Username, "reject", "reject_once"},
		{alice.ID, alice.Username, "allow", "allow_once"},
	} {
		d := got[i]
		if d.Via != adapter.ViaUser || d.By != want.by || d.ByName != want.name || d.OptionID != want.option || d.OptionKind != want.kind || d.Thread != broker.ThreadID("discord", thread) || d.Tool != "Run rm -rf build" {
			t.Errorf("decision %d = %+v, want by %s (%s) choosing %s", i+1, d, want.name, want.by, want.option)
		}
	}
}
