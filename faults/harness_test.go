package faults

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"acpbroker/internal/agenttest"
	"acpbroker/internal/fakediscord"

	"go.uber.org/goleak"
)

// brokerBin and agentBin are the broker and the fake agent, built once
// by TestMain.
var brokerBin, agentBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "faults-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := buildBinaries(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// buildBinaries builds the broker and the fake agent into dir, from the
// module root.
func buildBinaries(dir string) error {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	bin := filepath.Join(dir, "broker")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/broker")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build broker: %w\n%s", err, b)
	}
	agent, err := agenttest.Build(dir)
	if err != nil {
		return err
	}
	// /proc shows resolved paths; compare with those.
	if brokerBin, err = filepath.EvalSymlinks(bin); err != nil {
		return err
	}
	agentBin, err = filepath.EvalSymlinks(agent)
	return err
}

const (
	guildID = "100"
	token   = "faults-bot-token"
)

var (
	alice = fakediscord.User{ID: "201", Username: "alice", GlobalName: "Alice"}
	bob   = fakediscord.User{ID: "202", Username: "bob", GlobalName: "Bob"}
	carol = fakediscord.User{ID: "203", Username: "carol", GlobalName: "Carol"}
)

// settings are broker configuration keys, as in the TOML file
// ("turn.timeout"), with their values: strings, string lists, ints or
// bools.
type settings map[string]any

// toml renders the settings as a TOML file, one table per prefix.
func (s settings) toml() string {
	tables := map[string][]string{}
	for k, v := range s {
		table, key, _ := strings.Cut(k, ".")
		tables[table] = append(tables[table], key+" = "+tomlValue(v))
	}
	names := make([]string, 0, len(tables))
	for name := range tables {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		lines := tables[name]
		sort.Strings(lines)
		fmt.Fprintf(&b, "[%s]\n%s\n\n", name, strings.Join(lines, "\n"))
	}
	return b.String()
}

func tomlValue(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case []string:
		quoted := make([]string, len(v))
		for i, s := range v {
			quoted[i] = strconv.Quote(s)
		}
		return "[" + strings.Join(quoted, ", ") + "]"
	default:
		return fmt.Sprint(v)
	}
}

// setup shapes a world: the fake Discord's options, and configuration
// keys that override the harness's (a nil value removes the key).
type setup struct {
	fake fakediscord.Options
	conf settings
}

// world is one test's fake Discord with a guild, an allowed channel and
// three users, and the configuration its brokers run with.
type world struct {
	t       *testing.T
	srv     *fakediscord.Server
	channel string
	dir     string // the configuration, state.dir and agent.cwd are here
	work    string // agent.cwd
	conf    settings
	env     []string // more of the broker's environment
}

func newWorld(t *testing.T, s setup) *world {
	t.Helper()
	s.fake.Token = token
	if s.fake.RateLimits == nil {
		// Discord allows 5 message calls per 5s per channel; the broker
		// paces itself to that, which would make these tests slow. The
		// rate-limit test injects its own 429s.
		loose := fakediscord.RateLimit{Limit: 100, Per: time.Second}
		s.fake.RateLimits = map[string]fakediscord.RateLimit{fakediscord.RouteCreateMessage: loose, fakediscord.RouteEditMessage: loose}
	}
	if s.fake.WaitTimeout == 0 {
		s.fake.WaitTimeout = 30 * time.Second
	}
	srv := fakediscord.New(t, s.fake)
	w := &world{t: t, srv: srv}
	for _, u := range []fakediscord.User{alice, bob, carol} {
		srv.AddUser(u)
	}
	w.channel = srv.AddChannel(guildID, "", "agents")
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w.dir = dir
	w.work = filepath.Join(dir, "work")
	w.conf = settings{
		"log.format":               "json",
		"log.level":                "info",
		"chat.platform":            "discord",
		"agent.command":            agentBin,
		"agent.cwd":                w.work,
		"agent.exit_grace":         "300ms",
		"state.dir":                filepath.Join(dir, "state"),
		"http.listen":              "127.0.0.1:0",
		"turn.cancel_grace":        "500ms",
		"shutdown.grace":           "5s",
		"discord.token":            token,
		"discord.api_url":          srv.APIURL(),
		"discord.allowed_channels": []string{w.channel},
		"discord.edit_interval":    "200ms",
	}
	for k, v := range s.conf {
		if v == nil {
			delete(w.conf, k)
		} else {
			w.conf[k] = v
		}
	}
	// Registered after the fake's Close and before any broker's stop:
	// it runs once every broker has stopped, before the fake closes.
	t.Cleanup(w.checkNoAgentsLeft)
	return w
}

// writeConfig writes the world's configuration and returns its path.
func (w *world) writeConfig() string {
	w.t.Helper()
	path := filepath.Join(w.dir, "broker.toml")
	if err := os.WriteFile(path, []byte(w.conf.toml()), 0o600); err != nil {
		w.t.Fatal(err)
	}
	return path
}

// broker is the broker binary running as a process of the test.
type broker struct {
	w    *world
	cmd  *exec.Cmd
	log  *agenttest.Buffer // stdout and stderr: JSON log lines
	done chan struct{}
	addr string // of /metrics, /healthz and /readyz
	http *http.Client
}

// start runs a broker with the world's configuration and waits until it
// is connected to the fake Discord and ready. The test's cleanup stops
// it (SIGTERM, then SIGKILL if it hangs) before the fake closes, and
// prints its log if the test failed.
func (w *world) start() *broker {
	w.t.Helper()
	b := &broker{w: w, log: &agenttest.Buffer{}, done: make(chan struct{}),
		http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}
	b.cmd = exec.Command(brokerBin, "--config", w.writeConfig())
	b.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + w.dir}, w.env...)
	b.cmd.Stdout = b.log
	b.cmd.Stderr = b.log
	b.cmd.WaitDelay = 5 * time.Second
	if err := b.cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	go func() {
		b.cmd.Wait()
		close(b.done)
	}()
	w.t.Cleanup(func() {
		if code := b.stop(); code != 0 && !w.t.Failed() && b.signalled() != syscall.SIGKILL {
			w.t.Errorf("broker exited with status %d after SIGTERM", code)
		}
		if w.t.Failed() {
			w.t.Logf("broker log (pid %d):\n%s", b.cmd.Process.Pid, tail(b.log.String(), 64<<10))
		}
	})
	b.awaitReady()
	return b
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// awaitReady waits for the broker to serve HTTP, for /readyz to say it is
// connected, and for its slash commands to be registered.
func (b *broker) awaitReady() {
	t := b.w.t
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for b.addr == "" {
		b.addr = logField(b.log.String(), "serving /metrics, /healthz and /readyz", "addr")
		if b.addr != "" {
			break
		}
		b.failIfExited("before serving HTTP")
		if time.Now().After(deadline) {
			t.Fatalf("the broker did not serve HTTP within 30s; log:\n%s", b.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		if code, _ := b.get("/readyz"); code == http.StatusOK {
			break
		}
		b.failIfExited("before it was ready")
		if time.Now().After(deadline) {
			_, body := b.get("/readyz")
			t.Fatalf("the broker was not ready within 30s: %s; log:\n%s", body, b.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.w.srv.Await("slash commands registered", func() bool { return len(b.w.srv.Commands()) == 3 })
}

func (b *broker) failIfExited(when string) {
	b.w.t.Helper()
	select {
	case <-b.done:
		b.w.t.Fatalf("the broker exited with status %d %s; log:\n%s", b.cmd.ProcessState.ExitCode(), when, b.log)
	default:
	}
}

// logField finds the first JSON log line with message msg and returns its
// field key.
func logField(log, msg, key string) string {
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) != nil || line["message"] != msg {
			continue
		}
		if v, ok := line[key].(string); ok {
			return v
		}
	}
	return ""
}

// stop sends SIGTERM and waits for the broker to exit (killing it after
// 30s); it returns the exit status. Stopping a stopped broker returns its
// status again.
func (b *broker) stop() int {
	select {
	case <-b.done:
		return b.cmd.ProcessState.ExitCode()
	default:
	}
	b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(30 * time.Second):
		b.w.t.Errorf("the broker did not stop within 30s of SIGTERM; killing it")
		b.cmd.Process.Kill()
		<-b.done
	}
	return b.cmd.ProcessState.ExitCode()
}

// kill ends the broker with SIGKILL, as a crash or the OOM killer would.
func (b *broker) kill() {
	b.cmd.Process.Signal(syscall.SIGKILL)
	<-b.done
}

// signalled is the signal that ended the broker, if one did.
func (b *broker) signalled() syscall.Signal {
	if ws, ok := b.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal()
	}
	return 0
}

func (b *broker) get(path string) (int, string) {
	resp, err := b.http.Get("http://" + b.addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// metric reads one series from /metrics, e.g.
// `acp_broker_turns_total{outcome="done"}`; ok is false if it is absent.
func (b *broker) metric(series string) (value float64, ok bool) {
	b.w.t.Helper()
	code, body := b.get("/metrics")
	if code != http.StatusOK {
		b.w.t.Fatalf("/metrics answered %d: %s", code, body)
	}
	for _, line := range strings.Split(body, "\n") {
		if rest, found := strings.CutPrefix(line, series+" "); found {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// awaitMetric waits up to 20s for a series to satisfy cond and returns
// its last value.
func (b *broker) awaitMetric(series string, cond func(float64) bool) float64 {
	b.w.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		v, ok := b.metric(series)
		if ok && cond(v) {
			return v
		}
		if time.Now().After(deadline) {
			_, body := b.get("/metrics")
			b.w.t.Fatalf("%s = %v (present: %v) never met the condition; /metrics:\n%s", series, v, ok, grepLines(body, "acp_broker_"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// mention has u mention the bot in the allowed channel and waits for the
// thread the broker opens; the thread's id is the message's.
func (w *world) mention(u fakediscord.User, text string, opts ...fakediscord.MessageOption) string {
	w.t.Helper()
	id := w.srv.SendMessage(w.channel, u, w.srv.Bot().Mention()+" "+text, opts...)
	w.srv.Await("a thread for "+strconv.Quote(text), func() bool {
		ch, ok := w.srv.Channel(id)
		return ok && ch.IsThread()
	})
	return id
}

// post has u write text in a thread and returns the message's id.
func (w *world) post(thread string, u fakediscord.User, text string) string {
	w.t.Helper()
	return w.srv.SendMessage(thread, u, text)
}

// botMessages are the bot's messages in a channel: answers and notices,
// without permission requests, replies to interactions and replies to
// refused messages.
func (w *world) botMessages(channel string) []fakediscord.Message {
	var out []fakediscord.Message
	for _, m := range w.srv.Messages(channel) {
		if m.Author.ID == w.srv.Bot().ID && m.InteractionID == "" && m.ReferenceID == "" && !strings.HasPrefix(m.Content, "🔐") {
			out = append(out, m)
		}
	}
	return out
}

// answer is one turn's answer as the thread shows it: its messages, up to
// and including the one with the final footer.
type answer struct {
	msgs   []fakediscord.Message
	text   string // the messages' contents, joined by newlines
	footer string // the final line: how the turn ended
}

// restartNotice starts the message a broker posts about a turn it did not
// finish before it restarted.
const restartNotice = "⚠️ The broker restarted"

// answers splits the bot's messages in a thread into finished answers.
// Answers are told apart by their final footers ("-# ✅ …", "-# ❌ …",
// "-# ⏹️ …", "-# ☑️ …"); an answer still streaming is left out.
func (w *world) answers(thread string) []answer {
	var out []answer
	var cur []fakediscord.Message
	for _, m := range w.botMessages(thread) {
		if strings.HasPrefix(m.Content, restartNotice) {
			continue
		}
		cur = append(cur, m)
		if f := footer(m.Content); f != "" {
			a := answer{msgs: cur, footer: f}
			var parts []string
			for _, m := range cur {
				parts = append(parts, m.Content)
			}
			a.text = strings.Join(parts, "\n")
			out = append(out, a)
			cur = nil
		}
	}
	return out
}

// footer returns a message's last line if it says how a turn ended. The
// line shown while a turn is being abandoned ("-# ⏹️ stopping: …") is not
// such a line.
func footer(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	last := lines[len(lines)-1]
	if strings.HasPrefix(last, "-# ⏹️ stopping:") {
		return ""
	}
	for _, mark := range []string{"-# ✅", "-# ❌", "-# ⏹️", "-# ☑️"} {
		if strings.HasPrefix(last, mark) {
			return last
		}
	}
	return ""
}

// awaitAnswers waits until the thread shows n finished answers and
// returns them.
func (w *world) awaitAnswers(thread string, n int) []answer {
	w.t.Helper()
	var got []answer
	w.srv.Await(fmt.Sprintf("%d finished answer(s) in the thread", n), func() bool {
		got = w.answers(thread)
		return len(got) >= n
	})
	return got
}

// awaitBotText waits for a bot message in channel containing text and
// returns it.
func (w *world) awaitBotText(channel, text string) fakediscord.Message {
	w.t.Helper()
	return w.awaitNewBotText(channel, text, 0)
}

// awaitNewBotText is awaitBotText for the bot's messages after the first
// skip.
func (w *world) awaitNewBotText(channel, text string, skip int) fakediscord.Message {
	w.t.Helper()
	var found fakediscord.Message
	w.srv.Await("a bot message with "+strconv.Quote(text), func() bool {
		msgs := w.botMessages(channel)
		for _, m := range msgs[min(skip, len(msgs)):] {
			if strings.Contains(m.Content, text) {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

// seenAt is when a message first showed text (zero if it never did).
func (w *world) seenAt(channel, messageID, text string) time.Time {
	for _, r := range w.srv.Revisions(channel, messageID) {
		if strings.Contains(r.Content, text) {
			return r.At
		}
	}
	return time.Time{}
}

// awaitReaction waits for the bot's reaction emoji on a message.
func (w *world) awaitReaction(channel, messageID, emoji string) {
	w.t.Helper()
	w.srv.Await("the bot's "+emoji+" reaction", func() bool {
		return w.srv.HasReaction(channel, messageID, w.srv.Bot().ID, emoji)
	})
}

// botReactions lists the bot's reactions on a message.
func (w *world) botReactions(channel, messageID string) []string {
	var out []string
	for _, r := range w.srv.Reactions(channel, messageID) {
		if r.UserID == w.srv.Bot().ID {
			out = append(out, r.Emoji)
		}
	}
	return out
}

// slash has u run a slash command in a channel and returns the bot's
// response, checking it came within Discord's 3 seconds.
func (w *world) slash(channel string, u fakediscord.User, name string) fakediscord.InteractionResponse {
	w.t.Helper()
	return w.response(w.srv.SlashCommand(channel, u.ID, name, nil))
}

// response waits for the bot's first response to an interaction.
func (w *world) response(interactionID string) fakediscord.InteractionResponse {
	w.t.Helper()
	if interactionID == "" {
		w.t.Fatal("the interaction was not dispatched")
	}
	w.srv.Await("the interaction answered", func() bool { return len(w.srv.InteractionResponses(interactionID)) > 0 })
	r := w.srv.InteractionResponses(interactionID)[0]
	if r.Late || r.Status >= 300 {
		w.t.Fatalf("interaction answered late or refused: %+v", r)
	}
	return r
}

var statusPID = regexp.MustCompile(`\*\*Agent\*\*: pid (\d+),`)

// agentPID asks /status in a thread for its agent's pid (0: none).
func (w *world) agentPID(thread string, u fakediscord.User) int {
	w.t.Helper()
	r := w.slash(thread, u, "status")
	m := statusPID.FindStringSubmatch(r.Content)
	if m == nil {
		return 0
	}
	pid, _ := strconv.Atoi(m[1])
	return pid
}

// permissionRequest waits for an open permission request (with buttons)
// in a thread that is not one of skip, and returns it.
func (w *world) permissionRequest(thread string, skip ...string) fakediscord.Message {
	w.t.Helper()
	var found fakediscord.Message
	w.srv.Await("a permission request with buttons", func() bool {
		for _, m := range w.srv.Messages(thread) {
			if strings.HasPrefix(m.Content, "🔐 **Permission needed**") && len(m.Buttons()) > 0 && !slices.Contains(skip, m.ID) {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

// agentPIDs lists the fake agent processes (and their children) running
// in this world's agent.cwd.
func (w *world) agentPIDs() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		w.t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || exe != agentBin {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err != nil || !strings.HasPrefix(cwd, w.work+string(filepath.Separator)) && cwd != w.work {
			continue
		}
		if agenttest.Running(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// checkNoAgentsLeft fails the test if an agent process, or a child of
// one, outlived the brokers; it kills what it finds.
func (w *world) checkNoAgentsLeft() {
	for _, pid := range w.agentPIDs() {
		if agenttest.WaitGone(pid, 5*time.Second) {
			continue
		}
		w.t.Errorf("agent process %d is still running after the broker stopped", pid)
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// newSession starts the notice a turn shows when its thread's earlier
// agent session could not be resumed (the fake agent, unless started
// with --load-session, cannot resume one).
const newSession = "ℹ️ The agent could not resume this thread's earlier conversation, so this is a new session: it does not remember what was said before.\n\n"

// freshSession reports whether an answer says it comes from a new agent
// session, and returns its text without that notice.
func freshSession(text string) (string, bool) {
	rest, ok := strings.CutPrefix(text, newSession)
	return rest, ok
}

// within fails the test unless lo <= d <= hi.
func within(t *testing.T, what string, d, lo, hi time.Duration) {
	t.Helper()
	if d < lo || d > hi {
		t.Errorf("%s took %s, want between %s and %s", what, d.Round(time.Millisecond), lo, hi)
	}
}
