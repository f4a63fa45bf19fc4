package interop

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
)

// cancelShownBound is how soon after a user's cancel the thread must say
// the turn was cancelled: the broker sends session/cancel at once, the
// agents answer within a second (the SDK example at its next one-second
// step), and the final view is posted without waiting for the edit pace.
const cancelShownBound = 5 * time.Second

// TestDiscordFrontEnd runs each real agent behind the broker's Discord
// front end, through the fake Discord, as a user uses it: one broker per
// agent (wired as the broker binary wires one, package broker, with
// Discord's rate limits and the default edit pace), and each scenario in a
// thread of its own, so with a fresh agent process. The scenarios'
// promises are in the doc comments of discordTextAnswer,
// discordPermissionClick and discordCancelMidTurn. The latencies measured
// are logged per agent at the end.
//
// claude-agent-acp 0.23.1 runs with adapter.Config.RestartAfterCancel
// (agent.restart_after_cancel): after a cancel its session answers each
// prompt with the previous prompt's output (see TestCancelWhileThinking).
func TestDiscordFrontEnd(t *testing.T) {
	for _, sub := range subjects {
		t.Run(sub.name, func(t *testing.T) {
			s := sub.make(t)
			b := newDiscordBroker(t, s, adapter.Config{RestartAfterCancel: s.expect.staleAnswerAfterCancel})
			t.Run("text", func(t *testing.T) { discordTextAnswer(t, b) })
			t.Run("permission", func(t *testing.T) { discordPermissionClick(t, b) })
			t.Run("cancel", func(t *testing.T) { discordCancelMidTurn(t, b) })
			if s.model {
				t.Run("model", func(t *testing.T) { discordChooseModel(t, b) })
			}
			t.Logf("%s latencies: %s", s.spec.Name, b.timings)
		})
	}
}

// discordTextAnswer: a user mentions the bot with a prompt in an allowed
// channel; a thread opens from the message, named after the prompt, and
// the agent's answer appears in it (for codex-acp and claude-agent-acp
// ending with the text the model streamed, which codex-acp prefixes with
// its warning about the unknown model; for the SDK example its fixed
// text, streamed over several edits), ending with "-# ✅ done in …"; the
// typing indicator ran meanwhile, and the user's message ends with ✅.
// The SDK example's fixed turn always asks one permission; the starter
// allows it.
func discordTextAnswer(t *testing.T, b *discordBroker) {
	s := b.s
	s.text("Hello", " from", " the fake", " model.")
	thread, sent := b.mention(t, "Say hello.")
	ch, _ := b.srv.Channel(thread)
	if ch.ParentID != b.channel || ch.Name != "Say hello." {
		t.Errorf("thread = %+v, want one in the allowed channel named after the prompt", ch)
	}
	if !s.model {
		b.allowOnce(t, thread, "")
	}
	st := b.awaitEnd(t, thread, "")
	if !strings.HasPrefix(st.footer, "-# ✅ done in ") {
		t.Errorf("the turn ended with %q, want \"-# ✅ done in …\"; answer %q", st.footer, st.body)
	}
	if s.model {
		if !strings.HasSuffix(st.body, "Hello from the fake model.") {
			t.Errorf("answer = %q, want the model's text", st.body)
		}
	} else {
		for _, want := range []string{"I'll help you with that.", "Now I understand the project structure.", "Perfect! I've successfully updated the configuration."} {
			if !strings.Contains(st.body, want) {
				t.Errorf("answer = %q, want the example agent's text %q in it", st.body, want)
			}
		}
		if revs := b.srv.Revisions(thread, st.answer[0].ID); len(revs) < 2 {
			t.Errorf("the answer was not streamed: its message has %d revision(s)", len(revs))
		}
	}
	b.awaitReaction(t, b.channel, thread, "✅")
	if b.srv.Typing(thread) == 0 {
		t.Error("no typing indicator in the thread while the agent worked")
	}
	revs := 0
	for _, m := range st.answer {
		revs += len(b.srv.Revisions(thread, m.ID))
	}
	t.Logf("%s: answer in %d message(s), %d revision(s): %q", s.spec.Name, len(st.answer), revs, st.body+"\n"+st.footer)
	b.timings.add("text: first message %v, footer %v after the prompt", st.first.Sub(sent).Round(time.Millisecond), st.end.Sub(sent).Round(time.Millisecond))
}

// discordPermissionClick: when the agent asks permission for a command,
// the thread shows the request with one button per option; the thread's
// starter clicks the agent's allow_once option, the click is answered
// within Discord's 3 seconds (the buttons give way to who chose what), the
// agent receives that option, and the turn ends "-# ✅ done in …". For
// codex-acp (exec_command with require_escalated) and claude-agent-acp
// (Bash) the command really runs in the thread's own directory, its output
// goes back to the model and the model's last words end the answer; the
// SDK example runs nothing and reports its tool call done.
func discordPermissionClick(t *testing.T, b *discordBroker) {
	s := b.s
	const final = "The file is written."
	s.command("printf discord > allowed.txt", final)
	thread, sent := b.mention(t, "Write allowed.txt.")
	c := b.allowOnce(t, thread, "")
	clickedAt := time.Now()
	st := b.awaitEnd(t, thread, "")
	if !strings.HasPrefix(st.footer, "-# ✅ done in ") {
		t.Errorf("the turn ended with %q, want \"-# ✅ done in …\"; answer %q", st.footer, st.body)
	}
	b.awaitReaction(t, b.channel, thread, "✅")
	if n := b.client.Stats().OpenPermissions; n != 0 {
		t.Errorf("%d permission request(s) still open after the turn", n)
	}
	if s.model && !strings.Contains(c.msg.Content, "printf discord > allowed.txt") {
		t.Errorf("the permission request %q does not show the command", c.msg.Content)
	}

	procs := b.procs.of(thread)
	if len(procs) != 1 {
		t.Fatalf("%d agent processes for the thread, want 1", len(procs))
	}
	answers := procs[0].permissionAnswers()
	if len(answers) != 1 || !strings.Contains(answers[0], `"optionId":"`+c.option.OptionID+`"`) {
		t.Errorf("permission answers on the wire = %q, want one selecting %q", answers, c.option.OptionID)
	}
	if s.model {
		path := filepath.Join(b.workDir, thread, "allowed.txt")
		if got, err := os.ReadFile(path); err != nil || string(got) != "discord" {
			t.Errorf("%s = %q, %v; want the allowed command to have written \"discord\" in the thread's directory", path, got, err)
		}
		if outs := s.toolOutputs(); len(outs) != 1 || strings.HasPrefix(outs[0], "error: ") {
			t.Errorf("tool output sent back to the model = %q, want one successful result", outs)
		}
		if !strings.HasSuffix(st.body, final) {
			t.Errorf("answer = %q, want it to end with the model's %q", st.body, final)
		}
	} else if !strings.Contains(st.body, "✅ `Modifying critical configuration file` done") {
		t.Errorf("answer = %q, want the approved tool call shown done", st.body)
	}
	t.Logf("%s: permission for %q (%s) with options %+v shown as %q; click answered in %v: %q; answer %q", s.spec.Name,
		c.request.ToolCall.Title, c.request.ToolCall.Kind, c.request.Options, c.msg.Content, c.response.Latency.Round(time.Millisecond), c.response.Content, st.body+"\n"+st.footer)
	t.Run("input-as-sent", func(t *testing.T) { discordPermissionInput(t, b, thread, c) })
	b.timings.add("permission: request shown %v after the prompt, click answered in %v, footer %v after the click",
		c.shown.Sub(sent).Round(time.Millisecond), c.response.Latency.Round(time.Millisecond), st.end.Sub(clickedAt).Round(time.Millisecond))
}

// discordCancelMidTurn: while the agent works on a message (its model
// call hangs; the SDK example pauses between steps), the starter cancels:
// with /cancel in the thread for the agents with a model (answered
// publicly within 3 seconds), with a 🛑 reaction on the answer for the SDK
// example. Within a few seconds the answer ends "-# ⏹️ cancelled by Alice
// …" and the message shows ⏹️. An agent that answered the cancel keeps its
// process, which answers the next message in the thread.
// claude-agent-acp (run with RestartAfterCancel) gets a fresh process that
// resumes the session with session/resume, which it offers (not
// session/load, which would replay the history), and the next message
// gets its own answer: not empty, not the previous prompt's, and none of
// the session's history. For the agents with a model the cancelled
// message is the thread's second, so that the history holds an answer.
func discordCancelMidTurn(t *testing.T, b *discordBroker) {
	s := b.s
	var thread, after string // the cancelled turn answers the message after ("": the thread's first)
	if s.model {
		s.text("Ready", " when you are.")
		thread, _ = b.mention(t, "Get ready.")
		if st := b.awaitEnd(t, thread, ""); !strings.HasPrefix(st.footer, "-# ✅ done in ") || !strings.HasSuffix(st.body, "Ready when you are.") {
			t.Fatalf("the thread's first message was answered %q", st.body+"\n"+st.footer)
		}
		s.hang()
		after, _ = b.say(t, thread, "Think forever.")
	} else {
		thread, _ = b.mention(t, "Think forever.")
	}
	userChannel, userMsg := thread, after // where the cancelled message is
	if after == "" {
		userChannel, userMsg = b.channel, thread
	}
	var working string // a bot message shown while the agent works
	if s.model {
		if err := s.hanging(withTimeout(t.Context(), discordAwait)); err != nil {
			t.Fatalf("the agent never called the model: %v", err)
		}
	} else {
		b.await(t, "the agent's first words", func() bool {
			for _, m := range b.turnMessages(thread, after) {
				if strings.Contains(m.Content, "I'll help you with that.") {
					working = m.ID
					return true
				}
			}
			return false
		})
	}
	before := b.engine.Status(thread)
	if !before.Busy || before.PID == 0 {
		t.Fatalf("thread status while the agent works = %+v, want busy with a pid", before)
	}
	proc := b.procs.byPID(before.PID)
	if proc == nil {
		t.Fatalf("pid %d was not started by the pool", before.PID)
	}

	cancelAt := time.Now()
	how := "🛑 reaction"
	if s.model {
		how = "/cancel"
		r := b.interactionResponse(t, b.srv.SlashCommand(thread, threadStarter.ID, "cancel", nil))
		if r.Ephemeral() || !strings.Contains(r.Content, "<@"+threadStarter.ID+"> cancelled the current turn") {
			t.Errorf("/cancel answered %+v, want a public note of who cancelled", r)
		}
	} else {
		b.srv.AddReaction(thread, working, threadStarter.ID, "🛑")
	}
	st := b.awaitEnd(t, thread, after)
	if !strings.HasPrefix(st.footer, "-# ⏹️ cancelled by Alice after ") {
		t.Errorf("the turn ended with %q, want \"-# ⏹️ cancelled by Alice after …\"", st.footer)
	}
	shown := st.end.Sub(cancelAt)
	if shown > cancelShownBound {
		t.Errorf("the cancel was shown %v after the user's %s, want within %v", shown, how, cancelShownBound)
	}
	b.awaitReaction(t, userChannel, userMsg, "⏹️")

	cancelSent := proc.sentAt(acp.MethodSessionCancel)
	prompts := proc.prompts()
	if cancelSent.IsZero() || len(prompts) == 0 || prompts[len(prompts)-1].sent.After(cancelSent) {
		t.Fatalf("on the wire: session/cancel at %v, prompts %+v; want the last prompt, then session/cancel", cancelSent, prompts)
	}
	// The user's cancel reaches the agent within a second.
	if d := cancelSent.Sub(cancelAt); d > time.Second {
		t.Errorf("session/cancel reached the agent %v after the user's %s, want within 1s", d.Round(time.Millisecond), how)
	}
	cancelled := prompts[len(prompts)-1]
	answeredIn := "never"
	if !cancelled.answered.IsZero() {
		answeredIn = cancelled.answered.Sub(cancelSent).Round(time.Millisecond).String()
	}
	t.Logf("%s: %s; session/cancel on the wire %v after it; the agent answered the prompt %q %s after session/cancel; the thread said %q %v after the %s",
		s.spec.Name, how, cancelSent.Sub(cancelAt).Round(time.Millisecond), cancelled.stop, answeredIn, st.footer, shown.Round(time.Millisecond), how)
	if cancelled.answered.IsZero() {
		t.Errorf("the agent never answered the cancelled prompt (stop %q)", cancelled.stop)
	}

	restart := s.expect.staleAnswerAfterCancel
	if !restart {
		if got := b.engine.Status(thread); got.PID != before.PID || !proc.alive() {
			t.Errorf("after a cancel the agent answered, thread status = %+v (pid %d alive %v), want the same process %d", got, proc.pid, proc.alive(), before.PID)
		}
	}

	s.text("After", " the cancel.")
	next, sent := b.say(t, thread, "Are you there?")
	if !s.model {
		b.allowOnce(t, thread, next)
	}
	nt := b.awaitEnd(t, thread, next)
	b.awaitReaction(t, thread, next, "✅")
	now := b.engine.Status(thread)
	t.Logf("%s: next message answered %q after %v; pid %d then %d, session %q then %q",
		s.spec.Name, nt.body+"\n"+nt.footer, nt.end.Sub(sent).Round(time.Millisecond), before.PID, now.PID, before.SessionID, now.SessionID)
	if !strings.HasPrefix(nt.footer, "-# ✅ done in ") {
		t.Errorf("the next message's turn ended with %q, want \"-# ✅ done in …\"", nt.footer)
	}
	switch {
	case !s.model:
		if !strings.Contains(nt.body, "Perfect! I've successfully updated the configuration.") {
			t.Errorf("next answer = %q, want the example agent's full turn", nt.body)
		}
	case restart:
		if withoutNotices(nt.body) != "After the cancel." {
			t.Errorf("next answer = %q, want exactly its own answer %q", nt.body, "After the cancel.")
		}
	default:
		if !strings.HasSuffix(nt.body, "After the cancel.") || strings.Contains(nt.body, "Ready when you are.") {
			t.Errorf("next answer = %q, want it to end with the model's %q", nt.body, "After the cancel.")
		}
	}
	if restart {
		gone := pollUntil(withTimeout(t.Context(), 5*time.Second), 20*time.Millisecond, func() bool { return !proc.alive() })
		procs := b.procs.of(thread)
		switch {
		case now.PID == before.PID || !gone:
			t.Errorf("with RestartAfterCancel the cancelled agent (pid %d, gone %v) still serves the thread (pid %d)", before.PID, gone, now.PID)
		case len(procs) != 2 || procs[1].pid != now.PID:
			t.Errorf("%d processes for the thread, want the cancelled one and the one now serving (pid %d)", len(procs), now.PID)
		case procs[1].sentAt(acp.MethodSessionResume).IsZero() || !procs[1].sentAt(acp.MethodSessionLoad).IsZero() || now.SessionID != before.SessionID:
			t.Errorf("the fresh process did not resume session %q with session/resume alone (session now %q)", before.SessionID, now.SessionID)
		}
		t.Run("quiet-restart", func(t *testing.T) { discordQuietRestart(t, b, before.PID) })
	} else if now.PID != before.PID {
		t.Errorf("the next message was answered by pid %d, want the process that answered the cancel (%d)", now.PID, before.PID)
	}
	b.timings.add("cancel: shown %v after the %s, next answer's footer %v after the message", shown.Round(time.Millisecond), how, nt.end.Sub(sent).Round(time.Millisecond))
}

// discordPermissionInput: the permission request shows the tool call's
// input with the characters the agent wrote, so that the person deciding
// reads the real command: its >, < and & appear as such, not as the
// \u003e, \u003c and \u0026 escapes of Go's encoding/json. For codex-acp
// and claude-agent-acp the command itself, "printf discord >
// allowed.txt", is in the input shown.
func discordPermissionInput(t *testing.T, b *discordBroker, thread string, c clicked) {
	reqs := b.procs.permissionRequests(thread)
	var sent struct {
		Params struct {
			ToolCall struct {
				RawInput json.RawMessage `json:"rawInput"`
			} `json:"toolCall"`
		} `json:"params"`
	}
	if len(reqs) == 0 || json.Unmarshal(reqs[len(reqs)-1].Raw, &sent) != nil {
		t.Fatal("no permission request on the wire")
	}
	agentInput := string(sent.Params.ToolCall.RawInput)
	_, block, ok := strings.Cut(c.msg.Content, "```\n")
	block, _, _ = strings.Cut(block, "\n```")
	if !ok || block == "" {
		t.Fatalf("the permission request %q shows no input; the agent sent %s", c.msg.Content, agentInput)
	}
	var wrong []string
	for _, esc := range []string{`\u003e`, `\u003c`, `\u0026`} {
		if strings.Contains(block, esc) && !strings.Contains(agentInput, esc) {
			wrong = append(wrong, esc)
		}
	}
	if b.s.model && !strings.Contains(block, "printf discord > allowed.txt") {
		wrong = append(wrong, "the command missing")
	}
	if len(wrong) > 0 {
		t.Errorf("the permission request shows the tool call's input re-encoded (%s), not as the agent sent it\nagent sent: %s\nthread shows: %s", strings.Join(wrong, ", "), agentInput, block)
	}
}

// discordQuietRestart: replacing an agent after a cancel, as
// agent.restart_after_cancel asks, is routine: the broker's log carries
// no warning about stopping that process (a warning asks an operator to
// look at something).
func discordQuietRestart(t *testing.T, b *discordBroker, pid int) {
	warns := b.warnings(pid)
	if len(warns) > 0 {
		t.Errorf("the routine kill of the replaced agent (pid %d) logged warnings:\n%s", pid, strings.Join(warns, "\n"))
	}
}

// discordChooseModel: in a thread, /model suggests the models the agent
// offers for that thread (autocomplete); choosing one other than the
// one the last request used makes the agent's next model request carry
// another "model".
func discordChooseModel(t *testing.T, b *discordBroker) {
	s := b.s
	s.text("First.")
	thread, _ := b.mention(t, "Say first.")
	b.awaitEnd(t, thread, "")
	before := s.lastModel()
	id := b.srv.Autocomplete(thread, threadStarter.ID, "model", map[string]any{"value": ""}, "value")
	b.interactionResponse(t, id)
	choices, ok := b.srv.AutocompleteChoices(id)
	if !ok || len(choices) < 2 {
		t.Fatalf("/model suggests %+v; want the agent's models", choices)
	}
	var names []string
	for _, c := range choices {
		names = append(names, fmt.Sprint(c.Value))
	}
	t.Logf("%s offers models %v; the last request used %q", s.spec.Name, names, before)
	var pick string
	for _, c := range choices {
		v := fmt.Sprint(c.Value)
		base, _, _ := strings.Cut(strings.ToLower(v), "[") // sonnet[1m] is sonnet with a longer context
		if v != "default" && !strings.Contains(strings.ToLower(before), base) && !strings.Contains(base, strings.ToLower(before)) {
			pick = v
			break
		}
	}
	if pick == "" {
		t.Fatalf("no model other than %q among %v", before, names)
	}
	set := b.srv.SlashCommand(thread, threadStarter.ID, "model", map[string]any{"value": pick})
	b.interactionResponse(t, set)
	var answer string
	b.await(t, "the agent's answer to the choice", func() bool {
		in, ok := b.srv.Interaction(set)
		if !ok || in.OriginalMessageID == "" {
			return false
		}
		m, ok := b.srv.Message(thread, in.OriginalMessageID)
		answer = m.Content
		return ok && answer != "" && !strings.Contains(answer, "thinking")
	})
	t.Logf("/model %s answered %q", pick, answer)
	// /agent lists the agent's own commands (its available_commands_update).
	// claude-agent-acp sends them with the session; codex-acp from a task
	// of its own, at times well after the first turn, so only claude's
	// are required here.
	list := b.interactionResponse(t, b.srv.SlashCommand(thread, threadStarter.ID, "agent", nil))
	if s.anthropic != nil && !strings.Contains(list.Content, "/init") {
		t.Errorf("/agent lists %q; want claude-agent-acp's commands (/init among them)", list.Content)
	}
	t.Logf("%s: /agent lists %q", s.spec.Name, excerptOf(list.Content, 300))
	if s.anthropic != nil {
		// claude-agent-acp's modes: plan mode is one.
		mode := b.srv.SlashCommand(thread, threadStarter.ID, "mode", map[string]any{"value": "plan"})
		b.interactionResponse(t, mode)
		b.await(t, "the agent's answer to /mode plan", func() bool {
			in, ok := b.srv.Interaction(mode)
			m, found := b.srv.Message(thread, in.OriginalMessageID)
			return ok && found && strings.Contains(m.Content, "Plan Mode")
		})
	}
	s.text("Second.")
	after, _ := b.say(t, thread, "Say second.")
	b.awaitEnd(t, thread, after)
	if got := s.lastModel(); got == before || got == "" {
		t.Fatalf("after /model %s the model server still got %q (before: %q)", pick, got, before)
	} else {
		t.Logf("%s: /model %s; the next request's model is %q (was %q)", s.spec.Name, pick, got, before)
	}
}

func excerptOf(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
