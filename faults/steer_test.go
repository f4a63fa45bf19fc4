package faults

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/agenttest"
	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakediscord"
)

// note waits for the bot's note under message msg in thread whose
// content has text, and returns it.
func (w *world) note(thread, msg, text string) fakediscord.Message {
	w.t.Helper()
	var found fakediscord.Message
	w.Srv.Await("the note under "+msg+" saying "+text, func() bool {
		for _, m := range w.Srv.Messages(thread) {
			if m.Author.ID == w.Srv.Bot().ID && m.ReferenceID == msg && strings.Contains(m.Content, text) {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

// sessionOf asks /status in a thread for its agent's session.
func (w *world) sessionOf(thread string, u fakediscord.User) string {
	w.t.Helper()
	r := w.slash(thread, u, "status")
	_, rest, ok := strings.Cut(r.Content, "**Session**: `")
	if !ok {
		w.t.Fatalf("/status shows no session: %q", r.Content)
	}
	sid, _, _ := strings.Cut(rest, "`")
	return sid
}

// deferred has u run a slash command with options in a channel and
// waits for the answer it deferred to say want; it returns that answer.
func (w *world) deferred(channel string, u fakediscord.User, name string, options map[string]any, want string) string {
	w.t.Helper()
	id := w.Srv.SlashCommand(channel, u.ID, name, options)
	if r := w.response(id); r.Type != 5 {
		return r.Content // answered at once
	}
	return brokertest.MustGet(w.t, patience, func(ctx context.Context) (string, error) {
		var last string
		for ctx.Err() == nil {
			in, _ := w.Srv.Interaction(id)
			if m, ok := w.Srv.Message(channel, in.OriginalMessageID); ok {
				last = m.Content
				if strings.Contains(m.Content, want) {
					return m.Content, nil
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		return last, context.Cause(ctx)
	})
}

// A message sent while a turn runs is marked waiting and the bot's note
// under it offers Send now: the click of someone who may not act on the
// thread is refused privately and changes nothing; the starter's
// interrupts the turn, whose end says who and for what, and the message
// is the next prompt of the same session, in the same agent, which
// answered the cancel. The note goes once the agent has the message.
func TestSteer_SendNowInterruptsAndTheMessageGoesToTheSameSession(t *testing.T) {
	w := newWorld(t, setup{})
	w.start()
	thread := w.mention(alice, "hang")
	w.awaitBotText(thread, "working…")
	pid, sid := w.agentPID(thread, alice), w.sessionOf(thread, alice)

	msg := w.Discord.Post(thread, bob, "session")
	w.awaitReaction(thread, msg, brokertest.Queued)
	note := w.note(thread, msg, "**Send now**")
	send := note.ButtonID(t, "Send now")
	r := w.response(w.Srv.ClickButton(thread, note.ID, bob.ID, send))
	if !r.Ephemeral() || !strings.Contains(r.Content, "<@"+alice.ID+"> or an approver can interrupt this thread's turn; you can't") {
		t.Fatalf("bob's Send now answered %+v", r)
	}
	w.response(w.Srv.ClickButton(thread, note.ID, alice.ID, send))

	got := w.awaitAnswers(thread, 2)
	if !strings.HasPrefix(got[0].Footer, "-# ⏹️ interrupted by Alice: session after ") || !strings.HasPrefix(got[0].Text, "working…") {
		t.Fatalf("the interrupted turn ended %q (%q)", got[0].Footer, got[0].Text)
	}
	if want := "session " + sid + " (new); 1 earlier prompts; last: hang"; !strings.HasPrefix(got[1].Text, want) || !strings.HasPrefix(got[1].Footer, "-# ✅ done") {
		t.Fatalf("the message sent now got %q, want %q", got[1].Text, want)
	}
	w.awaitReaction(thread, msg, brokertest.Done)
	if now := w.agentPID(thread, alice); now != pid {
		t.Errorf("the agent that answered the cancel (pid %d) was replaced by %d", pid, now)
	}
	w.Srv.Await("the note deleted", func() bool {
		m, ok := w.Srv.Message(thread, note.ID)
		return !ok || m.Deleted
	})
}

// An agent that ignores the cancel of a steer is replaced after
// turn.cancel_grace, as after any cancel it does not honour, and the
// steer still reaches the session, which the new agent takes up with
// session/resume: it remembers the turn that was interrupted.
func TestSteer_AnAgentThatIgnoresTheCancelIsReplacedAndTheSessionResumed(t *testing.T) {
	w := newWorld(t, setup{conf: settings{"turn.cancel_grace": "1s", "agent.args": []string{"-resume-session"}}})
	w.start()
	thread := w.mention(alice, "ignore-cancel")
	w.awaitBotText(thread, "working…")
	pid, sid := w.agentPID(thread, alice), w.sessionOf(thread, alice)

	r := w.response(w.Srv.SlashCommand(thread, bob.ID, "steer", map[string]any{"message": "session"}))
	if !r.Ephemeral() || !strings.Contains(r.Content, "<@"+alice.ID+"> or an approver can /steer this thread; you can't") {
		t.Fatalf("bob's /steer answered %+v", r)
	}
	steered := time.Now()
	r = w.response(w.Srv.SlashCommand(thread, alice.ID, "steer", map[string]any{"message": "session"}))
	if r.Ephemeral() || !strings.Contains(r.Content, "⏩ <@"+alice.ID+"> steered the agent:\n> session") {
		t.Fatalf("alice's /steer answered %+v", r)
	}
	got := w.awaitAnswers(thread, 2)
	if !strings.HasPrefix(got[0].Footer, "-# ⏹️ interrupted by Alice: session after ") {
		t.Fatalf("the interrupted turn ended %q", got[0].Footer)
	}
	end := w.Discord.SeenAt(thread, got[0].Msgs[len(got[0].Msgs)-1].ID, got[0].Footer)
	within(t, "from the steer to the end of the turn", end.Sub(steered), 800*time.Millisecond, 10*time.Second)
	if want := "session " + sid + " (resumed); 1 earlier prompts; last: ignore-cancel"; !strings.HasPrefix(got[1].Text, want) {
		t.Fatalf("the steer got %q, want %q", got[1].Text, want)
	}
	if !agenttest.WaitGone(pid, 10*time.Second) {
		t.Fatalf("the agent that ignored the cancel (pid %d) is still running", pid)
	}
	if now := w.agentPID(thread, alice); now == 0 || now == pid {
		t.Errorf("the steer ran on agent %d, want a fresh one", now)
	}
}

// With turn.busy = "interrupt" (or a profile's busy), a message of the
// thread's starter interrupts the running turn at once and runs next;
// another allowed user's waits its turn, behind it.
func TestSteer_BusyInterruptLetsTheStarterInterruptAndQueuesOthers(t *testing.T) {
	for _, conf := range []settings{{"turn.busy": "interrupt"}, {"agent.busy": "interrupt"}} {
		t.Run(strings.Join(slices.Collect(maps.Keys(conf)), ""), func(t *testing.T) { busyInterrupt(t, conf) })
	}
}

func busyInterrupt(t *testing.T, conf settings) {
	w := newWorld(t, setup{conf: conf})
	w.start()
	thread := w.mention(alice, "hang")
	w.awaitBotText(thread, "working…")
	bobs := w.Discord.Post(thread, bob, "stream 1")
	w.awaitReaction(thread, bobs, brokertest.Queued)
	w.note(thread, bobs, "**Send now**")
	if st := w.slash(thread, alice, "status"); !strings.Contains(st.Content, "busy (turn running") {
		t.Fatalf("bob's message interrupted the turn: %q", st.Content)
	}
	alices := w.Discord.Post(thread, alice, "session")
	got := w.awaitAnswers(thread, 3)
	if !strings.HasPrefix(got[0].Footer, "-# ⏹️ interrupted by Alice: session after ") {
		t.Fatalf("the running turn ended %q", got[0].Footer)
	}
	if !strings.Contains(got[1].Text, "(new); 1 earlier prompts; last: hang") {
		t.Fatalf("the starter's message came second: %q", got[1].Text)
	}
	if !strings.HasPrefix(got[2].Text, "chunk 1") {
		t.Fatalf("bob's message came third: %q", got[2].Text)
	}
	w.awaitReaction(thread, alices, brokertest.Done)
	w.awaitReaction(thread, bobs, brokertest.Done)
}

// /queue lists the waiting messages with their authors and removes one
// for its author (or an approver), not for anyone else; the message
// that would pass turn.queue_size is refused, telling its author the
// bound and how to see the queue.
func TestSteer_QueueShowsAndRemovesAndTheBoundIsTold(t *testing.T) {
	w := newWorld(t, setup{conf: settings{"turn.queue_size": 2}})
	w.start()
	thread := w.mention(alice, "hang")
	w.awaitBotText(thread, "working…")
	bobs := w.Discord.Post(thread, bob, "stream 1")
	carols := w.Discord.Post(thread, carol, "stream 2")
	w.note(thread, carols, "**Send now**")
	over := w.Discord.Post(thread, carol, "stream 3")
	refusal := w.awaitBotText(thread, "<@"+carol.ID+">, 2 messages are already waiting in this thread, the most it keeps (turn.queue_size): yours was not sent to the agent")
	if !strings.Contains(refusal.Content, "`/queue`") {
		t.Errorf("the refusal does not say how to see the queue: %q", refusal.Content)
	}
	w.awaitReaction(thread, over, brokertest.Failed)

	r := w.slash(thread, bob, "queue")
	if !r.Ephemeral() || !strings.Contains(r.Content, "**Waiting** (2, at most 2):") ||
		!strings.Contains(r.Content, "1. <@"+bob.ID+"> “stream 1”") || !strings.Contains(r.Content, "2. <@"+carol.ID+"> “stream 2”") {
		t.Fatalf("/queue answered %+v", r)
	}
	r = w.response(w.Srv.SlashCommand(thread, bob.ID, "queue", map[string]any{"remove": "2"}))
	if !r.Ephemeral() || !strings.Contains(r.Content, "Only <@"+carol.ID+">, who wrote it, or an approver can remove this message.") {
		t.Fatalf("bob removing carol's answered %+v", r)
	}
	r = w.response(w.Srv.SlashCommand(thread, bob.ID, "queue", map[string]any{"remove": "1"}))
	if r.Ephemeral() || !strings.Contains(r.Content, "🗑️ <@"+bob.ID+"> removed <@"+bob.ID+">'s waiting message “stream 1”.") {
		t.Fatalf("bob removing his own answered %+v", r)
	}
	w.note(thread, bobs, "⏹️ removed from the queue by Bob")
	w.awaitReaction(thread, bobs, brokertest.Cancelled)
	if r := w.slash(thread, alice, "queue"); strings.Contains(r.Content, "stream 1") || !strings.Contains(r.Content, "1. <@"+carol.ID+"> “stream 2”") {
		t.Fatalf("/queue after the removal: %q", r.Content)
	}
	w.slash(thread, alice, "cancel")
	// The refusal, which ends no turn, is counted with the answer after
	// it.
	got := w.awaitAnswers(thread, 2)
	if !strings.HasSuffix(got[1].Text, "\nchunk 1\nchunk 2\n"+got[1].Footer) {
		t.Fatalf("after the cancel the thread answered %q, want carol's message alone", got[1].Text)
	}
	w.awaitReaction(thread, carols, brokertest.Done)
	for _, a := range w.Discord.Answers(thread) {
		if strings.Contains(a.Text, "chunk 1\n-#") {
			t.Fatalf("the removed message reached the agent: %q", a.Text)
		}
	}
}
