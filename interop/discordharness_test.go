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
	// discordAwait bounds every wait on the thread: an agent's start plus
	// one turn of the SDK example (about five seconds of its own pauses)
	// and Discord's pace of 5 message calls per 5 seconds.
	discordAwait = 45 * time.Second
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
	s       *subject
	srv     *fakediscord.Server
	broker  *brokertest.InProcess
	engine  engine // by Discord's thread ids, as the client sees it
	client  *discord.Client
	channel string // the allowed channel
	discord brokertest.Discord
	workDir string // agent.cwd; each thread runs in workDir/<thread>
	procs   *procRecorder
	timings *timingLog
	sandbox pool.Sandbox
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
		Fake: fakediscord.Options{WaitTimeout: discordAwait},
		Conf: brokertest.Settings{
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
			"turn.permission_timeout": discordAwait.String(),
			"agent.allow_hosts":       allowHosts(s),
		}.With(merged(more)),
		LogTail: 512 << 10,
	})
	w.Srv.AddUser(threadStarter)
	b := &discordBroker{
		s:       s,
		srv:     w.Srv,
		channel: w.Channel,
		discord: w.Discord,
		workDir: w.Work,
		procs:   &procRecorder{},
		timings: &timingLog{},
	}
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
		Engine: func(e *adapter.Config) { e.RestartAfterCancel = engineCfg.RestartAfterCancel },
		Platforms: map[string]broker.PlatformFunc{"discord": func(p broker.Parts) (broker.Platform, error) {
			b.engine.Engine = p.Engine
			made, err := broker.Discord(nil)(p)
			if err == nil {
				b.client = made.Platform.(*discord.Client)
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
	throughProxy(t, b.s, b.sandbox, b.broker.Metrics())
	if err := b.broker.Stop(10 * time.Second); err != nil {
		t.Logf("the broker's platforms returned %v", err)
	}
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

// warnings returns the broker's warning and error lines about the agent
// process pid.
func (b *discordBroker) warnings(pid int) []string {
	var out []string
	for _, level := range []string{`"level":"warn"`, `"level":"error"`} {
		out = append(out, b.broker.Log.Grep(level, fmt.Sprintf(`"pid":%d,`, pid))...)
	}
	return out
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

// await waits until cond holds, failing t after discordAwait.
func (b *discordBroker) await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), discordAwait)
	defer cancel()
	if err := b.srv.WaitFor(ctx, cond); err != nil {
		t.Fatalf("%s: %v (waited %v)", what, err, discordAwait)
	}
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

// shownTurn is one turn as its thread shows it.
type shownTurn struct {
	answer []fakediscord.Message // the bot's answer messages, oldest first
	body   string                // their text without the footer line
	footer string                // the final line, e.g. "-# ✅ done in 3s"
	// first is when the turn's first bot message (answer or permission
	// request) was posted, end when the footer appeared.
	first, end time.Time
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

func answerMessages(msgs []fakediscord.Message) []fakediscord.Message {
	var out []fakediscord.Message
	for _, m := range msgs {
		if !strings.HasPrefix(m.Content, brokertest.PermissionPrefix) {
			out = append(out, m)
		}
	}
	return out
}

// awaitEnd waits until the turn that follows the message after has ended
// in thread, and returns it as shown.
func (b *discordBroker) awaitEnd(t *testing.T, thread, after string) shownTurn {
	t.Helper()
	var ans []fakediscord.Message
	b.await(t, "the turn's final footer", func() bool {
		ans = answerMessages(b.turnMessages(thread, after))
		return len(ans) > 0 && brokertest.Footer(ans[len(ans)-1].Content) != ""
	})
	st := shownTurn{answer: ans}
	var parts []string
	for _, m := range ans {
		parts = append(parts, m.Content)
	}
	all := strings.Join(parts, "\n")
	st.footer = brokertest.Footer(all)
	st.body = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(all), st.footer))
	for _, m := range b.turnMessages(thread, after) {
		if st.first.IsZero() || m.Created.Before(st.first) {
			st.first = m.Created
		}
	}
	for _, m := range ans {
		for _, r := range b.srv.Revisions(thread, m.ID) {
			if brokertest.Footer(r.Content) != "" && (st.end.IsZero() || r.At.Before(st.end)) {
				st.end = r.At
			}
		}
	}
	return st
}

// awaitReaction waits until the bot's status reaction on a user's message
// is emoji, and checks the working one is gone.
func (b *discordBroker) awaitReaction(t *testing.T, channel, msg, emoji string) {
	t.Helper()
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

// clicked is a permission request answered with a button.
type clicked struct {
	msg      fakediscord.Message // the request as first posted
	option   acp.PermissionOption
	request  acp.PermissionRequest // as the agent sent it
	response fakediscord.InteractionResponse
	shown    time.Time // the request appeared in the thread
}

// allowOnce waits for the permission request of the turn after the
// message after, with its buttons, and has the thread starter click the
// button of the agent's allow_once option.
func (b *discordBroker) allowOnce(t *testing.T, thread, after string) clicked {
	t.Helper()
	var c clicked
	b.await(t, "a permission request with buttons", func() bool {
		for _, m := range b.turnMessages(thread, after) {
			if strings.HasPrefix(m.Content, brokertest.PermissionPrefix+" **Permission needed**") && len(m.Buttons()) > 0 {
				c.msg = m
				return true
			}
		}
		return false
	})
	c.shown = c.msg.Created
	reqs := b.procs.permissionRequests(thread)
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
	var custom string
	for _, btn := range c.msg.Buttons() {
		if strings.HasSuffix(btn.CustomID, fmt.Sprintf(":%d", idx)) {
			custom = btn.CustomID
			if btn.Label != c.option.Name {
				t.Errorf("button %d is labelled %q, want the option's name %q", idx, btn.Label, c.option.Name)
			}
		}
	}
	if custom == "" {
		t.Fatalf("no button for option %d (%+v) on %q", idx, c.option, c.msg.Content)
	}
	c.response = b.interactionResponse(t, b.srv.ClickButton(thread, c.msg.ID, threadStarter.ID, custom))
	want := fmt.Sprintf("<@%s> chose **%s**", threadStarter.ID, c.option.Name)
	if c.response.Type != 7 || !strings.Contains(c.response.Content, want) {
		t.Errorf("the click was answered %+v, want the message updated to say %q", c.response, want)
	}
	if m, _ := b.srv.Message(thread, c.msg.ID); len(m.Buttons()) != 0 {
		t.Errorf("buttons still on the permission request after the choice: %q", m.Content)
	}
	return c
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
