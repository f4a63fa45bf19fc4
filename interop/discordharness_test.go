package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/broker"
	"acpbroker/chat"
	"acpbroker/chat/discord"
	"acpbroker/chat/thread"
	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakediscord"
	"acpbroker/metrics"
	"acpbroker/pool"
)

const (
	// discordAwait bounds every wait on a Discord thread.
	discordAwait = chatAwait
	// interactionDeadline is Discord's: an interaction not answered
	// within it fails for the user.
	interactionDeadline = 3 * time.Second
)

// threadStarter is the user who talks to the bot in these tests.
var threadStarter = fakediscord.User{ID: "301", Username: "alice", GlobalName: "Alice"}

// discordBroker is a broker serving Discord, wired as the broker binary
// wires one (package broker, through brokertest.World.OpenConfig, with
// Discord's own rate limits and the default edit pace), against a fake
// Discord, in front of one real agent.
type discordBroker struct {
	frontBase // each thread runs in workDir/<thread>
	srv       *fakediscord.Server
	engine    engine // by Discord's thread ids, as the client sees it
	client    *discord.Client
	discord   brokertest.Discord
}

// engine is the broker's engine as the Discord client sees it.
type engine struct{ chat.Engine }

// newDiscordBroker starts a fake Discord and the broker in front of s's
// agent. Cleanup stops the broker (no new prompts, turns ended, last
// messages posted, agents stopped) and checks what it did; the fake
// Discord closes after it, and s's fake model after that.
func newDiscordBroker(t *testing.T, s *subject, engineCfg adapter.Config, more ...brokertest.Settings) *discordBroker {
	t.Helper()
	env, err := agentEnv(s.spec.Env)
	if err != nil {
		t.Fatal(err)
	}
	w := brokertest.NewWorld(t, brokertest.Binaries{Agent: s.spec.Command}, brokertest.Options{
		Fake:    fakediscord.Options{WaitTimeout: discordAwait},
		Conf:    frontSettings(s, more...),
		LogTail: 512 << 10,
	})
	w.Srv.AddUser(threadStarter)
	b := &discordBroker{
		frontBase: frontBase{s: s, platform: "discord", channel: w.Channel, workDir: w.Work, procs: &procRecorder{}, timings: &timingLog{},
			toolDone: "✅ `Modifying critical configuration file` done"},
		srv:     w.Srv,
		discord: w.Discord,
	}
	b.waitFor = w.Srv.WaitFor
	b.start(t, w, env, engineCfg, func(p broker.Parts) (broker.Platform, error) {
		b.engine.Engine = p.Engine
		made, err := broker.Discord(nil)(p)
		if err == nil {
			b.client = made.Platform.(*discord.Client)
		}
		return made, err
	}, b.close)
	b.await(t, "slash commands registered", func() bool { return len(b.srv.Commands()) == len(thread.Commands) })
	return b
}

// merged is the settings of more, later ones over earlier ones.
func merged(more []brokertest.Settings) brokertest.Settings {
	out := brokertest.Settings{}
	for _, m := range more {
		out = out.With(m)
	}
	return out
}

// allowHosts is agent.allow_hosts for s's agent: its fake model, or
// the default for an agent with none.
func allowHosts(s *subject) any {
	if len(s.allow) == 0 {
		return nil
	}
	return s.allow
}

// throughProxy checks that an agent with a model reached it through the
// broker's proxy (the sandbox leaves it no other way), counted by
// profile. What it was refused is said (claude-agent-acp 0.23.1 asks
// for raw.githubusercontent.com, which its turns do without).
func throughProxy(t *testing.T, s *subject, sandbox pool.Sandbox, m *metrics.Metrics) {
	t.Helper()
	if !s.model || !sandbox.Enabled() {
		return
	}
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	allowed, refused := networkCounts(families)
	t.Logf("%s: %v connection(s) through the proxy, %v refused", s.spec.Name, allowed, refused)
	if allowed == 0 {
		t.Errorf("%s answered with no connection through the proxy", s.spec.Name)
	}
}

// close stops the broker as the binary does at SIGTERM, and says what
// it did.
func (b *discordBroker) close(t *testing.T) {
	b.stop(t)
	if u := b.srv.UnknownRequests(); len(u) > 0 {
		t.Errorf("the broker called %d route(s) Discord does not have, first %s %s", len(u), u[0].Method, u[0].Path)
	}
	limited := map[string]int{}
	for _, r := range b.srv.RateLimited() {
		limited[r.Route]++
	}
	if len(limited) > 0 {
		t.Logf("%s: REST calls answered 429 by route: %v", b.s.spec.Name, limited)
	}
	b.procs.mu.Lock()
	for _, c := range b.procs.commands {
		if b.sandbox.Enabled() && c != b.sandbox.Bwrap {
			t.Errorf("%s: an agent ran as %s, outside the sandbox", b.s.spec.Name, c)
		}
	}
	t.Logf("%s: %d agent process(es) run through %v", b.s.spec.Name, len(b.procs.commands), slices.Compact(slices.Clone(b.procs.commands)))
	b.procs.mu.Unlock()
	st := b.broker.Pool().Stats()
	t.Logf("%s: pool at the end: spawned %d, stopped %v, killed %d; conn: late updates %d, stale responses %d, junk lines %d, bad messages %d",
		b.s.spec.Name, st.Spawned, st.Stopped, st.Killed, st.Conn.LateUpdates, st.Conn.StaleResponses, st.Conn.JunkLines, st.Conn.BadMessages)
}

// agentEnv builds the agent's environment the way the broker does, with
// pool.BuildEnv: PATH, HOME and LANG as the broker's own variables, the
// rest as agent.env entries.
// interopSandbox runs the real agents as the broker runs any agent, in
// bubblewrap: they may read their npm packages and write the homes their
// environment names (HOME, CODEX_HOME, CLAUDE_CONFIG_DIR), and nothing else
// outside their workspace. Without bubblewrap they run unconfined, and
// the test says so.
func interopSandbox(t *testing.T, env []string) pool.Sandbox {
	sb := pool.Sandbox{Bwrap: "bwrap"}
	if err := sb.Check(10*time.Second, nil); err != nil {
		t.Logf("agents run unconfined: %v", err)
		return pool.Sandbox{}
	}
	pkgs, err := filepath.Abs("../testdata/interop")
	if err != nil {
		t.Fatal(err)
	}
	sb.ReadOnly = []string{pkgs}
	for _, kv := range env {
		if _, v, _ := strings.Cut(kv, "="); filepath.IsAbs(v) {
			if fi, err := os.Stat(v); err == nil && fi.IsDir() && !strings.HasPrefix(v, "/usr") {
				sb.ReadWrite = append(sb.ReadWrite, v)
			}
		}
	}
	return sb
}

func agentEnv(spec []string) ([]string, error) {
	own := map[string]string{}
	extra := map[string]string{}
	for _, kv := range spec {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "PATH", "HOME", "USER", "LANG":
			own[k] = v
		default:
			extra[k] = v
		}
	}
	return pool.BuildEnv(func(k string) (string, bool) { v, ok := own[k]; return v, ok }, extra)
}

// mention has the thread starter mention the bot in the allowed channel
// and waits for the thread opened from the message. It returns the
// thread's id (the message's) and when the message was sent.
func (b *discordBroker) mention(t *testing.T, prompt string) (string, time.Time) {
	t.Helper()
	sent := time.Now()
	thread := b.srv.SendMessage(b.channel, threadStarter, b.srv.Bot().Mention()+" "+prompt)
	if thread == "" {
		t.Fatal("the fake Discord did not take the message")
	}
	t.Cleanup(func() {
		if t.Failed() {
			b.dumpThread(t, thread)
		}
	})
	b.await(t, "a thread opened from the mention", func() bool {
		ch, ok := b.srv.Channel(thread)
		return ok && ch.IsThread()
	})
	return thread, sent
}

// say has the thread starter post a follow-up in thread; it returns the
// message's id and when it was sent.
func (b *discordBroker) say(t *testing.T, thread, text string) (string, time.Time) {
	t.Helper()
	sent := time.Now()
	id := b.srv.SendMessage(thread, threadStarter, text)
	if id == "" {
		t.Fatal("the fake Discord did not take the message")
	}
	return id, sent
}

// turnMessages returns the bot's messages in thread posted after the
// message after ("" for the thread's first turn), interaction responses
// left out.
func (b *discordBroker) turnMessages(thread, after string) []fakediscord.Message {
	msgs := b.srv.Messages(thread)
	if after != "" {
		i := slices.IndexFunc(msgs, func(m fakediscord.Message) bool { return m.ID == after })
		if i < 0 {
			return nil
		}
		msgs = msgs[i+1:]
	}
	var out []fakediscord.Message
	for _, m := range msgs {
		if m.Author.ID == b.srv.Bot().ID && m.InteractionID == "" {
			out = append(out, m)
		}
	}
	return out
}

// shown: interaction responses are no part of a turn.
func (b *discordBroker) shown(thread, after string) (all, answer []shownMsg) {
	for _, m := range b.turnMessages(thread, after) {
		sm := shownMsg{id: m.ID, text: m.Content, at: m.Created}
		all = append(all, sm)
		if !strings.HasPrefix(m.Content, brokertest.PermissionPrefix) {
			answer = append(answer, sm)
		}
	}
	return all, answer
}

func (b *discordBroker) revisions(thread, msg string) []shownMsg {
	var out []shownMsg
	for _, r := range b.srv.Revisions(thread, msg) {
		out = append(out, shownMsg{id: msg, text: r.Content, at: r.At})
	}
	return out
}

// awaitReaction: the message a thread opened from is in the allowed
// channel; the others are in the thread.
func (b *discordBroker) awaitReaction(t *testing.T, thread, msg, emoji string) {
	t.Helper()
	channel := thread
	if msg == "" {
		channel, msg = b.channel, thread
	}
	brokertest.Must(t, discordAwait, func(ctx context.Context) error {
		return b.discord.AwaitReaction(ctx, channel, msg, emoji)
	})
	bot := b.srv.Bot().ID
	b.await(t, "⚙️ reaction gone from the user's message", func() bool { return !b.srv.HasReaction(channel, msg, bot, brokertest.Working) })
}

// interactionResponse waits for the bot's answer to an interaction and
// checks it came within Discord's deadline.
func (b *discordBroker) interactionResponse(t *testing.T, id string) fakediscord.InteractionResponse {
	t.Helper()
	r := brokertest.MustGet(t, discordAwait, func(ctx context.Context) (fakediscord.InteractionResponse, error) {
		return b.discord.Response(ctx, id)
	})
	if r.Late || r.Latency > interactionDeadline || r.Status >= 300 {
		t.Errorf("interaction %s answered after %v (late %v, HTTP %d); Discord allows %v", id, r.Latency, r.Late, r.Status, interactionDeadline)
	}
	return r
}

func (b *discordBroker) allowOnce(t *testing.T, thread, after string) clicked {
	t.Helper()
	var msg fakediscord.Message
	b.await(t, "a permission request with buttons", func() bool {
		for _, m := range b.turnMessages(thread, after) {
			if strings.HasPrefix(m.Content, brokertest.PermissionPrefix+" **Permission needed**") && len(m.Buttons()) > 0 {
				msg = m
				return true
			}
		}
		return false
	})
	c := clicked{text: msg.Content, shown: msg.Created}
	var idx int
	c.request, idx = requestOnWire(t, b.procs, thread)
	c.option = c.request.Options[idx]
	var custom string
	for _, btn := range msg.Buttons() {
		if strings.HasSuffix(btn.CustomID, fmt.Sprintf(":%d", idx)) {
			custom = btn.CustomID
			if btn.Label != c.option.Name {
				t.Errorf("button %d is labelled %q, want the option's name %q", idx, btn.Label, c.option.Name)
			}
		}
	}
	if custom == "" {
		t.Fatalf("no button for option %d (%+v) on %q", idx, c.option, msg.Content)
	}
	r := b.interactionResponse(t, b.srv.ClickButton(thread, msg.ID, threadStarter.ID, custom))
	c.answered = r.Latency
	want := fmt.Sprintf("<@%s> chose **%s**", threadStarter.ID, c.option.Name)
	if r.Type != 7 || !strings.Contains(r.Content, want) {
		t.Errorf("the click was answered %+v, want the message updated to say %q", r, want)
	}
	if m, _ := b.srv.Message(thread, msg.ID); len(m.Buttons()) != 0 {
		t.Errorf("buttons still on the permission request after the choice: %q", m.Content)
	}
	return c
}

func (b *discordBroker) status(thread string) adapter.ThreadStatus { return b.engine.Status(thread) }

// procsOf: a thread's agents run in the directory named for its id.
func (b *discordBroker) procsOf(thread string) []*agentProc { return b.procs.of(thread) }

func (b *discordBroker) openPermissions() int { return b.client.Stats().OpenPermissions }

// cancelling: /cancel in the thread for the agents with a model
// (answered publicly within 3 seconds, naming who cancelled), a 🛑
// reaction on the answer for the SDK example.
func (b *discordBroker) cancelling(t *testing.T, thread, after string) (string, func()) {
	if b.s.model {
		return "/cancel", func() {
			r := b.interactionResponse(t, b.srv.SlashCommand(thread, threadStarter.ID, "cancel", nil))
			if r.Ephemeral() || !strings.Contains(r.Content, "<@"+threadStarter.ID+"> cancelled the current turn") {
				t.Errorf("/cancel answered %+v, want a public note of who cancelled", r)
			}
		}
	}
	var working string // a bot message shown while the agent works
	b.await(t, "the agent's first words", func() bool {
		for _, m := range b.turnMessages(thread, after) {
			if strings.Contains(m.Content, "I'll help you with that.") {
				working = m.ID
				return true
			}
		}
		return false
	})
	return "🛑 reaction", func() { b.srv.AddReaction(thread, working, threadStarter.ID, "🛑") }
}

// models: /model in the thread suggests them (autocomplete).
func (b *discordBroker) models(t *testing.T, thread string) []string {
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
	return names
}

// chooseModel: /model with the model chosen; the answer to the
// interaction is the agent's.
func (b *discordBroker) chooseModel(t *testing.T, thread, pick string) {
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
}

// alsoText: the thread opened from the mention in the allowed channel,
// named after the prompt, and the typing indicator ran in it while the
// agent worked.
func (b *discordBroker) alsoText(t *testing.T, thread, prompt string) {
	if ch, _ := b.srv.Channel(thread); ch.ParentID != b.channel || ch.Name != prompt {
		t.Errorf("thread = %+v, want one in the allowed channel named after the prompt", ch)
	}
	if b.srv.Typing(thread) == 0 {
		t.Error("no typing indicator in the thread while the agent worked")
	}
}

func (b *discordBroker) alsoPermission(t *testing.T, thread string, c clicked) {
	t.Run("input-as-sent", func(t *testing.T) { discordPermissionInput(t, b, thread, c) })
}

// alsoModel: /agent lists the agent's own commands (its
// available_commands_update), and for claude-agent-acp /mode plan
// enters its plan mode. claude-agent-acp sends its commands with the
// session; codex-acp from a task of its own, at times well after the
// first turn, so only claude's are required here.
func (b *discordBroker) alsoModel(t *testing.T, thread string) {
	s := b.s
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
	_, block, ok := strings.Cut(c.text, "```\n")
	block, _, _ = strings.Cut(block, "\n```")
	if !ok || block == "" {
		t.Fatalf("the permission request %q shows no input; the agent sent %s", c.text, agentInput)
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

func excerptOf(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// dumpThread logs what the thread shows and what its agents' stdio
// carried.
func (b *discordBroker) dumpThread(t *testing.T, thread string) {
	if m, ok := b.srv.Message(b.channel, thread); ok {
		t.Logf("thread %s started from %q; reactions %+v", thread, m.Content, b.srv.Reactions(b.channel, thread))
	}
	for _, m := range b.srv.Messages(thread) {
		t.Logf("thread %s: %s (%s, %d edits, created %s): %q", thread, m.ID, m.Author.Username, m.Edits, m.Created.Format("15:04:05.000"), m.Content)
	}
	for _, p := range b.procs.of(thread) {
		p.dump(t)
	}
}

// timingLog keeps the latencies a test measured, to log them together.
type timingLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *timingLog) add(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *timingLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "; ")
}

// agentProc is one agent process the pool started, with a record of its
// stdio.
type agentProc struct {
	thread  string
	pid     int
	started time.Time
	proc    pool.Proc
	wire    *wire
}

// procRecorder launches agents for the pool as pool.Exec does, with taps
// on their stdin and stdout.
type procRecorder struct {
	mu       sync.Mutex
	procs    []*agentProc
	commands []string // what each launch ran: bwrap when sandboxed
}

// tappedProc is a pool.Proc whose stdio passes through wire taps.
type tappedProc struct {
	pool.Proc
	in  io.WriteCloser
	out io.ReadCloser
}

func (p *tappedProc) Stdin() io.WriteCloser { return p.in }
func (p *tappedProc) Stdout() io.ReadCloser { return p.out }

func (r *procRecorder) launch(spec pool.ProcessSpec) (pool.Proc, error) {
	r.mu.Lock()
	r.commands = append(r.commands, spec.Command)
	r.mu.Unlock()
	proc, err := pool.Exec(spec)
	if err != nil {
		return nil, err
	}
	w := &wire{}
	r.mu.Lock()
	r.procs = append(r.procs, &agentProc{thread: filepath.Base(spec.Dir), pid: proc.PID(), started: time.Now(), proc: proc, wire: w})
	r.mu.Unlock()
	return &tappedProc{
		Proc: proc,
		in:   &tapWriter{WriteCloser: proc.Stdin(), tap: tap{w: w, out: true}},
		out:  &tapReader{ReadCloser: proc.Stdout(), tap: tap{w: w}},
	}, nil
}

// of returns the processes started for thread, oldest first.
func (r *procRecorder) of(thread string) []*agentProc {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*agentProc
	for _, p := range r.procs {
		if p.thread == thread {
			out = append(out, p)
		}
	}
	return out
}

// byPID returns the process with pid, or nil.
func (r *procRecorder) byPID(pid int) *agentProc {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.procs {
		if p.pid == pid {
			return p
		}
	}
	return nil
}

// permissionRequests returns the permission requests thread's agents
// sent, in order.
func (r *procRecorder) permissionRequests(thread string) []wireMsg {
	var out []wireMsg
	for _, p := range r.of(thread) {
		for _, m := range p.wire.snapshot() {
			if !m.Out && m.Method == acp.MethodRequestPermission {
				out = append(out, m)
			}
		}
	}
	return out
}

// alive reports whether the process has not exited.
func (p *agentProc) alive() bool {
	select {
	case <-p.proc.Exited():
		return false
	default:
		return true
	}
}

// promptAnswer is one session/prompt on a process's wire and its answer.
type promptAnswer struct {
	sent, answered time.Time // answered is zero while unanswered
	stop           string    // the stopReason, or "error: …"
}

// prompts lists the session/prompt requests on the wire with their
// answers, in order.
func (p *agentProc) prompts() []promptAnswer {
	msgs := p.wire.snapshot()
	var out []promptAnswer
	for i, m := range msgs {
		if !m.Out || m.Method != acp.MethodSessionPrompt {
			continue
		}
		pa := promptAnswer{sent: m.At}
		for _, r := range msgs[i+1:] {
			if r.Out || !r.Result || !bytes.Equal(r.ID, m.ID) {
				continue
			}
			var res struct {
				Result *acp.PromptResult `json:"result"`
				Error  *struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			_ = json.Unmarshal(r.Raw, &res)
			pa.answered = r.At
			switch {
			case res.Result != nil:
				pa.stop = res.Result.StopReason
			case res.Error != nil:
				pa.stop = fmt.Sprintf("error: %d %s", res.Error.Code, res.Error.Message)
			}
			break
		}
		out = append(out, pa)
	}
	return out
}

// sentAt returns when the first message of method went to the agent.
func (p *agentProc) sentAt(method string) time.Time {
	for _, m := range p.wire.snapshot() {
		if m.Out && m.Method == method {
			return m.At
		}
	}
	return time.Time{}
}

// permissionAnswers returns the raw answers the broker wrote to the
// agent's permission requests.
func (p *agentProc) permissionAnswers() []string {
	reqs := map[string]bool{}
	var out []string
	for _, m := range p.wire.snapshot() {
		if !m.Out && m.Method == acp.MethodRequestPermission {
			reqs[string(m.ID)] = true
		}
		if m.Out && m.Result && reqs[string(m.ID)] {
			out = append(out, string(m.Raw))
		}
	}
	return out
}

func (p *agentProc) dump(t *testing.T) {
	t.Logf("agent pid %d for thread %s (alive %v):", p.pid, p.thread, p.alive())
	for _, m := range p.wire.snapshot() {
		dir := "<-"
		if m.Out {
			dir = "->"
		}
		raw := string(m.Raw)
		if len(raw) > 3000 {
			raw = raw[:3000] + "…"
		}
		t.Logf("  %d %s +%v %s", p.pid, dir, m.At.Sub(p.started).Round(time.Millisecond), raw)
	}
}
