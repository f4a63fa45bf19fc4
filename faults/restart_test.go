package faults

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/agenttest"
	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakediscord"
)

// A broker killed with SIGKILL mid-turn leaves no thread hanging: when it
// is started again on the same state.dir, the thread is told "The broker
// restarted while working on your message “hang”" (once, not at every
// start), that message shows ❌ instead of ⚙️, the agent the dead broker
// left running is killed, and the next message resumes the agent
// session. On every platform.
func TestRestart_KilledBrokerReportsTheTurnAndResumesTheSession(t *testing.T) {
	forEachPlatform(t, func(t *testing.T, platform string) {
		// The agent outlives its closed stdin, as real agents do: only the
		// next broker can clean it up. Unsandboxed: a sandboxed agent dies
		// with the broker (bubblewrap's --die-with-parent).
		w, f := newWorldOn(t, platform, setup{conf: settings{"agent.args": []string{"--load-session", "--no-exit-on-eof"}, "agent.sandbox": "none"}})
		first := w.start()
		thread := f.mention(pAlice, "remember the number 42")
		if got := f.awaitAnswers(thread, 1)[0]; !strings.Contains(got.text, "You said: remember the number 42") {
			t.Fatalf("first answer %q", got.text)
		}
		before := len(f.botMessages(thread))
		hang := f.post(thread, pAlice, "hang")
		f.awaitBotText(thread, "working…", before)
		f.awaitReaction(thread, hang, "⚙️")
		agent := f.agentPID(thread, pAlice)
		first.Kill()
		if !agenttest.Running(agent) {
			t.Fatalf("the agent (pid %d) died with the broker; this test needs it left behind", agent)
		}

		second := w.start()
		notice := f.awaitBotText(thread, "The broker restarted while working on your message “hang”", 0)
		if !strings.HasPrefix(notice.text, brokertest.RestartNotice) {
			t.Errorf("the notice reads %q", notice.text)
		}
		f.awaitReaction(thread, hang, "❌")
		if slices.Contains(f.botReactions(thread, hang), "⚙️") {
			t.Errorf("the interrupted message still shows ⚙️: %v", f.botReactions(thread, hang))
		}
		if !agenttest.WaitGone(agent, 10*time.Second) {
			t.Fatalf("the agent left by the killed broker (pid %d) is still running", agent)
		}
		f.post(thread, pAlice, "what was the number?")
		got := f.awaitAnswers(thread, 2)[1]
		if !strings.Contains(got.text, "(resumed) You said: what was the number?") || !strings.HasPrefix(got.footer, "-# ✅ done") {
			t.Fatalf("the message after the restart got %q, want the session resumed", got.text)
		}

		// A clean restart does not report the interrupted turn again.
		if code := second.stop(); code != 0 {
			t.Errorf("the second broker exited with status %d", code)
		}
		w.start()
		f.post(thread, pAlice, "still with me?")
		got = f.awaitAnswers(thread, 3)[2]
		if !strings.Contains(got.text, "You said: still with me?") {
			t.Fatalf("the message after the second restart got %q", got.text)
		}
		notices := 0
		for _, m := range f.botMessages(thread) {
			if strings.HasPrefix(m.text, brokertest.RestartNotice) {
				notices++
			}
		}
		if notices != 1 {
			t.Errorf("the interrupted turn was reported %d times", notices)
		}
	})
}

// A sandboxed agent never outlives a broker killed with SIGKILL: it dies
// with it, and the next broker reports the interrupted turn and resumes
// the session the agent saved in its workspace.
func TestRestart_SandboxedAgentDiesWithAKilledBroker(t *testing.T) {
	needBwrap(t)
	w := newWorld(t, setup{conf: settings{"agent.args": []string{"--load-session", "--no-exit-on-eof"}}})
	first := w.start()
	thread := w.mention(alice, "remember the number 42")
	w.awaitAnswers(thread, 1)
	before := len(w.Discord.BotMessages(thread))
	w.Discord.Post(thread, alice, "hang")
	w.awaitNewBotText(thread, "working…", before)
	agent := w.agentPID(thread, alice)
	first.Kill()
	if !agenttest.WaitGone(agent, 5*time.Second) {
		t.Fatalf("the sandboxed agent (pid %d) outlived the killed broker", agent)
	}
	w.start()
	w.awaitBotText(thread, "The broker restarted while working on your message “hang”")
	w.Discord.Post(thread, alice, "what was the number?")
	if got := w.awaitAnswers(thread, 2)[1]; !strings.Contains(got.Text, "(resumed) You said: what was the number?") {
		t.Fatalf("the message after the restart got %q, want the session resumed", got.Text)
	}
}

// A turn that ended while its thread did not show it yet (its final view
// still on its way to Discord) when the broker was killed is reported at
// the next start, with how it ended: a recorded ending is never taken for
// a shown one.
func TestRestart_AnOutcomeNotYetShownIsReportedAfterAKill(t *testing.T) {
	w := newWorld(t, setup{})
	first := w.start()
	thread := w.mention(alice, "hello")
	w.awaitAnswers(thread, 1)
	// Discord fails every post of the final view: it is not in the thread
	// when the broker dies.
	w.Srv.InjectError(func(r fakediscord.Request) bool {
		return (r.Route == fakediscord.RouteEditMessage || r.Route == fakediscord.RouteCreateMessage) &&
			r.Major == thread && strings.Contains(string(r.Body), "✅ done")
	}, 1000, http.StatusInternalServerError)
	second := w.Discord.Post(thread, alice, "stream 2")
	first.awaitMetric(`acp_broker_turns_total{outcome="done"}`, func(v float64) bool { return v == 2 })
	first.Kill()

	w.start()
	notice := w.awaitBotText(thread, "The broker restarted before it could show how your message “stream 2”")
	if !strings.Contains(notice.Content, "ended: done") {
		t.Fatalf("the notice reads %q", notice.Content)
	}
	for _, m := range w.Discord.BotMessages(thread) {
		if strings.Contains(m.Content, "The broker restarted") && strings.Contains(m.Content, "“hello”") {
			t.Fatalf("a shown turn was reported too: %q", m.Content)
		}
	}
	w.awaitReaction(thread, second, "❌")
	if got := w.Discord.BotReactions(thread, second); len(got) != 1 {
		t.Fatalf("the message's status reactions are %v, want only ❌", got)
	}
}

// An earlier turn's answer can end after the next prompt (it was still
// streaming when that was sent): at the next start that line is not taken
// for the next turn's, whose final view never went out.
func TestRestart_AnEarlierTurnsAnswerAfterThePromptIsNotItsOwn(t *testing.T) {
	w := newWorld(t, setup{})
	first := w.start()
	// Discord fails every post of the second turn's final view.
	w.Srv.InjectError(func(r fakediscord.Request) bool {
		return (r.Route == fakediscord.RouteEditMessage || r.Route == fakediscord.RouteCreateMessage) &&
			strings.Contains(string(r.Body), "chunk 2") && strings.Contains(string(r.Body), "✅ done")
	}, 1000, http.StatusInternalServerError)
	thread := w.mention(alice, "slow 1500ms 1")
	second := w.Discord.Post(thread, alice, "stream 2")
	answers := w.awaitAnswers(thread, 1)
	if !strings.Contains(answers[0].Text, "chunk 1") || answers[0].Msgs[0].ID < second {
		t.Fatalf("the first answer %q (message %s) does not follow the second prompt %s", answers[0].Text, answers[0].Msgs[0].ID, second)
	}
	first.awaitMetric(`acp_broker_turns_total{outcome="done"}`, func(v float64) bool { return v == 2 })
	first.Kill()

	w.start()
	notice := w.awaitBotText(thread, "The broker restarted before it could show how your message “stream 2”")
	if !strings.Contains(notice.Content, "ended: done") {
		t.Fatalf("the notice reads %q", notice.Content)
	}
	w.awaitReaction(thread, second, "❌")
}

// A turn whose thread shows its outcome, but whose broker died before
// noting so (here: before its status reaction was final), is not
// reported again at the next start: the thread is read, the reaction
// is settled, and nothing else is said.
func TestRestart_AnOutcomeShownButNotNotedIsNotReportedTwice(t *testing.T) {
	w := newWorld(t, setup{})
	first := w.start()
	thread := w.mention(alice, "hello")
	w.awaitAnswers(thread, 1)
	// Taking the ⚙️ off the second prompt is done by Discord but its
	// answer never comes back: the ✅ is never put on. The stall is in
	// place before the prompt is sent (the broker may take the ⚙️ off
	// before Post returns), and knows it by the emoji and the thread:
	// the first prompt's reactions are in the channel. The broker is
	// killed once the call is held, not before it was made.
	held := make(chan struct{})
	w.Srv.InjectStall(func(r fakediscord.Request) bool {
		if r.Route == fakediscord.RouteDeleteOwnReaction && r.Major == thread && strings.Contains(r.Path, "/reactions/⚙️/") {
			close(held) // once: the fault is used up
			return true
		}
		return false
	}, 1, time.Minute)
	second := w.Discord.Post(thread, alice, "stream 2")
	w.awaitAnswers(thread, 2)
	first.awaitMetric(`acp_broker_turns_total{outcome="done"}`, func(v float64) bool { return v == 2 })
	select {
	case <-held:
	case <-time.After(patience):
		t.Fatal("the broker never took the ⚙️ off the second prompt")
	}
	if got := w.Discord.BotReactions(thread, second); slices.Contains(got, "✅") {
		t.Fatalf("the ✅ came although its call was held: %v", got)
	}
	first.Kill()

	b := w.start()
	w.awaitReaction(thread, second, "✅")
	b.awaitMetric(`acp_broker_turns_running`, func(v float64) bool { return v == 0 })
	for _, m := range w.Discord.BotMessages(thread) {
		if strings.Contains(m.Content, "The broker restarted") {
			t.Fatalf("a turn the thread shows was reported again: %q", m.Content)
		}
	}
	if got := w.Discord.BotReactions(thread, second); len(got) != 1 {
		t.Fatalf("the message's status reactions are %v, want only ✅", got)
	}
}

// A thread's choices outlive the broker: a model chosen with /model, the
// broker killed with SIGKILL and started again, the thread's next
// message gets a new agent that was given the model before the prompt.
func TestRestart_ChoicesAreGivenToTheNextBrokersAgent(t *testing.T) {
	w := newWorld(t, setup{conf: settings{"agent.args": []string{"--config-options"}}})
	first := w.start()
	thread := w.mention(alice, "settings")
	if got := w.awaitAnswers(thread, 1)[0]; !strings.Contains(got.Text, "model=fake-small") {
		t.Fatalf("first answer %q", got.Text)
	}
	agent := w.agentPID(thread, alice)
	id := w.Srv.SlashCommand(thread, alice.ID, "model", map[string]any{"value": "fake-large"})
	w.response(id)
	brokertest.Must(t, patience, func(ctx context.Context) error {
		for ctx.Err() == nil {
			in, _ := w.Srv.Interaction(id)
			if m, ok := w.Srv.Message(thread, in.OriginalMessageID); ok && strings.Contains(m.Content, "set **Model** to **Fake Large**") {
				return nil
			}
			time.Sleep(20 * time.Millisecond)
		}
		return ctx.Err()
	})
	first.Kill()

	w.start()
	w.Discord.Post(thread, alice, "settings")
	if got := w.awaitAnswers(thread, 2)[1]; !strings.Contains(got.Text, "model=fake-large mode=ask") {
		t.Fatalf("after the restart the agent runs with %q", got.Text)
	}
	if pid := w.agentPID(thread, alice); pid == agent {
		t.Fatalf("the thread's agent after the restart is the same process %d", pid)
	}
}
