package interop

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/broker"
	"acpbroker/internal/brokertest"
	"acpbroker/pool"
)

// chatAwait bounds every wait on a chat thread: an agent's start plus
// one turn of the SDK example (about five seconds of its own pauses) and
// the platform's pace (Discord's 5 message calls per 5 seconds, Slack's
// chat.update about 50 a minute and about one message a second).
const chatAwait = 45 * time.Second

// cancelShownBound is how soon after a user's cancel the thread must say
// the turn was cancelled: the broker sends session/cancel at once, the
// agents answer within a second (the SDK example at its next one-second
// step), and the final view is posted without waiting for the edit pace.
const cancelShownBound = 5 * time.Second

// frontEnds are the chat platforms TestFrontEnds runs the agents behind:
// each opens a broker serving it, against its fake, in front of one agent.
var frontEnds = []struct {
	name string
	open func(t *testing.T, s *subject) frontEnd
}{
	{"discord", func(t *testing.T, s *subject) frontEnd {
		return newDiscordBroker(t, s, adapter.Config{RestartAfterCancel: s.expect.staleAnswerAfterCancel})
	}},
	{"slack", func(t *testing.T, s *subject) frontEnd {
		return newSlackBroker(t, s, adapter.Config{RestartAfterCancel: s.expect.staleAnswerAfterCancel})
	}},
}

// TestFrontEnds runs each real agent behind each of the broker's chat
// front ends, through the platform's fake (Discord's over its gateway,
// Slack's over Socket Mode), as a user uses it: one broker per platform
// and agent (wired as the broker binary wires one, package broker, with
// the platform's rate limits and the default edit pace), and each
// scenario in a thread of its own, so with a fresh agent process. The
// scenarios' promises are in the doc comments of textAnswer,
// permissionClick, cancelMidTurn and chooseModel; the latencies measured
// are logged per platform and agent at the end.
//
// claude-agent-acp 0.23.1 runs with adapter.Config.RestartAfterCancel
// (agent.restart_after_cancel): after a cancel its session answers each
// prompt with the previous prompt's output (see TestCancelWhileThinking).
func TestFrontEnds(t *testing.T) {
	for _, fe := range frontEnds {
		t.Run(fe.name, func(t *testing.T) {
			for _, sub := range subjects {
				t.Run(sub.name, func(t *testing.T) {
					s := sub.make(t)
					f := fe.open(t, s)
					t.Run("text", func(t *testing.T) { textAnswer(t, f) })
					t.Run("permission", func(t *testing.T) { permissionClick(t, f) })
					t.Run("cancel", func(t *testing.T) { cancelMidTurn(t, f) })
					if s.model {
						t.Run("model", func(t *testing.T) { chooseModel(t, f) })
					}
					t.Logf("%s on %s latencies: %s", s.spec.Name, fe.name, f.base().timings)
				})
			}
		})
	}
}

// frontEnd is a broker serving one chat platform against its fake, as
// the scenarios drive it: what a user does and sees there, each platform
// in its own way. Threads and messages are named by the platform's ids.
type frontEnd interface {
	base() *frontBase
	// mention has the starter mention the bot with prompt in the allowed
	// channel; it returns the thread the message opens and when it was
	// sent.
	mention(t *testing.T, prompt string) (thread string, sent time.Time)
	// say has the starter write in thread; it returns the message's id
	// and when it was sent.
	say(t *testing.T, thread, text string) (string, time.Time)
	// shown are the bot's messages of the turn after the message after
	// ("": the thread's first): all of them, oldest first, and those of
	// its answer (no permission request, no note of a written cancel).
	shown(thread, after string) (all, answer []shownMsg)
	// awaitReaction waits for the bot's status emoji on the starter's
	// message msg in thread ("": the message the thread opened from),
	// and checks the working one is gone from it.
	awaitReaction(t *testing.T, thread, msg, emoji string)
	// allowOnce waits for the permission request of the turn after the
	// message after, with its buttons, has the starter click the one of
	// the agent's allow_once option, and checks the request then says
	// who chose what, without buttons.
	allowOnce(t *testing.T, thread, after string) clicked
	// revisions are the versions the bot's message msg in thread had.
	revisions(thread, msg string) []shownMsg
	// status is the engine's status of thread.
	status(thread string) adapter.ThreadStatus
	// procsOf are the agent processes the pool started for thread.
	procsOf(thread string) []*agentProc
	// openPermissions counts the permission requests the platform's
	// client still holds open.
	openPermissions() int
	// cancelling says how the starter cancels the turn after the message
	// after, and returns the step that does it: for an agent with a
	// model, whose hanging call has shown nothing, a command written in
	// the thread; for the SDK example, on the message that shows it
	// working, which cancelling waits for.
	cancelling(t *testing.T, thread, after string) (how string, cancel func())
	// models are the models the thread's agent is offered under, as the
	// starter is shown them.
	models(t *testing.T, thread string) []string
	// chooseModel has the starter choose the model pick for thread, and
	// waits until the choice is answered.
	chooseModel(t *testing.T, thread, pick string)

	// alsoText, alsoPermission and alsoModel are the checks of a
	// scenario that hold on one platform alone (a no-op on the others).
	alsoText(t *testing.T, thread, prompt string)
	alsoPermission(t *testing.T, thread string, c clicked)
	alsoModel(t *testing.T, thread string)
}

// frontBase is what every front end's broker has.
type frontBase struct {
	s        *subject
	platform string // as chat.platform names it
	broker   *brokertest.InProcess
	channel  string // the allowed channel
	workDir  string // agent.cwd; each thread runs in a directory of its own below
	procs    *procRecorder
	timings  *timingLog
	sandbox  pool.Sandbox
	// toolDone is how the SDK example's approved tool call shows in
	// its answer once done.
	toolDone string
	// waitFor is the fake platform's WaitFor.
	waitFor func(ctx context.Context, cond func() bool) error
}

// await waits until cond holds on the fake platform, failing t after
// chatAwait.
func (b *frontBase) await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), chatAwait)
	defer cancel()
	if err := b.waitFor(ctx, cond); err != nil {
		t.Fatalf("%s: %v (waited %v)", what, err, chatAwait)
	}
}

func (b *frontBase) base() *frontBase { return b }

// frontSettings are the settings every front end's broker runs with,
// more over them.
func frontSettings(s *subject, more ...brokertest.Settings) brokertest.Settings {
	return brokertest.Settings{
		"log.level":           "debug",
		"http.listen":         "",
		"agent.args":          s.spec.Args,
		"agent.sandbox":       "none",
		"agent.start_timeout": startTimeout.String(),
		"agent.exit_grace":    "500ms",
		"pool.max_sessions":   4,
		// The agents answer a cancel within a second; a permission
		// request stays open as long as the test may take to click.
		"turn.timeout":            turnTimeout.String(),
		"turn.cancel_grace":       (cancelBound / 2).String(),
		"turn.permission_timeout": chatAwait.String(),
		"agent.allow_hosts":       allowHosts(s),
	}.With(merged(more))
}

// start opens the broker of w with the platform made by made, its
// agents launched through b.procs in env, sandboxed as interopSandbox
// says, and serves it; cleanup calls closed, which stops it.
func (b *frontBase) start(t *testing.T, w *brokertest.World, env []string, engineCfg adapter.Config, made broker.PlatformFunc, closed func(t *testing.T)) {
	t.Helper()
	b.sandbox = interopSandbox(t, env)
	cfg, err := w.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := broker.Options{
		Version: "interop",
		Pool: func(pc *pool.Config) {
			// The agent's environment is built as above, whatever
			// agent.env would make of its values.
			pc.Sandbox = b.sandbox
			pc.Launch = b.procs.launch
			pc.Profiles[pool.DefaultProfileName].Env = env
		},
		Engine:    func(e *adapter.Config) { e.RestartAfterCancel = engineCfg.RestartAfterCancel },
		Platforms: map[string]broker.PlatformFunc{b.platform: made},
	}
	if b.broker, err = w.OpenConfig(cfg, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closed(t) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.broker.Serve(ctx); err != nil {
		t.Fatal(err)
	}
}

// stop checks the agent reached its model through the broker's proxy and
// stops the broker as the binary does at SIGTERM (no new prompts, turns
// ended, last messages posted, agents stopped).
func (b *frontBase) stop(t *testing.T) {
	throughProxy(t, b.s, b.sandbox, b.broker.Metrics())
	if err := b.broker.Stop(10 * time.Second); err != nil {
		t.Logf("the broker's platforms returned %v", err)
	}
}

// warnings returns the broker's warning and error lines about the agent
// process pid.
func (b *frontBase) warnings(pid int) []string {
	var out []string
	for _, level := range []string{`"level":"warn"`, `"level":"error"`} {
		out = append(out, b.broker.Log.Grep(level, fmt.Sprintf(`"pid":%d,`, pid))...)
	}
	return out
}

// shownMsg is a bot message, or one version of it, as the scenarios
// read it on any platform.
type shownMsg struct {
	id   string
	text string    // as a user reads it
	at   time.Time // when it was posted (a version: made)
}

// awaitEnd waits until the turn that follows the message after ("": the
// thread's first) has ended, and returns it as shown.
func awaitEnd(t *testing.T, f frontEnd, thread, after string) shownTurn {
	t.Helper()
	var ans []shownMsg
	f.base().await(t, "the turn's final footer", func() bool {
		_, ans = f.shown(thread, after)
		return len(ans) > 0 && brokertest.Footer(ans[len(ans)-1].text) != ""
	})
	var st shownTurn
	var parts []string
	for _, m := range ans {
		st.answer = append(st.answer, m.id)
		parts = append(parts, m.text)
	}
	all := strings.Join(parts, "\n")
	st.footer = brokertest.Footer(all)
	st.body = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(all), st.footer))
	turn, _ := f.shown(thread, after)
	for _, m := range turn {
		if st.first.IsZero() || m.at.Before(st.first) {
			st.first = m.at
		}
	}
	for _, m := range ans {
		for _, r := range f.revisions(thread, m.id) {
			if brokertest.Footer(r.text) != "" && (st.end.IsZero() || r.at.Before(st.end)) {
				st.end = r.at
			}
		}
	}
	return st
}

// shownTurn is one turn as its thread shows it.
type shownTurn struct {
	answer []string // the ids of the bot's answer messages, oldest first
	body   string   // their text without the footer line
	footer string   // the final line, e.g. "-# ✅ done in 3s"
	// first is when the turn's first bot message (answer or permission
	// request) was posted, end when the footer appeared.
	first, end time.Time
}

// clicked is a permission request answered with a button.
type clicked struct {
	text    string // the request as first shown
	option  acp.PermissionOption
	request acp.PermissionRequest // as the agent sent it
	shown   time.Time             // the request appeared in the thread
	// answered is how long the platform waited for the broker to take
	// the click (Discord's interaction response, Slack's acknowledgement).
	answered time.Duration
}

// requestOnWire is the last permission request the agent of the thread
// in the directory dir sent, and the index of its allow_once option.
func requestOnWire(t *testing.T, procs *procRecorder, dir string) (acp.PermissionRequest, int) {
	t.Helper()
	var req acp.PermissionRequest
	reqs := procs.permissionRequests(dir)
	if len(reqs) == 0 {
		t.Fatal("a permission request is shown but none is on the agent's wire")
	}
	if err := json.Unmarshal(reqs[len(reqs)-1].Params, &req); err != nil {
		t.Fatalf("permission request params: %v", err)
	}
	idx := slices.IndexFunc(req.Options, func(o acp.PermissionOption) bool { return o.Kind == acp.OptionAllowOnce })
	if idx < 0 {
		t.Fatalf("the agent offered no allow_once option: %+v", req.Options)
	}
	return req, idx
}

// textAnswer: a user mentions the bot with a prompt in an allowed
// channel; the answer appears in the thread of that message (for
// codex-acp and claude-agent-acp ending with the text the model
// streamed, which codex-acp prefixes with its warning about the unknown
// model; for the SDK example its fixed text, streamed over several
// edits), ending with "-# ✅ done in …", and the user's message ends with
// ✅, the working reaction gone. The SDK example's fixed turn always asks
// one permission; the starter allows it. On Discord the thread opens
// from the message, named after the prompt, and the typing indicator
// runs meanwhile.
func textAnswer(t *testing.T, f frontEnd) {
	b := f.base()
	s := b.s
	s.text("Hello", " from", " the fake", " model.")
	const prompt = "Say hello."
	thread, sent := f.mention(t, prompt)
	if !s.model {
		f.allowOnce(t, thread, "")
	}
	st := awaitEnd(t, f, thread, "")
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
		if revs := len(f.revisions(thread, st.answer[0])); revs < 2 {
			t.Errorf("the answer was not streamed: its message has %d revision(s)", revs)
		}
	}
	f.awaitReaction(t, thread, "", "✅")
	f.alsoText(t, thread, prompt)
	revs := 0
	for _, m := range st.answer {
		revs += len(f.revisions(thread, m))
	}
	t.Logf("%s: answer in %d message(s), %d revision(s): %q", s.spec.Name, len(st.answer), revs, st.body+"\n"+st.footer)
	b.timings.add("text: first message %v, footer %v after the prompt", st.first.Sub(sent).Round(time.Millisecond), st.end.Sub(sent).Round(time.Millisecond))
}

// permissionClick: when the agent asks permission for a command, the
// thread shows the request with one button per option; the thread's
// starter clicks the agent's allow_once option, the click is taken
// within the platform's 3 seconds, the buttons give way to who chose
// what, the agent receives that option, no request stays open, and the
// turn ends "-# ✅ done in …". For codex-acp (exec_command with
// require_escalated) and claude-agent-acp (Bash) the request shows the
// command, which really runs in the thread's own directory, its output
// goes back to the model and the model's last words end the answer; the
// SDK example runs nothing and reports its tool call done. On Discord
// the request shows the tool call's input as the agent sent it
// (discordPermissionInput).
func permissionClick(t *testing.T, f frontEnd) {
	b := f.base()
	s := b.s
	const final = "The file is written."
	command := "printf " + b.platform + " > allowed.txt"
	s.command(command, final)
	thread, sent := f.mention(t, "Write allowed.txt.")
	c := f.allowOnce(t, thread, "")
	clickedAt := time.Now()
	st := awaitEnd(t, f, thread, "")
	if !strings.HasPrefix(st.footer, "-# ✅ done in ") {
		t.Errorf("the turn ended with %q, want \"-# ✅ done in …\"; answer %q", st.footer, st.body)
	}
	f.awaitReaction(t, thread, "", "✅")
	if n := f.openPermissions(); n != 0 {
		t.Errorf("%d permission request(s) still open after the turn", n)
	}
	if s.model && !strings.Contains(c.text, command) {
		t.Errorf("the permission request %q does not show the command", c.text)
	}

	procs := f.procsOf(thread)
	if len(procs) != 1 {
		t.Fatalf("%d agent processes for the thread, want 1", len(procs))
	}
	answers := procs[0].permissionAnswers()
	if len(answers) != 1 || !strings.Contains(answers[0], `"optionId":"`+c.option.OptionID+`"`) {
		t.Errorf("permission answers on the wire = %q, want one selecting %q", answers, c.option.OptionID)
	}
	if s.model {
		path := filepath.Join(b.workDir, procs[0].thread, "allowed.txt")
		if got, err := os.ReadFile(path); err != nil || string(got) != b.platform {
			t.Errorf("%s = %q, %v; want the allowed command to have written %q in the thread's directory", path, got, err, b.platform)
		}
		if outs := s.toolOutputs(); len(outs) != 1 || strings.HasPrefix(outs[0], "error: ") {
			t.Errorf("tool output sent back to the model = %q, want one successful result", outs)
		}
		if !strings.HasSuffix(st.body, final) {
			t.Errorf("answer = %q, want it to end with the model's %q", st.body, final)
		}
	} else if !strings.Contains(st.body, b.toolDone) {
		t.Errorf("answer = %q, want the approved tool call shown done (%q)", st.body, b.toolDone)
	}
	t.Logf("%s: permission for %q (%s) with options %+v shown as %q; click taken in %v; answer %q", s.spec.Name,
		c.request.ToolCall.Title, c.request.ToolCall.Kind, c.request.Options, c.text, c.answered.Round(time.Millisecond), st.body+"\n"+st.footer)
	f.alsoPermission(t, thread, c)
	b.timings.add("permission: request shown %v after the prompt, click taken in %v, footer %v after the click",
		c.shown.Sub(sent).Round(time.Millisecond), c.answered.Round(time.Millisecond), st.end.Sub(clickedAt).Round(time.Millisecond))
}

// cancelMidTurn: while the agent works on a message (its model call
// hangs; the SDK example pauses between steps), the starter cancels (as
// frontEnd.cancelling says, on each platform). Within a few seconds the
// answer ends "-# ⏹️ cancelled by Alice …" and the message shows ⏹️;
// session/cancel reaches the agent within a second, after the prompt it
// cancels, and the agent answers that prompt. An agent that answered the
// cancel keeps its process, which answers the next message in the
// thread. claude-agent-acp (run with RestartAfterCancel) gets a fresh
// process that resumes the session with session/resume, which it offers
// (not session/load, which would replay the history), and the next
// message gets its own answer: not empty, not the previous prompt's, and
// none of the session's history; the replaced process is stopped with no
// warning in the broker's log. For the agents with a model the cancelled
// message is the thread's second, so that the history holds an answer.
func cancelMidTurn(t *testing.T, f frontEnd) {
	b := f.base()
	s := b.s
	var thread, after string // the cancelled turn answers the message after ("": the thread's first)
	if s.model {
		s.text("Ready", " when you are.")
		thread, _ = f.mention(t, "Get ready.")
		if st := awaitEnd(t, f, thread, ""); !strings.HasPrefix(st.footer, "-# ✅ done in ") || !strings.HasSuffix(st.body, "Ready when you are.") {
			t.Fatalf("the thread's first message was answered %q", st.body+"\n"+st.footer)
		}
		s.hang()
		after, _ = f.say(t, thread, "Think forever.")
		if err := s.hanging(withTimeout(t.Context(), chatAwait)); err != nil {
			t.Fatalf("the agent never called the model: %v", err)
		}
	} else {
		thread, _ = f.mention(t, "Think forever.")
	}
	how, cancel := f.cancelling(t, thread, after)
	before := f.status(thread)
	if !before.Busy || before.PID == 0 {
		t.Fatalf("thread status while the agent works = %+v, want busy with a pid", before)
	}
	proc := b.procs.byPID(before.PID)
	if proc == nil {
		t.Fatalf("pid %d was not started by the pool", before.PID)
	}

	cancelAt := time.Now()
	cancel()
	st := awaitEnd(t, f, thread, after)
	if !strings.HasPrefix(st.footer, "-# ⏹️ cancelled by Alice after ") {
		t.Errorf("the turn ended with %q, want \"-# ⏹️ cancelled by Alice after …\"", st.footer)
	}
	shown := st.end.Sub(cancelAt)
	if shown > cancelShownBound {
		t.Errorf("the cancel was shown %v after the user's %s, want within %v", shown, how, cancelShownBound)
	}
	f.awaitReaction(t, thread, after, "⏹️")

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
		if got := f.status(thread); got.PID != before.PID || !proc.alive() {
			t.Errorf("after a cancel the agent answered, thread status = %+v (pid %d alive %v), want the same process %d", got, proc.pid, proc.alive(), before.PID)
		}
	}

	s.text("After", " the cancel.")
	next, sent := f.say(t, thread, "Are you there?")
	if !s.model {
		f.allowOnce(t, thread, next)
	}
	nt := awaitEnd(t, f, thread, next)
	f.awaitReaction(t, thread, next, "✅")
	now := f.status(thread)
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
		procs := f.procsOf(thread)
		switch {
		case now.PID == before.PID || !gone:
			t.Errorf("with RestartAfterCancel the cancelled agent (pid %d, gone %v) still serves the thread (pid %d)", before.PID, gone, now.PID)
		case len(procs) != 2 || procs[1].pid != now.PID:
			t.Errorf("%d processes for the thread, want the cancelled one and the one now serving (pid %d)", len(procs), now.PID)
		case procs[1].sentAt(acp.MethodSessionResume).IsZero() || !procs[1].sentAt(acp.MethodSessionLoad).IsZero() || now.SessionID != before.SessionID:
			t.Errorf("the fresh process did not resume session %q with session/resume alone (session now %q)", before.SessionID, now.SessionID)
		}
		t.Run("quiet-restart", func(t *testing.T) { quietRestart(t, b, before.PID) })
	} else if now.PID != before.PID {
		t.Errorf("the next message was answered by pid %d, want the process that answered the cancel (%d)", now.PID, before.PID)
	}
	b.timings.add("cancel: shown %v after the %s, next answer's footer %v after the message", shown.Round(time.Millisecond), how, nt.end.Sub(sent).Round(time.Millisecond))
}

// quietRestart: replacing an agent after a cancel, as
// agent.restart_after_cancel asks, is routine: the broker's log carries
// no warning about stopping that process (a warning asks an operator to
// look at something).
func quietRestart(t *testing.T, b *frontBase, pid int) {
	warns := b.warnings(pid)
	if len(warns) > 0 {
		t.Errorf("the routine kill of the replaced agent (pid %d) logged warnings:\n%s", pid, strings.Join(warns, "\n"))
	}
}

// chooseModel: in a thread, the starter is shown the models the agent
// offers for that thread (on Discord /model's autocomplete, on Slack
// "@app model" as a menu only its writer sees); choosing one other than
// the one the last request used makes the agent's next model request
// carry another "model".
func chooseModel(t *testing.T, f frontEnd) {
	s := f.base().s
	s.text("First.")
	thread, _ := f.mention(t, "Say first.")
	awaitEnd(t, f, thread, "")
	before := s.lastModel()
	values := f.models(t, thread)
	var pick string
	for _, v := range values {
		base, _, _ := strings.Cut(strings.ToLower(v), "[") // sonnet[1m] is sonnet with a longer context
		if v != "default" && !strings.Contains(strings.ToLower(before), base) && !strings.Contains(base, strings.ToLower(before)) {
			pick = v
			break
		}
	}
	if pick == "" {
		t.Fatalf("no model other than %q among %v", before, values)
	}
	t.Logf("%s offers models %v; the last request used %q; choosing %s", s.spec.Name, values, before, pick)
	f.chooseModel(t, thread, pick)
	f.alsoModel(t, thread)
	s.text("Second.")
	next, _ := f.say(t, thread, "Say second.")
	awaitEnd(t, f, thread, next)
	if got := s.lastModel(); got == before || got == "" {
		t.Fatalf("after choosing model %s the model server still got %q (before: %q)", pick, got, before)
	} else {
		t.Logf("%s: model %s; the next request's model is %q (was %q)", s.spec.Name, pick, got, before)
	}
}
