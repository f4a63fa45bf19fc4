package interop

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakediscord"
)

// offered are the session methods each real agent advertises in its
// initialize answer (sessionCapabilities), as observed: the tests below
// hold them to it and exercise those through the broker.
var offered = map[string]acp.AgentSessionCapabilities{
	"codex-acp":        {List: &struct{}{}, Resume: &struct{}{}, Close: &struct{}{}},
	"claude-agent-acp": {List: &struct{}{}, Resume: &struct{}{}, Close: &struct{}{}, Fork: &struct{}{}},
}

// TestDiscordSteeringAndSessions runs codex-acp and claude-agent-acp
// behind the broker on the fake Discord, each capability they offer
// exercised as a user uses it:
//
//   - Send now on a message waiting behind a turn the model never
//     answers interrupts that turn, and the message is the next prompt of
//     the same session: the model's next request carries the interrupted
//     prompt (claude-agent-acp, run with agent.restart_after_cancel, gets
//     a new process, which takes the session up with session/resume);
//   - /sessions lists what the agent lists (session/list) for the
//     thread's workspace, /resume takes an earlier session up with
//     session/resume, and the model's next request carries that
//     session's conversation;
//   - /fork (claude-agent-acp alone offers session/fork) opens a thread
//     whose agent forks the session, and the model's request from there
//     carries the conversation forked; codex-acp's thread is told plainly
//     that its agent does not offer it;
//   - an agent stopped for idleness is sent session/close first, and the
//     thread's next message gets an agent that takes the session up with
//     session/resume.
func TestDiscordSteeringAndSessions(t *testing.T) {
	for _, sub := range subjects {
		want, ok := offered[sub.name]
		if !ok {
			continue // the SDK example offers none of them
		}
		t.Run(sub.name, func(t *testing.T) {
			s := sub.make(t)
			b := newDiscordBroker(t, s, adapter.Config{RestartAfterCancel: s.expect.staleAnswerAfterCancel})
			t.Run("steer", func(t *testing.T) { discordSendNow(t, b) })
			t.Run("sessions", func(t *testing.T) { discordResumeAndFork(t, b, want) })
			if want.CanFork() && s.expect.forksOnlyInPlace {
				// Every thread in agent.cwd: a fork works where its
				// session did.
				shared := newDiscordBroker(t, s, adapter.Config{RestartAfterCancel: s.expect.staleAnswerAfterCancel},
					brokertest.Settings{"agent.per_thread_dir": false})
				t.Run("fork", func(t *testing.T) { discordFork(t, shared) })
			}
			idle := newDiscordBroker(t, s, adapter.Config{RestartAfterCancel: s.expect.staleAnswerAfterCancel},
				brokertest.Settings{"pool.idle_timeout": "2s"})
			t.Run("idle", func(t *testing.T) { discordIdleCloseAndResume(t, idle) })
			t.Logf("%s latencies: %s", s.spec.Name, b.timings)
		})
	}
}

// replyTo waits for the bot's reply to message msg in thread whose text
// has want.
func (b *discordBroker) replyTo(t *testing.T, thread, msg, want string) fakediscord.Message {
	t.Helper()
	var found fakediscord.Message
	b.await(t, "the bot's reply to "+msg+" with "+want, func() bool {
		for _, m := range b.srv.Messages(thread) {
			if m.Author.ID == b.srv.Bot().ID && m.ReferenceID == msg && strings.Contains(m.Content, want) {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

// turnText waits until the thread shows a turn's footer line starting
// with footer, and returns that message's text.
func (b *discordBroker) turnText(t *testing.T, thread, footer string) string {
	t.Helper()
	var text string
	b.await(t, "a turn ending "+footer, func() bool {
		for _, m := range b.srv.Messages(thread) {
			if m.Author.ID == b.srv.Bot().ID && m.ReferenceID == "" && strings.HasPrefix(brokertest.Footer(m.Content), footer) {
				text = m.Content
				return true
			}
		}
		return false
	})
	return text
}

// deferredAnswer runs a slash command as the thread's starter and waits
// for the answer it deferred to say want.
func (b *discordBroker) deferredAnswer(t *testing.T, channel, name string, options map[string]any, want string) string {
	t.Helper()
	id := b.srv.SlashCommand(channel, threadStarter.ID, name, options)
	if r := b.interactionResponse(t, id); r.Type != 5 {
		return r.Content
	}
	var text string
	b.await(t, "/"+name+" answered "+want, func() bool {
		in, _ := b.srv.Interaction(id)
		m, ok := b.srv.Message(channel, in.OriginalMessageID)
		text = m.Content
		return ok && strings.Contains(m.Content, want)
	})
	return text
}

// sessionOf is the thread's agent session, as /status says.
func (b *discordBroker) sessionOf(t *testing.T, thread string) string {
	t.Helper()
	r := b.interactionResponse(t, b.srv.SlashCommand(thread, threadStarter.ID, "status", nil))
	m := regexp.MustCompile("\\*\\*Session\\*\\*: `([^`]+)`").FindStringSubmatch(r.Content)
	if m == nil {
		t.Fatalf("/status shows no session: %q", r.Content)
	}
	return m[1]
}

// discordSendNow: see TestDiscordSteeringAndSessions.
func discordSendNow(t *testing.T, b *discordBroker) {
	s := b.s
	s.hang()
	thread, _ := b.mention(t, "Count the files. MARK-FIRST")
	ctx, cancel := context.WithTimeout(context.Background(), discordAwait)
	defer cancel()
	if err := s.hanging(ctx); err != nil {
		t.Fatalf("the model call never started: %v", err)
	}
	msg, _ := b.say(t, thread, "Stop; list the directories instead.")
	note := b.replyTo(t, thread, msg, "**Send now**")
	s.text("Here are ", "the directories.")
	sent := time.Now()
	b.interactionResponse(t, b.srv.ClickButton(thread, note.ID, threadStarter.ID, note.ButtonID(t, "Send now")))
	interrupted := b.turnText(t, thread, "-# ⏹️ interrupted by ")
	if !strings.Contains(interrupted, "interrupted by "+threadStarter.GlobalName+": Stop; list the directories instead.") {
		t.Errorf("the interrupted turn ends %q", interrupted)
	}
	answer := b.turnText(t, thread, "-# ✅ done")
	if !strings.Contains(answer, "Here are the directories.") {
		t.Errorf("the message sent now got %q", answer)
	}
	if body := s.lastBody(); !strings.Contains(body, "MARK-FIRST") || !strings.Contains(body, "list the directories instead") {
		t.Errorf("the model's request for the message sent now does not carry the interrupted prompt: the session is not the same")
	}
	procs := b.procs.of(thread)
	if s.expect.staleAnswerAfterCancel {
		if len(procs) < 2 || procs[len(procs)-1].sentAt(acp.MethodSessionResume).IsZero() {
			t.Errorf("the agent replaced after the cancel did not take the session up with session/resume (%d processes)", len(procs))
		}
	} else if len(procs) != 1 {
		t.Errorf("the agent that answered the cancel was replaced: %d processes", len(procs))
	}
	b.timings.add("send now: answer %v after the click", time.Since(sent).Round(time.Millisecond))
}

// discordResumeAndFork: see TestDiscordSteeringAndSessions.
func discordResumeAndFork(t *testing.T, b *discordBroker, want acp.AgentSessionCapabilities) {
	s := b.s
	s.text("Noted.")
	thread, _ := b.mention(t, "Remember the word PLUM.")
	b.turnText(t, thread, "-# ✅ done")
	procs := b.procs.of(thread)
	var caps struct {
		Result struct {
			AgentCapabilities acp.AgentCapabilities `json:"agentCapabilities"`
		} `json:"result"`
	}
	for _, m := range procs[0].wire.snapshot() {
		if !m.Out && m.Result && strings.Contains(string(m.Raw), `"agentCapabilities"`) {
			if err := json.Unmarshal(m.Raw, &caps); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := caps.Result.AgentCapabilities.Sessions
	if got.CanList() != want.CanList() || got.CanResume() != want.CanResume() || got.CanClose() != want.CanClose() || got.CanFork() != want.CanFork() {
		t.Errorf("initialize's sessionCapabilities: list %v resume %v close %v fork %v; want %+v", got.CanList(), got.CanResume(), got.CanClose(), got.CanFork(), want)
	}
	first := b.sessionOf(t, thread)
	b.interactionResponse(t, b.srv.SlashCommand(thread, threadStarter.ID, "reset", nil))
	s.text("Fresh start.")
	b.say(t, thread, "Hello again.")
	b.await(t, "the second session's answer", func() bool { return strings.Count(joined(b, thread), "-# ✅ done") == 2 })
	second := b.sessionOf(t, thread)
	if first == second {
		t.Fatal("/reset kept the session")
	}

	// An agent may list a session only once it has written it down, a
	// moment after its turn: asked again for a few seconds.
	var list string
	for deadline := time.Now().Add(10 * time.Second); ; {
		list = b.deferredAnswer(t, thread, "sessions", nil, "Continue one here")
		if strings.Contains(list, "`"+second+"`") || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !strings.Contains(list, "as it lists them") || !strings.Contains(list, "`"+first+"`") || !strings.Contains(list, "`"+second+"`") {
		t.Fatalf("/sessions answered %q, want both sessions as the agent lists them", list)
	}
	res := b.deferredAnswer(t, thread, "resume", map[string]any{"session": first}, "resumed")
	if !strings.Contains(res, "resumed session `"+first+"`") || !strings.Contains(res, "(session/resume)") {
		t.Fatalf("/resume answered %q", res)
	}
	s.text("It was PLUM.")
	b.say(t, thread, "Which word did I ask you to remember?")
	b.await(t, "the answer after /resume", func() bool { return strings.Contains(joined(b, thread), "It was PLUM.") })
	if body := s.lastBody(); !strings.Contains(body, "Remember the word PLUM.") {
		t.Errorf("after /resume the model's request does not carry the resumed session's conversation")
	}

	switch {
	case !want.CanFork():
		refusal := b.deferredAnswer(t, thread, "fork", nil, "session/fork")
		if !strings.Contains(refusal, "does not offer session/fork, which is still marked unstable in ACP") {
			t.Errorf("/fork answered %q", refusal)
		}
	case b.s.expect.forksOnlyInPlace:
		// Into the new thread's copy of the workspace the agent cannot,
		// and the thread is told so in words.
		refusal := b.deferredAnswer(t, thread, "fork", nil, "fork")
		if !strings.Contains(refusal, "The agent could not fork this conversation into a new thread: ") {
			t.Errorf("/fork into another directory answered %q", refusal)
		}
		t.Logf("/fork into the new thread's own directory: %s", refusal)
	default:
		discordForkIn(t, b, thread)
	}
}

// discordFork: a thread's /fork where the agent can fork its session,
// every thread working in agent.cwd.
func discordFork(t *testing.T, b *discordBroker) {
	b.s.text("Noted.")
	thread, _ := b.mention(t, "Remember the word PLUM.")
	b.turnText(t, thread, "-# ✅ done")
	discordForkIn(t, b, thread)
}

// discordForkIn forks thread, whose conversation asked to remember
// PLUM: the new thread's agent forks the session, and the model's
// request from there carries the conversation forked.
func discordForkIn(t *testing.T, b *discordBroker, thread string) {
	s := b.s
	forked := b.deferredAnswer(t, thread, "fork", nil, "forked this conversation into")
	m := regexp.MustCompile(`<#(\d+)>`).FindStringSubmatch(forked)
	if m == nil {
		t.Fatalf("/fork answered %q", forked)
	}
	child := m[1]
	b.await(t, "the fork's greeting", func() bool { return strings.Contains(joined(b, child), "🍴 Forked from <#"+thread+">") })
	s.text("Forked: PLUM.")
	b.say(t, child, "And in this fork, which word?")
	b.await(t, "the fork's answer", func() bool { return strings.Contains(joined(b, child), "Forked: PLUM.") })
	if body := s.lastBody(); !strings.Contains(body, "Remember the word PLUM.") || !strings.Contains(body, "And in this fork") {
		t.Errorf("the fork's model request does not carry the conversation it forked")
	}
	b.procs.mu.Lock()
	procs := slices.Clone(b.procs.procs)
	b.procs.mu.Unlock()
	if !slices.ContainsFunc(procs, func(p *agentProc) bool { return !p.sentAt(acp.MethodSessionFork).IsZero() }) {
		t.Errorf("no agent was asked to fork the session")
	}
}

// discordIdleCloseAndResume: see TestDiscordSteeringAndSessions.
func discordIdleCloseAndResume(t *testing.T, b *discordBroker) {
	s := b.s
	s.text("Got it.")
	thread, _ := b.mention(t, "The fruit is KIWI.")
	b.turnText(t, thread, "-# ✅ done")
	first := b.procs.of(thread)[0]
	b.await(t, "the idle agent stopped", func() bool { return !first.alive() })
	if first.sentAt(acp.MethodSessionClose).IsZero() {
		t.Error("the idle agent was not sent session/close before it stopped")
	}
	s.text("KIWI, still.")
	b.say(t, thread, "Which fruit?")
	b.await(t, "the answer after the idle stop", func() bool { return strings.Contains(joined(b, thread), "KIWI, still.") })
	procs := b.procs.of(thread)
	if len(procs) < 2 || procs[1].sentAt(acp.MethodSessionResume).IsZero() || !procs[1].sentAt(acp.MethodSessionLoad).IsZero() {
		t.Errorf("the next agent did not take the session up with session/resume alone (%d processes)", len(procs))
	}
	if body := s.lastBody(); !strings.Contains(body, "The fruit is KIWI.") {
		t.Errorf("after the idle stop the model's request does not carry the session's conversation")
	}
}

// joined is what the bot's messages in thread say, in order.
func joined(b *discordBroker, thread string) string {
	var parts []string
	for _, m := range b.srv.Messages(thread) {
		if m.Author.ID == b.srv.Bot().ID {
			parts = append(parts, m.Content)
		}
	}
	return strings.Join(parts, "\n")
}
