package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"acpbroker/internal/agenttest"
)

var fakeAgent string

func TestMain(m *testing.M) {
	execConfined()
	agenttest.Main(m, &fakeAgent)
}

// screen is a terminal the broker writes to; tests wait for text on it.
type screen struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newScreen() *screen { return &screen{changed: make(chan struct{})} }

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	close(s.changed)
	s.changed = make(chan struct{})
	return len(p), nil
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// waitFor waits until the screen shows want and returns how long it took.
func (s *screen) waitFor(t *testing.T, want string, within time.Duration) time.Duration {
	t.Helper()
	return s.waitFrom(t, 0, want, within)
}

// mark is where the screen ends now, for waitFrom.
func (s *screen) mark() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Len()
}

// waitFrom waits until the screen shows want after byte offset from.
func (s *screen) waitFrom(t *testing.T, from int, want string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := time.After(within)
	for {
		s.mu.Lock()
		ok, changed := strings.Contains(s.buf.String()[from:], want), s.changed
		s.mu.Unlock()
		if ok {
			return time.Since(start)
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("screen never showed %q within %s; it shows:\n%s", want, within, s.String())
		}
	}
}

// broker is a broker process run in the test: config from a TOML file and
// the environment, a console on pipes.
type running struct {
	in       *io.PipeWriter
	out, err *screen
	done     chan int
	cancel   context.CancelFunc
}

func writeConfig(t *testing.T, extra string) string {
	t.Helper()
	return writeConfigArgs(t, nil, extra)
}

// writeConfigArgs writes a configuration for the fake agent with args,
// plus extra TOML tables.
func writeConfigArgs(t *testing.T, args []string, extra string) string {
	t.Helper()
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "broker.toml")
	agentUser := agentUser(t, dir)
	text := fmt.Sprintf(`
[log]
format = "json"
level = "warn"
[agent]
command = %q
args = [%s]
cwd = %q
run_as_user = %q
[state]
dir = %q
[http]
listen = "127.0.0.1:0"
%s
`, fakeAgent, strings.Join(quoted, ", "), filepath.Join(dir, "work"), agentUser, filepath.Join(dir, "state"), extra)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// agentUser is the agent.run_as_user of a broker the test runs as root
// (its agents may not be root), with dir, where they work, opened to
// that user; "" otherwise.
func agentUser(t *testing.T, dir string) string {
	t.Helper()
	user := agenttest.AgentUser()
	if user != "" {
		agenttest.Traversable(t, dir)
	}
	return user
}

// agentUserEnv is agentUser as the broker's environment sets it.
func agentUserEnv(t *testing.T, dir string) []string {
	t.Helper()
	if user := agentUser(t, dir); user != "" {
		return []string{"BROKER_AGENT_RUN_AS_USER=" + user}
	}
	return nil
}

func startBroker(t *testing.T, config string, env ...string) *running {
	t.Helper()
	inR, inW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	b := &running{in: inW, out: newScreen(), err: newScreen(), done: make(chan int, 1), cancel: cancel}
	environ := append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	go func() {
		code := run(ctx, []string{"--config", config}, environ, inR, b.out, b.err)
		inR.CloseWithError(fmt.Errorf("broker exited with status %d; stderr:\n%s", code, b.err))
		b.done <- code
	}()
	t.Cleanup(func() {
		cancel()
		inW.Close()
		select {
		case <-b.done:
		case <-time.After(30 * time.Second):
			t.Error("broker did not stop")
		}
	})
	return b
}

func (b *running) say(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(b.in, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// exit closes the console's input and returns the exit status.
func (b *running) exit(t *testing.T) int {
	t.Helper()
	b.in.Close()
	select {
	case code := <-b.done:
		b.done <- code
		return code
	case <-time.After(30 * time.Second):
		t.Fatal("broker did not exit after its input ended")
		return -1
	}
}

// The demo set-up shows a full turn on a terminal: the streamed answer,
// the tool call, the plan, and how the turn ended.
func TestRun_ConsoleShowsAFullTurnWithTheDemoAgent(t *testing.T) {
	b := startBroker(t, writeConfig(t, ""))
	b.say(t, "hello broker")
	b.out.waitFor(t, "✅ done in", 20*time.Second)
	for _, want := range []string{"⏳ `Read notes` running", "✅ `Read notes` done", "☑ Answer it", "You said: hello broker"} {
		if !strings.Contains(b.out.String(), want) {
			t.Errorf("screen lacks %q:\n%s", want, b.out)
		}
	}
	b.say(t, "second message")
	b.out.waitFor(t, "You said: second message", 20*time.Second)
	if code := b.exit(t); code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", code, b.err)
	}
}

// config.example.toml, as `make run` uses it, is a working console setup:
// with only the paths moved (the demo agent's, the workspace, the state
// and the metrics and API ports), a message gets a full answer.
func TestRun_ConfigExampleShowsAFullTurn(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, filepath.Join("..", "..", "config.example.toml"), append(agentUserEnv(t, dir),
		"BROKER_AGENT_COMMAND="+fakeAgent, "BROKER_AGENT_CWD="+filepath.Join(dir, "work"),
		"BROKER_STATE_DIR="+filepath.Join(dir, "state"), "BROKER_HTTP_LISTEN=127.0.0.1:0", "BROKER_API_LISTEN=127.0.0.1:0")...)
	b.say(t, "hello from the example")
	b.out.waitFor(t, "✅ done in", 20*time.Second)
	if !strings.Contains(b.out.String(), "You said: hello from the example") {
		t.Fatalf("screen lacks the answer:\n%s", b.out)
	}
	if code := b.exit(t); code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", code, b.err)
	}
}

// pool.idle_timeout is consumed: with 1s, the agent that answered is
// stopped about a second later, and the next message resumes its session
// in a new process.
func TestRun_IdleTimeoutStopsTheAgentAndTheNextMessageResumes(t *testing.T) {
	b := startBroker(t, writeConfigArgs(t, []string{"--load-session"}, "[pool]\nidle_timeout = \"1s\""), "BROKER_LOG_LEVEL=info")
	b.say(t, "hello")
	b.out.waitFor(t, "✅ done in", 20*time.Second)
	idle := b.err.waitFor(t, "stopping idle agent", 20*time.Second)
	if idle < 500*time.Millisecond || idle > 6*time.Second {
		t.Fatalf("the idle agent was stopped %s after its answer, want about 1s", idle)
	}
	b.err.waitFor(t, "agent process ended", 20*time.Second)
	mark := b.out.mark()
	b.say(t, "still there?")
	b.out.waitFrom(t, mark, "(resumed) You said: still there?", 20*time.Second)
	b.exit(t)
}

// In ask mode the console puts the agent's permission question to the
// user, whose typed choice reaches the agent.
func TestRun_ConsolePermissionQuestionIsAnsweredByTyping(t *testing.T) {
	b := startBroker(t, writeConfig(t, ""))
	b.say(t, "permission")
	b.out.waitFor(t, "Type a number to choose.", 20*time.Second)
	if !strings.Contains(b.out.String(), "  3) Reject\n") {
		t.Fatalf("options not shown:\n%s", b.out)
	}
	b.say(t, "3")
	b.out.waitFor(t, "permission denied: reject", 20*time.Second)
	b.exit(t)
}

// turn.timeout set from the environment is consumed: with 2s, an agent
// that hangs and ignores cancel fails in about 2s plus the cancel grace,
// and the user reads the cause.
func TestRun_TurnTimeoutFromTheEnvironmentEndsAHungTurn(t *testing.T) {
	b := startBroker(t, writeConfig(t, ""), "BROKER_TURN_TIMEOUT=2s", "BROKER_TURN_CANCEL_GRACE=300ms")
	b.say(t, "ignore-cancel")
	b.out.waitFor(t, "working…", 20*time.Second)
	took := b.out.waitFor(t, "❌ failed: timed out after 2s", 20*time.Second)
	if took < 2*time.Second || took > 2*time.Second+300*time.Millisecond+4*time.Second {
		t.Fatalf("the turn failed %s after its first chunk, want about 2.3s", took)
	}
	b.say(t, "stream 1")
	b.out.waitFor(t, "chunk 1", 20*time.Second)
	b.exit(t)
	// The log line of the failed turn names the thread, the agent session
	// and process, the prompt's request id and the cause.
	var ended map[string]any
	for _, line := range strings.Split(b.err.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["message"] == "turn ended" && m["outcome"] == "timeout" {
			ended = m
		}
	}
	if ended == nil {
		t.Fatalf("no log line for the timed-out turn:\n%s", b.err)
	}
	for _, key := range []string{"thread", "session", "pid", "req", "cause"} {
		if v, ok := ended[key]; !ok || v == "" {
			t.Errorf("the turn's log line lacks %q: %v", key, ended)
		}
	}
	if ended["cause"] != "timed out after 2s" {
		t.Errorf("cause = %v", ended["cause"])
	}
}

// A bad configuration is refused before anything starts: the message names
// the key and the reason, and the exit status is 2.
func TestRun_BadConfigurationNamesTheKeyAndExitsNonZero(t *testing.T) {
	cases := []struct {
		name   string
		toml   string
		env    []string
		reason string
	}{
		{"typo", "[turn]\ntimout = \"5m\"", nil, "unknown key(s): turn.timout"},
		{"ceiling over 6h", "[turn]\ntimeout = \"7h\"", nil, "turn.timeout = 7h0m0s is out of range [1s, 6h0m0s]"},
		{"not a duration", "", []string{"BROKER_TURN_CANCEL_GRACE=soon"}, `turn.cancel_grace = "soon" is not a duration`},
		{"bad mode", "[turn]\npermission_mode = \"yolo\"", nil, `turn.permission_mode = "yolo" must be one of ask, allow, deny`},
		{"no channels", "[chat]\nplatform = \"discord\"\n[discord]\ntoken = \"t\"", nil, "discord.allowed_channels is empty"},
		{"secret in agent env", "[agent]\nenv = [\"T=${BROKER_DISCORD_TOKEN}\"]", nil, "agent.env.T: refers to ${BROKER_DISCORD_TOKEN}"},
		{"not TOML", "[turn\n", nil, "toml"},
		{"not TOML, pointed at", "[turn]\ntimeout = 5m\n", nil, "c.toml:2:12: expected the end of the line after the value of turn.timeout, found 'm'"},
		{"a wrong type, pointed at", "[turn]\n\nqueue_size = \"eight\"\n", nil, `c.toml:3: turn.queue_size must be a whole number, not "eight"`},
		{"a wrong type from the environment", "", []string{"BROKER_TURN_QUEUE_SIZE=eight"}, `BROKER_TURN_QUEUE_SIZE=eight: turn.queue_size must be a whole number, not "eight"`},
		{"agent not installed", "", []string{"BROKER_AGENT_COMMAND=claude-agent-acp-missing"}, `agent.command = "claude-agent-acp-missing" is not found on PATH`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, "")
			if tc.toml != "" {
				path = filepath.Join(t.TempDir(), "c.toml")
				os.WriteFile(path, []byte(tc.toml), 0o600)
			}
			env := append([]string{"BROKER_AGENT_COMMAND=" + fakeAgent}, tc.env...)
			var stderr bytes.Buffer
			code := run(context.Background(), []string{"--config", path}, env, strings.NewReader(""), io.Discard, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), tc.reason) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), tc.reason)
			}
		})
	}
}

// --platform overrides chat.platform with a name or a list, separated by
// commas, checked as the key is: the console with another is refused
// naming the key.
func TestRun_PlatformFlagTakesAList(t *testing.T) {
	config := writeConfig(t, "")
	env := []string{"BROKER_AGENT_SANDBOX=none", "PATH=" + os.Getenv("PATH"), "BROKER_DISCORD_TOKEN=t", "BROKER_DISCORD_ALLOWED_CHANNELS=1"}
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"check-config", "--config", config, "--platform", "console,discord"}, env, nil, io.Discard, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "chat.platform = [console discord]: the console is served alone") {
		t.Fatalf("--platform console,discord: exit %d, %q", code, stderr.String())
	}
	stderr.Reset()
	if code := run(context.Background(), []string{"check-config", "--config", config, "--platform", "discord"}, env, nil, io.Discard, &stderr); code != 0 {
		t.Fatalf("--platform discord: exit %d, %q", code, stderr.String())
	}
}

func TestRun_VersionAndCheckConfig(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"version"}, nil, nil, &out, io.Discard); code != 0 || !strings.HasPrefix(out.String(), "acp-broker ") {
		t.Fatalf("version: %d %q", code, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"check-config", "--config", writeConfig(t, "")}, nil, nil, &out, io.Discard); code != 0 {
		t.Fatalf("check-config of a good file: exit %d", code)
	}
	if code := run(context.Background(), []string{"frobnicate"}, nil, nil, io.Discard, io.Discard); code != 2 {
		t.Fatalf("unknown command: exit %d", code)
	}
}

// The example configuration passes check-config (config's
// TestConfigExample_ListsEveryKeyWithItsDefault holds it to the key
// table).
func TestCheckConfig_TheExampleIsValid(t *testing.T) {
	var out bytes.Buffer
	dir := t.TempDir()
	env := append(agentUserEnv(t, dir), "BROKER_AGENT_COMMAND="+fakeAgent, "BROKER_STATE_DIR="+filepath.Join(dir, "state"), "BROKER_AGENT_CWD="+filepath.Join(dir, "work"))
	code := run(context.Background(), []string{"check-config", "--config", "../../config.example.toml"}, env, nil, &out, &out)
	if code != 0 {
		t.Fatalf("check-config of the example: %d\n%s", code, out.String())
	}
}

// turn.tool_timeout and watchdog.interval are consumed: with 2s and 500ms,
// a tool call that never reports progress ends the turn in about 2s,
// far before the ceiling.
func TestRun_ToolTimeoutAndWatchdogIntervalEndAStuckToolCall(t *testing.T) {
	port := freePort(t)
	b := startBroker(t, writeConfig(t, "[turn]\ntool_timeout = \"2s\"\ncancel_grace = \"300ms\"\n[watchdog]\ninterval = \"500ms\""),
		fmt.Sprintf("BROKER_HTTP_LISTEN=127.0.0.1:%d", port), "BROKER_LOG_LEVEL=info")
	b.say(t, "tool-stuck")
	b.out.waitFor(t, "⏳ `Long build` running", 20*time.Second)
	took := b.out.waitFor(t, "❌ failed: a tool call made no progress for 2s: Long build", 20*time.Second)
	if took < 1500*time.Millisecond || took > 2*time.Second+500*time.Millisecond+4*time.Second {
		t.Fatalf("the stuck tool call ended the turn %s after it started, want about 2-2.5s", took)
	}
	// The action is logged with its cause and counted.
	if logs := b.err.String(); !strings.Contains(logs, `"action":"cancel_stuck_tool"`) || !strings.Contains(logs, "a tool call made no progress for 2s") {
		t.Errorf("the watchdog's action is not logged with its cause:\n%s", logs)
	}
	if _, m := get(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", port)); !strings.Contains(m, `acp_broker_watchdog_actions_total{action="cancel_stuck_tool"} 1`+"\n") {
		t.Errorf("/metrics does not count the action:\n%s", m)
	}
	b.exit(t)
}

// The agent's questions on a terminal: its Answer button, a number,
// opens the form, asked field by field, with its choices numbered; a bad
// value is asked again, Enter skips a field that is not required, and
// the typed answers reach the agent. A link is printed, never opened,
// and answered with its Done or Decline button.
func TestRun_ConsoleQuestionsAreAnsweredByTyping(t *testing.T) {
	b := startBroker(t, writeConfig(t, ""))
	b.say(t, "elicit-form")
	b.out.waitFor(t, "❓ The agent asks: Tell me about the release", 20*time.Second)
	b.out.waitFor(t, "  1) ✏️ Answer\n", 5*time.Second)
	b.say(t, "1")
	b.out.waitFor(t, "Colour [1) red, 2) green, 3) blue]: ", 5*time.Second)
	b.say(t, "3")
	b.out.waitFor(t, "Count: ", 5*time.Second)
	b.say(t, "eleven")
	b.out.waitFor(t, "not a whole number; Count: ", 5*time.Second)
	b.say(t, "4")
	b.out.waitFor(t, "Name (required): ", 5*time.Second)
	b.say(t, "")
	b.out.waitFor(t, "Name is required; Name (required): ", 5*time.Second)
	b.say(t, "v2")
	b.out.waitFor(t, "Ship it (yes or no): ", 5*time.Second)
	b.say(t, "")
	b.out.waitFor(t, `answer: accept {"colour":"blue","count":4,"name":"v2"}`, 20*time.Second)

	b.out.waitFor(t, "✅ done in", 5*time.Second)

	from := b.out.mark()
	b.say(t, "elicit-url")
	b.out.waitFrom(t, from, "https://tracker.example/auth?state=x1&next=/t", 20*time.Second)
	b.out.waitFrom(t, from, "  1) Done\n  2) Decline\n", 5*time.Second)
	b.say(t, "1")
	b.out.waitFrom(t, from, "answer: accept", 20*time.Second)
	b.out.waitFrom(t, from, "✅ done in", 5*time.Second)

	from = b.out.mark()
	b.say(t, "elicit-form")
	b.out.waitFrom(t, from, "  1) ✏️ Answer\n", 20*time.Second)
	b.say(t, "1")
	b.out.waitFrom(t, from, "Colour [", 20*time.Second)
	b.say(t, "/decline")
	b.out.waitFrom(t, from, "answer: decline", 20*time.Second)
	b.exit(t)
}

// log.format is consumed: the same start logs JSON lines with "json" and
// lines for people with "console", without colours since the tests'
// stderr is no terminal; the default, "auto", logs JSON there.
func TestRun_TheLogFormatIsAsConfigured(t *testing.T) {
	for _, format := range []string{"json", "console", "auto"} {
		b := startBroker(t, writeConfig(t, ""), "BROKER_LOG_FORMAT="+format, "BROKER_LOG_LEVEL=info")
		b.err.waitFor(t, "serving /metrics", 20*time.Second)
		if code := b.exit(t); code != 0 {
			t.Fatalf("%s: exit status %d; stderr:\n%s", format, code, b.err)
		}
		var line string
		for _, l := range strings.Split(b.err.String(), "\n") {
			if strings.Contains(l, "serving /metrics") {
				line = l
			}
		}
		json := strings.HasPrefix(line, `{"level":"info"`)
		if people := strings.Contains(line, " INF serving") && !strings.Contains(line, "\x1b"); format != "console" && !json || format == "console" && !people {
			t.Errorf("log.format = %q logged %q", format, line)
		}
	}
}
