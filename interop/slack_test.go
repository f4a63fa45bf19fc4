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
	"acpbroker/chat/slack"
	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakeslack"
	"acpbroker/pool"
)

// slackAwait bounds every wait on a Slack thread: an agent's start plus
// one turn of the SDK example (about five seconds of its own pauses) and
// Slack's pace (chat.update about 50 a minute, a channel's messages
// about one a second).
const slackAwait = 45 * time.Second

// slackAckDeadline is Slack's: an envelope not acknowledged within it
// is sent again (an event) or fails for the user (a click).
const slackAckDeadline = 3 * time.Second

// TestSlackFrontEnd runs each real agent behind the broker's Slack front
// end, through the fake Slack over Socket Mode, as a user uses it: one
// broker per agent (wired as the broker binary wires one, package
// broker, with Slack's rate limits and the default edit pace), each
// scenario in a thread of its own, so with a fresh agent process. The
// promises are in the doc comments of slackTextAnswer,
// slackPermissionClick, slackCancelMidTurn and slackChooseModel; the
// latencies measured are logged per agent at the end.
func TestSlackFrontEnd(t *testing.T) {
	for _, sub := range subjects {
		t.Run(sub.name, func(t *testing.T) {
			s := sub.make(t)
			b := newSlackBroker(t, s, adapter.Config{RestartAfterCancel: s.expect.staleAnswerAfterCancel})
			t.Run("text", func(t *testing.T) { slackTextAnswer(t, b) })
			t.Run("permission", func(t *testing.T) { slackPermissionClick(t, b) })
			t.Run("cancel", func(t *testing.T) { slackCancelMidTurn(t, b) })
			if s.model {
				t.Run("model", func(t *testing.T) { slackChooseModel(t, b) })
			}
			t.Logf("%s latencies: %s", s.spec.Name, b.timings)
		})
	}
}

// slackTextAnswer: a user mentions the app with a prompt in an allowed
// channel; the answer streams into a thread of that message (for
// codex-acp and claude-agent-acp ending with the text the model
// streamed; for the SDK example its fixed text, over several edits),
// ending with the small print "✅ done in …"; the user's message shows
// ⚙️ meanwhile and ✅ at the end. The SDK example's fixed turn always
// asks one permission; the starter allows it.
func slackTextAnswer(t *testing.T, b *slackBroker) {
	s := b.s
	s.text("Hello", " from", " the fake", " model.")
	thread, sent := b.mention(t, "Say hello.")
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
		if revs := b.srv.Revisions(b.channel, st.answer[0].TS); len(revs) < 2 {
			t.Errorf("the answer was not streamed: its message has %d revision(s)", len(revs))
		}
	}
	b.awaitReaction(t, thread, "✅")
	revs := 0
	for _, m := range st.answer {
		revs += len(b.srv.Revisions(b.channel, m.TS))
	}
	t.Logf("%s: answer in %d message(s), %d revision(s): %q", s.spec.Name, len(st.answer), revs, st.body+"\n"+st.footer)
	b.timings.add("text: first message %v, footer %v after the prompt", st.first.Sub(sent).Round(time.Millisecond), st.end.Sub(sent).Round(time.Millisecond))
}

// slackPermissionClick: when the agent asks permission for a command,
// the thread shows the request with one button per option; the thread's
// starter clicks the agent's allow_once option, the click is
// acknowledged within Slack's 3 seconds, the buttons give way to who
// chose what, the agent receives that option, and the turn ends "✅ done
// in …". For codex-acp and claude-agent-acp the command really runs in
// the thread's own directory and the model's last words end the answer;
// the SDK example runs nothing and reports its tool call done.
func slackPermissionClick(t *testing.T, b *slackBroker) {
	s := b.s
	const final = "The file is written."
	s.command("printf slack > allowed.txt", final)
	thread, sent := b.mention(t, "Write allowed.txt.")
	c := b.allowOnce(t, thread, "")
	clickedAt := time.Now()
	st := b.awaitEnd(t, thread, "")
	if !strings.HasPrefix(st.footer, "-# ✅ done in ") {
		t.Errorf("the turn ended with %q, want \"-# ✅ done in …\"; answer %q", st.footer, st.body)
	}
	b.awaitReaction(t, thread, "✅")
	if n := b.client.Stats().OpenPermissions; n != 0 {
		t.Errorf("%d permission request(s) still open after the turn", n)
	}
	if s.model && !strings.Contains(c.text, "printf slack > allowed.txt") {
		t.Errorf("the permission request %q does not show the command", c.text)
	}
	procs := b.procsOf(thread)
	if len(procs) != 1 {
		t.Fatalf("%d agent processes for the thread, want 1", len(procs))
	}
	answers := procs[0].permissionAnswers()
	if len(answers) != 1 || !strings.Contains(answers[0], `"optionId":"`+c.option.OptionID+`"`) {
		t.Errorf("permission answers on the wire = %q, want one selecting %q", answers, c.option.OptionID)
	}
	if s.model {
		path := filepath.Join(b.workDir, procs[0].thread, "allowed.txt")
		if got, err := os.ReadFile(path); err != nil || string(got) != "slack" {
			t.Errorf("%s = %q, %v; want the allowed command to have written \"slack\" in the thread's directory", path, got, err)
		}
		if outs := s.toolOutputs(); len(outs) != 1 || strings.HasPrefix(outs[0], "error: ") {
			t.Errorf("tool output sent back to the model = %q, want one successful result", outs)
		}
		if !strings.HasSuffix(st.body, final) {
			t.Errorf("answer = %q, want it to end with the model's %q", st.body, final)
		}
	} else if !strings.Contains(st.body, "Modifying critical configuration file") {
		t.Errorf("answer = %q, want the approved tool call shown", st.body)
	}
	t.Logf("%s: permission for %q (%s) shown as %q; click acknowledged in %v; answer %q", s.spec.Name,
		c.request.ToolCall.Title, c.request.ToolCall.Kind, c.text, c.acked.Round(time.Millisecond), st.body+"\n"+st.footer)
	b.timings.add("permission: request shown %v after the prompt, click acknowledged in %v, footer %v after the click",
		c.shown.Sub(sent).Round(time.Millisecond), c.acked.Round(time.Millisecond), st.end.Sub(clickedAt).Round(time.Millisecond))
}

// slackCancelMidTurn: while the agent works on a message (its model call
// hangs; the SDK example pauses between steps), the starter cancels:
// with "@app cancel" written in the thread for the agents with a model
// (whose hanging call has shown nothing to carry a button), with the
// Cancel button on the running answer for the SDK example. Within a
// few seconds the answer ends "⏹️ cancelled by Alice …" and the message
// shows ⏹️; session/cancel reaches the agent within a second. An agent
// that answered the cancel keeps its process, which answers the next
// message; claude-agent-acp (run with RestartAfterCancel) gets a fresh
// process that resumes the session, and the next message gets exactly
// its own answer.
func slackCancelMidTurn(t *testing.T, b *slackBroker) {
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
		if err := s.hanging(withTimeout(t.Context(), slackAwait)); err != nil {
			t.Fatalf("the agent never called the model: %v", err)
		}
	} else {
		thread, _ = b.mention(t, "Think forever.")
	}
	userMsg := thread
	if after != "" {
		userMsg = after
	}
	var working fakeslack.Message // the SDK example's running answer, with its Cancel button
	if !s.model {
		b.await(t, "the running answer with its Cancel button", func() bool {
			for _, m := range b.turnMessages(thread, after) {
				if _, ok := brokertest.SlackButton(m.Blocks, "Cancel"); ok && strings.Contains(brokertest.SlackText(m.Blocks, m.Text), "I'll help you with that.") {
					working = m
					return true
				}
			}
			return false
		})
	}
	before := b.engine().Status(b.id(thread))
	if !before.Busy || before.PID == 0 {
		t.Fatalf("thread status while the agent works = %+v, want busy with a pid", before)
	}
	proc := b.procs.byPID(before.PID)
	if proc == nil {
		t.Fatalf("pid %d was not started by the pool", before.PID)
	}

	// A model agent whose call hangs has said nothing yet: no message
	// carries a Cancel button, and the command is written.
	cancelAt := time.Now()
	how := "Cancel button"
	if s.model {
		how = "@app cancel"
		b.say(t, thread, b.srv.Bot().Mention()+" cancel")
	} else {
		id, _ := brokertest.SlackButton(working.Blocks, "Cancel")
		b.acked(t, b.srv.ClickButton(b.channel, working.TS, b.alice.ID, id))
	}
	st := b.awaitEnd(t, thread, after)
	if !strings.HasPrefix(st.footer, "-# ⏹️ cancelled by Alice after ") {
		t.Errorf("the turn ended with %q, want \"-# ⏹️ cancelled by Alice after …\"", st.footer)
	}
	shown := st.end.Sub(cancelAt)
	if shown > cancelShownBound {
		t.Errorf("the cancel was shown %v after the user's %s, want within %v", shown, how, cancelShownBound)
	}
	b.awaitReaction(t, userMsg, "⏹️")
	cancelSent := proc.sentAt(acp.MethodSessionCancel)
	if cancelSent.IsZero() {
		t.Fatal("no session/cancel on the wire")
	}
	if d := cancelSent.Sub(cancelAt); d > time.Second {
		t.Errorf("session/cancel reached the agent %v after the user's %s, want within 1s", d.Round(time.Millisecond), how)
	}
	restart := s.expect.staleAnswerAfterCancel
	if !restart {
		if got := b.engine().Status(b.id(thread)); got.PID != before.PID || !proc.alive() {
			t.Errorf("after a cancel the agent answered, thread status = %+v (alive %v), want the same process %d", got, proc.alive(), before.PID)
		}
	}

	s.text("After", " the cancel.")
	next, sent := b.say(t, thread, "Are you there?")
	if !s.model {
		b.allowOnce(t, thread, next)
	}
	nt := b.awaitEnd(t, thread, next)
	b.awaitReaction(t, next, "✅")
	now := b.engine().Status(b.id(thread))
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
		if now.PID == before.PID || now.SessionID != before.SessionID {
			t.Errorf("with RestartAfterCancel: pid %d then %d, session %q then %q; want a fresh process resuming the session", before.PID, now.PID, before.SessionID, now.SessionID)
		}
	default:
		if !strings.HasSuffix(nt.body, "After the cancel.") || strings.Contains(nt.body, "Ready when you are.") {
			t.Errorf("next answer = %q, want it to end with the model's %q", nt.body, "After the cancel.")
		}
		if now.PID != before.PID {
			t.Errorf("the next message was answered by pid %d, want the process that answered the cancel (%d)", now.PID, before.PID)
		}
	}
	t.Logf("%s: %s; session/cancel on the wire %v after it; the thread said %q %v after it; next answer %q",
		s.spec.Name, how, cancelSent.Sub(cancelAt).Round(time.Millisecond), st.footer, shown.Round(time.Millisecond), nt.body)
	b.timings.add("cancel: shown %v after the %s, next answer's footer %v after the message", shown.Round(time.Millisecond), how, nt.end.Sub(sent).Round(time.Millisecond))
}

// slackChooseModel: in a thread, "@app model" shows its writer alone the
// models the agent offers, as a menu; "@app model NAME" with another
// than the one the last request used makes the agent's next model
// request carry it.
func slackChooseModel(t *testing.T, b *slackBroker) {
	s := b.s
	s.text("First.")
	thread, _ := b.mention(t, "Say first.")
	b.awaitEnd(t, thread, "")
	before := s.lastModel()
	skip := len(b.srv.Ephemerals(b.alice.ID))
	b.srv.PostMessage(b.channel, b.alice.ID, b.srv.Bot().Mention()+" model", fakeslack.InThread(thread))
	var values []string
	b.await(t, "the models offered", func() bool {
		es := b.srv.Ephemerals(b.alice.ID)
		for _, e := range es[min(skip, len(es)):] {
			values = menuValues(e.Blocks)
			if len(values) >= 2 {
				return true
			}
		}
		return false
	})
	var pick string
	for _, v := range values {
		base, _, _ := strings.Cut(strings.ToLower(v), "[")
		if v != "default" && !strings.Contains(strings.ToLower(before), base) && !strings.Contains(base, strings.ToLower(before)) {
			pick = v
			break
		}
	}
	if pick == "" {
		t.Fatalf("no model other than %q among %v", before, values)
	}
	t.Logf("%s offers models %v; the last request used %q; choosing %s", s.spec.Name, values, before, pick)
	set, _ := b.say(t, thread, b.srv.Bot().Mention()+" model "+pick)
	b.await(t, "the choice acknowledged", func() bool {
		for _, m := range b.turnMessages(thread, set) {
			if strings.Contains(brokertest.SlackText(m.Blocks, m.Text), pick) {
				return true
			}
		}
		for _, e := range b.srv.Ephemerals(b.alice.ID)[skip:] {
			if strings.Contains(brokertest.SlackText(e.Blocks, e.Text), pick) && e.Posted.After(time.Now().Add(-slackAwait)) {
				return true
			}
		}
		return false
	})
	s.text("Second.")
	next, _ := b.say(t, thread, "Say second.")
	b.awaitEnd(t, thread, next)
	if got := s.lastModel(); got == before || got == "" {
		t.Fatalf("after \"@app model %s\" the model server still got %q (before: %q)", pick, got, before)
	} else {
		t.Logf("%s: model %s; the next request's model is %q (was %q)", s.spec.Name, pick, got, before)
	}
}

// menuValues are the values of the static menus' options in blocks.
func menuValues(blocks []json.RawMessage) []string {
	var out []string
	for _, raw := range blocks {
		var b struct {
			Type      string `json:"type"`
			Accessory *struct {
				Options []struct {
					Value string `json:"value"`
				} `json:"options"`
			} `json:"accessory"`
			Elements []struct {
				Options []struct {
					Value string `json:"value"`
				} `json:"options"`
			} `json:"elements"`
		}
		json.Unmarshal(raw, &b)
		if b.Accessory != nil {
			for _, o := range b.Accessory.Options {
				out = append(out, o.Value)
			}
		}
		for _, e := range b.Elements {
			for _, o := range e.Options {
				out = append(out, o.Value)
			}
		}
	}
	return out
}

// slackBroker is a broker serving Slack, wired as the broker binary
// wires one (package broker, through brokertest.World.OpenConfig, with
// Slack's rate limits and the default edit pace), against a fake Slack
// over Socket Mode, in front of one real agent.
type slackBroker struct {
	s       *subject
	srv     *fakeslack.Server
	broker  *brokertest.InProcess
	client  *slack.Client
	channel string
	alice   fakeslack.User
	workDir string
	procs   *procRecorder
	timings *timingLog
	sandbox pool.Sandbox
}

// newSlackBroker starts a fake Slack and the broker in front of s's
// agent; cleanup stops the broker as the binary does at SIGTERM, and
// checks what it asked of Slack.
func newSlackBroker(t *testing.T, s *subject, engineCfg adapter.Config) *slackBroker {
	t.Helper()
	env, err := agentEnv(s.spec.Env)
	if err != nil {
		t.Fatal(err)
	}
	w := brokertest.NewWorld(t, brokertest.Binaries{Agent: s.spec.Command}, brokertest.Options{
		Slack: &fakeslack.Options{WaitTimeout: slackAwait},
		Conf: brokertest.Settings{
			"chat.platform":           "slack",
			"log.level":               "debug",
			"http.listen":             "",
			"agent.args":              s.spec.Args,
			"agent.sandbox":           "none",
			"agent.start_timeout":     startTimeout.String(),
			"agent.exit_grace":        "500ms",
			"pool.max_sessions":       4,
			"turn.timeout":            turnTimeout.String(),
			"turn.cancel_grace":       (cancelBound / 2).String(),
			"turn.permission_timeout": slackAwait.String(),
			"agent.allow_hosts":       allowHosts(s),
		},
		LogTail: 512 << 10,
	})
	b := &slackBroker{s: s, srv: w.Slack.Srv, channel: w.Slack.Channel, alice: w.Slack.Alice, workDir: w.Work,
		procs: &procRecorder{}, timings: &timingLog{}}
	b.sandbox = interopSandbox(t, env)
	cfg, err := w.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := broker.Options{
		Version: "interop",
		Pool: func(pc *pool.Config) {
			pc.Sandbox = b.sandbox
			pc.Launch = b.procs.launch
			pc.Profiles[pool.DefaultProfileName].Env = env
		},
		Engine: func(e *adapter.Config) { e.RestartAfterCancel = engineCfg.RestartAfterCancel },
		Platforms: map[string]broker.PlatformFunc{"slack": func(p broker.Parts) (broker.Platform, error) {
			made, err := broker.Slack(nil)(p)
			if err == nil {
				b.client = made.Platform.(*slack.Client)
			}
			return made, err
		}},
	}
	if b.broker, err = w.OpenConfig(cfg, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.close(t) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.broker.Serve(ctx); err != nil {
		t.Fatal(err)
	}
	return b
}

// close stops the broker and says what it asked of Slack.
func (b *slackBroker) close(t *testing.T) {
	throughProxy(t, b.s, b.sandbox, b.broker.Metrics())
	if err := b.broker.Stop(10 * time.Second); err != nil {
		t.Logf("the broker's platforms returned %v", err)
	}
	for _, c := range b.srv.Calls() {
		if c.Error == "unknown_method" || c.Error == "method_deprecated" || c.Error == "invalid_blocks" || c.Error == "msg_too_long" {
			t.Errorf("%s: Slack refused %s: %s", b.s.spec.Name, c.Method, c.Error)
		}
	}
	if n := len(b.srv.RateLimited()); n > 0 {
		t.Errorf("%s: %d Web API call(s) answered 429: the broker went past Slack's limits", b.s.spec.Name, n)
	}
	st := b.client.Stats()
	t.Logf("%s: %d Web API calls, %d held back to stay within Slack's limits, %d answered 429", b.s.spec.Name, st.APICalls, st.Throttled, st.RateLimited)
	for _, e := range b.srv.Envelopes() {
		if e.Failed || e.LateAcks > 0 {
			t.Errorf("%s: envelope %s (%s) not acknowledged within Slack's 3 seconds: %+v", b.s.spec.Name, e.ID, e.Kind, e.Attempts)
		}
	}
}

// engine is the broker's engine, by the broker's thread ids.
func (b *slackBroker) engine() *adapter.Engine { return b.broker.Engine() }

// id is a Slack thread's id in the broker.
func (b *slackBroker) id(thread string) string { return broker.ThreadID("slack", b.channel+"/"+thread) }

// procsOf are the agent processes of a thread, by its agent's directory.
func (b *slackBroker) procsOf(thread string) []*agentProc {
	st := b.engine().Status(b.id(thread))
	if p := b.procs.byPID(st.PID); p != nil {
		return b.procs.of(p.thread)
	}
	return nil
}

func (b *slackBroker) await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), slackAwait)
	defer cancel()
	if err := b.srv.WaitFor(ctx, cond); err != nil {
		t.Fatalf("%s: %v (waited %v)", what, err, slackAwait)
	}
}

// acked waits for an envelope's acknowledgement, which must come within
// Slack's 3 seconds, and returns how long it took.
func (b *slackBroker) acked(t *testing.T, id string) time.Duration {
	t.Helper()
	env := brokertest.MustGet(t, slackAwait, func(ctx context.Context) (fakeslack.Envelope, error) {
		ws := brokertest.Slack{Srv: b.srv}
		return ws.AwaitAck(ctx, id)
	})
	took := env.AckedAt.Sub(env.Created)
	if took > slackAckDeadline {
		t.Errorf("envelope %s acknowledged after %v; Slack allows %v", id, took, slackAckDeadline)
	}
	return took
}

// mention has alice mention the app in the channel; it returns the
// message's ts (the thread's) and when it was sent.
func (b *slackBroker) mention(t *testing.T, prompt string) (string, time.Time) {
	t.Helper()
	sent := time.Now()
	ts := b.srv.PostMessage(b.channel, b.alice.ID, b.srv.Bot().Mention()+" "+prompt)
	if ts == "" {
		t.Fatal("the fake Slack did not take the message")
	}
	t.Cleanup(func() {
		if t.Failed() {
			b.dumpThread(t, ts)
		}
	})
	return ts, sent
}

// say has alice write in the thread; it returns the message's ts and
// when it was sent.
func (b *slackBroker) say(t *testing.T, thread, text string) (string, time.Time) {
	t.Helper()
	sent := time.Now()
	ts := b.srv.PostMessage(b.channel, b.alice.ID, text, fakeslack.InThread(thread))
	if ts == "" {
		t.Fatal("the fake Slack did not take the message")
	}
	return ts, sent
}

// turnMessages are the app's messages in the thread after the message
// after ("": all but the one it hangs from).
func (b *slackBroker) turnMessages(thread, after string) []fakeslack.Message {
	var out []fakeslack.Message
	for _, m := range b.srv.Thread(b.channel, thread) {
		if m.FromBot() && m.TS != thread && (after == "" || m.TS > after) {
			out = append(out, m)
		}
	}
	return out
}

// writtenCancel reports whether the app's message answers "@app cancel":
// no part of the turn's answer.
func writtenCancel(text string) bool {
	return strings.HasPrefix(text, "🛑 @") && strings.HasSuffix(text, "cancelled the current turn.")
}

// slackTurn is one turn as its thread shows it.
type slackTurn struct {
	answer       []fakeslack.Message
	body, footer string
	first, end   time.Time
}

// awaitEnd waits until the turn that follows the message after has
// ended, and returns it as shown.
func (b *slackBroker) awaitEnd(t *testing.T, thread, after string) slackTurn {
	t.Helper()
	var ans []fakeslack.Message
	b.await(t, "the turn's final footer", func() bool {
		ans = nil
		for _, m := range b.turnMessages(thread, after) {
			if text := brokertest.SlackText(m.Blocks, m.Text); !strings.HasPrefix(text, brokertest.PermissionPrefix) && !writtenCancel(text) {
				ans = append(ans, m)
			}
		}
		return len(ans) > 0 && brokertest.Footer(brokertest.SlackText(ans[len(ans)-1].Blocks, ans[len(ans)-1].Text)) != ""
	})
	st := slackTurn{answer: ans}
	var parts []string
	for _, m := range ans {
		parts = append(parts, brokertest.SlackText(m.Blocks, m.Text))
	}
	all := strings.Join(parts, "\n")
	st.footer = brokertest.Footer(all)
	st.body = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(all), st.footer))
	for _, m := range b.turnMessages(thread, after) {
		if st.first.IsZero() || m.Posted.Before(st.first) {
			st.first = m.Posted
		}
	}
	for _, m := range ans {
		for _, r := range b.srv.Revisions(b.channel, m.TS) {
			if brokertest.Footer(brokertest.SlackText(r.Blocks, r.Text)) != "" && (st.end.IsZero() || r.At.Before(st.end)) {
				st.end = r.At
			}
		}
	}
	return st
}

// awaitReaction waits for the app's status emoji on a message of the
// channel or the thread, and checks ⚙️ is gone from it.
func (b *slackBroker) awaitReaction(t *testing.T, ts, emoji string) {
	t.Helper()
	ws := brokertest.Slack{Srv: b.srv}
	brokertest.Must(t, slackAwait, func(ctx context.Context) error { return ws.AwaitReaction(ctx, b.channel, ts, emoji) })
	b.await(t, "⚙️ gone from the user's message", func() bool {
		return !b.srv.HasReaction(b.channel, ts, b.srv.Bot().UserID, brokertest.SlackEmoji[brokertest.Working])
	})
}

// slackClick is a permission request answered with a button.
type slackClick struct {
	text    string
	option  acp.PermissionOption
	request acp.PermissionRequest
	shown   time.Time
	acked   time.Duration
}

// allowOnce waits for the permission request of the turn after the
// message after, and has alice click the agent's allow_once option.
func (b *slackBroker) allowOnce(t *testing.T, thread, after string) slackClick {
	t.Helper()
	var c slackClick
	var msg fakeslack.Message
	b.await(t, "a permission request with buttons", func() bool {
		for _, m := range b.turnMessages(thread, after) {
			if strings.HasPrefix(brokertest.SlackText(m.Blocks, m.Text), brokertest.PermissionPrefix+" *Permission needed*") && len(brokertest.SlackElements(m.Blocks)) > 0 {
				msg = m
				return true
			}
		}
		return false
	})
	c.text, c.shown = brokertest.SlackText(msg.Blocks, msg.Text), msg.Posted
	reqs := b.procs.permissionRequests(b.procsThread(thread))
	if len(reqs) == 0 {
		t.Fatal("a permission request is shown but none is on the agent's wire")
	}
	if err := json.Unmarshal(reqs[len(reqs)-1].Params, &c.request); err != nil {
		t.Fatalf("permission request params: %v", err)
	}
	idx := slices.IndexFunc(c.request.Options, func(o acp.PermissionOption) bool { return o.Kind == acp.OptionAllowOnce })
	if idx < 0 {
		t.Fatalf("the agent offered no allow_once option: %+v", c.request.Options)
	}
	c.option = c.request.Options[idx]
	id, ok := brokertest.SlackButton(msg.Blocks, c.option.Name)
	if !ok {
		t.Fatalf("no button %q for option %d on %q", c.option.Name, idx, c.text)
	}
	c.acked = b.acked(t, b.srv.ClickButton(b.channel, msg.TS, b.alice.ID, id))
	want := fmt.Sprintf("@%s chose *%s*", b.alice.DisplayName, c.option.Name) // named, not mentioned
	b.await(t, "the request saying who chose what", func() bool {
		m, _ := b.srv.Message(b.channel, msg.TS)
		return strings.Contains(brokertest.SlackText(m.Blocks, m.Text), want) && len(brokertest.SlackElements(m.Blocks)) == 0
	})
	return c
}

// procsThread is the name the pool gave the thread's agent directory.
func (b *slackBroker) procsThread(thread string) string {
	if p := b.procs.byPID(b.engine().Status(b.id(thread)).PID); p != nil {
		return p.thread
	}
	return ""
}

// dumpThread logs what the thread shows and what its agents' stdio
// carried.
func (b *slackBroker) dumpThread(t *testing.T, thread string) {
	for _, m := range b.srv.Thread(b.channel, thread) {
		t.Logf("thread %s: %s (bot %v, %d edits, posted %s): %q", thread, m.TS, m.FromBot(), m.Edits, m.Posted.Format("15:04:05.000"), brokertest.SlackText(m.Blocks, m.Text))
	}
	for _, p := range b.procsOf(thread) {
		p.dump(t)
	}
}
