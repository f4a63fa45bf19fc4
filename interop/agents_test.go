package interop

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"acpbroker/internal/fakeanthropic"
	"acpbroker/internal/fakeopenai"
)

// subject is one real agent under test, with the fake model behind it (if
// it has one) and what the tests expect of it.
type subject struct {
	spec agentSpec
	// model is false for the SDK example agent, whose turns are scripted
	// inside the agent.
	model bool

	// text scripts the next turn's answer, streamed in these chunks.
	text func(chunks ...string)
	// command scripts a tool call that runs cmd in a shell, then a text
	// answer once the tool's output came back.
	command func(cmd, finalText string)
	// hang scripts a model call that never answers.
	hang func()
	// hanging waits until a scripted hang is in flight.
	hanging func(ctx context.Context) error
	// hangAborted reports whether the model request that hung has been
	// closed by the agent.
	hangAborted func() bool
	// toolOutputs is the tool output in the model's latest request (each
	// request carries the whole conversation).
	toolOutputs func() []string
	// modelRequests describes the requests the fake received.
	modelRequests func() []string
	// lastModel is the "model" of the latest request the model server got
	// ("" for the SDK example, which has none).
	lastModel func() string
	// lastBody is the body of the latest model request, which carries
	// the whole conversation ("" for the SDK example).
	lastBody func() string
	// scriptUsed waits until every scripted reply has been served in full.
	scriptUsed func(ctx context.Context) error
	// anthropic is the fake Messages API behind claude-agent-acp (nil for
	// the others), for tests about that agent alone.
	anthropic *fakeanthropic.Server
	// allow is what the agent's profile must allow it to reach behind the
	// broker's proxy: its fake model's address (none for the SDK example).
	allow []string

	expect expectations
}

// expectations are the observed behaviours each test pins down.
type expectations struct {
	// permissionID is the JSON type of the agent's request ids.
	permissionID string
	// cancelledPermissionStop is the stop reason after session/cancel and
	// then a "cancelled" permission answer.
	cancelledPermissionStop string
	// staleAnswerAfterCancel: the prompt after a cancelled turn is
	// answered at once with end_turn, and its real output follows the
	// answer.
	staleAnswerAfterCancel bool
	// exitsOnEOF and exitsOnEOFWithSession: the agent exits when its
	// stdin closes (before any session / with a live session).
	exitsOnEOF, exitsOnEOFWithSession bool
	// forksOnlyInPlace: the agent offers session/fork but forks a
	// session only in the directory it worked in, not in another (a
	// fork's copy of the workspace): claude-agent-acp 0.23.1 looks the
	// session up under the new cwd's project and does not find it.
	forksOnlyInPlace bool
}

// subjects lists the agents; each test runs one subtest per agent.
var subjects = []struct {
	name string
	make func(t *testing.T) *subject
}{
	{"sdk-example", sdkExample},
	{"codex-acp", codex},
	{"claude-agent-acp", claude},
}

func forEachAgent(t *testing.T, f func(t *testing.T, s *subject)) {
	for _, sub := range subjects {
		t.Run(sub.name, func(t *testing.T) { f(t, sub.make(t)) })
	}
}

func requireNode(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not on PATH")
	}
}

// sdkExample is the example agent of @agentclientprotocol/sdk 1.9.0. It
// has no model: every turn streams a fixed text, reports two tool calls
// and asks permission for the second, one second between steps.
func sdkExample(t *testing.T) *subject {
	t.Helper()
	script := filepath.Join(modulesDir(t), "@agentclientprotocol", "sdk", "dist", "examples", "agent.js")
	requireFile(t, script, "the ACP SDK example agent (@agentclientprotocol/sdk)")
	requireNode(t)
	none := func() {}
	return &subject{
		spec: agentSpec{
			Name:    "sdk-example",
			Command: "node",
			Args:    []string{script},
			Env:     baseEnv(t.TempDir()),
		},
		text:          func(...string) {},
		command:       func(string, string) {},
		hang:          none,
		toolOutputs:   func() []string { return nil },
		modelRequests: func() []string { return nil },
		lastModel:     func() string { return "" },
		lastBody:      func() string { return "" },
		scriptUsed:    func(context.Context) error { return nil },
		expect: expectations{
			permissionID:            "number",
			cancelledPermissionStop: "end_turn",
			exitsOnEOF:              true,
			exitsOnEOFWithSession:   true,
		},
	}
}

// codexModel is not one of codex's known models, so codex uses fallback
// metadata and says so in an agent_message_chunk at the start of each turn
// (a known slug such as gpt-5.4-mini avoids that warning).
const codexModel = "gpt-fake"

// codex is codex-acp (@zed-industries/codex-acp-linux-x64 0.16.0) talking
// to the fake Responses API. CODEX_HOME is a fresh directory and the
// provider is not "openai", so no API key or login is involved.
func codex(t *testing.T) *subject {
	t.Helper()
	bin := filepath.Join(modulesDir(t), "@zed-industries", "codex-acp-linux-x64", "bin", "codex-acp")
	requireFile(t, bin, "codex-acp (@zed-industries/codex-acp-linux-x64)")
	fake, err := fakeopenai.Start(fakeopenai.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	home := t.TempDir()
	codexHome := filepath.Join(home, ".codex")
	if err := os.Mkdir(codexHome, 0o700); err != nil {
		t.Fatal(err)
	}
	return &subject{
		spec: agentSpec{
			Name:    "codex-acp",
			Command: bin,
			Args: []string{
				"-c", "model_provider=fake",
				"-c", `model_providers.fake={name="fake",base_url="` + fake.URL() + `",wire_api="responses"}`,
				"-c", "model=" + codexModel,
			},
			Env: append(baseEnv(home), "CODEX_HOME="+codexHome, "RUST_LOG=error", "NO_COLOR=1"),
		},
		model: true,
		allow: []string{strings.TrimPrefix(fake.BaseURL(), "http://")},
		text:  func(chunks ...string) { fake.Enqueue(fakeopenai.Text(chunks...)) },
		command: func(cmd, final string) {
			fake.Enqueue(fakeopenai.ExecCommand(cmd, "the interop test needs this command"), fakeopenai.Text(final))
		},
		hang: func() { fake.Enqueue(fakeopenai.Hang()) },
		hanging: func(ctx context.Context) error {
			return fake.Wait(ctx, func(rs []fakeopenai.Request) bool {
				for _, r := range rs {
					if r.Served == "hang" {
						return true
					}
				}
				return false
			})
		},
		hangAborted: func() bool {
			for _, r := range fake.Requests() {
				if r.Served == "hang" {
					return r.ClientGone
				}
			}
			return false
		},
		toolOutputs: func() []string {
			var out []string
			for _, r := range fake.Requests() {
				out = out[:0]
				for _, o := range r.ToolOutputs {
					out = append(out, o.Output)
				}
			}
			return out
		},
		lastModel: func() string {
			model := ""
			for _, r := range fake.Requests() {
				if strings.HasSuffix(r.Path, "/responses") {
					model = r.Model
				}
			}
			return model
		},
		lastBody: func() string {
			body := ""
			for _, r := range fake.Requests() {
				if strings.HasSuffix(r.Path, "/responses") {
					body = string(r.Body)
				}
			}
			return body
		},
		modelRequests: func() []string {
			var out []string
			for _, r := range fake.Requests() {
				out = append(out, describe(r.Method, r.Path, r.Model, r.Tools, r.Served, len(r.ToolOutputs), r.ClientGone, r.End.IsZero()))
			}
			return out
		},
		scriptUsed: func(ctx context.Context) error {
			return fake.Wait(ctx, func(rs []fakeopenai.Request) bool {
				return fake.Pending() == 0 && len(rs) > 0 && !rs[len(rs)-1].End.IsZero()
			})
		},
		expect: expectations{
			permissionID:            "string",
			cancelledPermissionStop: "cancelled",
		},
	}
}

// claude is claude-agent-acp (@zed-industries/claude-agent-acp 0.23.1),
// which runs the Claude Code CLI of @anthropic-ai/claude-agent-sdk as a
// child process, talking to the fake Messages API.
func claude(t *testing.T) *subject {
	t.Helper()
	script := filepath.Join(modulesDir(t), "@zed-industries", "claude-agent-acp", "dist", "index.js")
	requireFile(t, script, "claude-agent-acp (@zed-industries/claude-agent-acp)")
	requireNode(t)
	fake, err := fakeanthropic.Start(fakeanthropic.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	home := t.TempDir()
	env := append(baseEnv(home),
		"CLAUDE_CONFIG_DIR="+filepath.Join(home, ".claude"),
		"ANTHROPIC_BASE_URL="+fake.URL(),
		"ANTHROPIC_API_KEY=sk-ant-fake",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
	)
	if os.Geteuid() == 0 {
		// As root, Claude Code refuses to start unless told it is sandboxed.
		env = append(env, "IS_SANDBOX=1")
	}
	return &subject{
		spec: agentSpec{
			Name:    "claude-agent-acp",
			Command: "node",
			Args:    []string{script},
			Env:     env,
		},
		model:     true,
		anthropic: fake,
		allow:     []string{strings.TrimPrefix(fake.BaseURL(), "http://")},
		lastModel: func() string {
			model := ""
			for _, r := range fake.Requests() {
				if strings.HasSuffix(r.Path, "/messages") && r.Served != "count_tokens" {
					model = r.Model
				}
			}
			return model
		},
		lastBody: func() string {
			body := ""
			for _, r := range fake.Requests() {
				if strings.HasSuffix(r.Path, "/messages") && r.Served != "count_tokens" {
					body = string(r.Body)
				}
			}
			return body
		},
		text: func(chunks ...string) { fake.Enqueue(fakeanthropic.Text(chunks...)) },
		command: func(cmd, final string) {
			fake.Enqueue(fakeanthropic.Bash(cmd, "the interop test needs this command"), fakeanthropic.Text(final))
		},
		hang: func() { fake.Enqueue(fakeanthropic.Hang()) },
		hanging: func(ctx context.Context) error {
			return fake.Wait(ctx, func(rs []fakeanthropic.Request) bool {
				for _, r := range rs {
					if r.Served == "hang" {
						return true
					}
				}
				return false
			})
		},
		hangAborted: func() bool {
			for _, r := range fake.Requests() {
				if r.Served == "hang" {
					return r.ClientGone
				}
			}
			return false
		},
		toolOutputs: func() []string {
			var out []string
			for _, r := range fake.Requests() {
				if r.Path != "/v1/messages" {
					continue
				}
				out = out[:0]
				for _, o := range r.ToolResults {
					s := o.Content
					if o.IsError {
						s = "error: " + s
					}
					out = append(out, s)
				}
			}
			return out
		},
		modelRequests: func() []string {
			var out []string
			for _, r := range fake.Requests() {
				out = append(out, describe(r.Method, r.Path, r.Model, r.Tools, r.Served, len(r.ToolResults), r.ClientGone, r.End.IsZero()))
			}
			return out
		},
		scriptUsed: func(ctx context.Context) error {
			return fake.Wait(ctx, func(rs []fakeanthropic.Request) bool {
				return fake.Pending() == 0 && len(rs) > 0 && !rs[len(rs)-1].End.IsZero()
			})
		},
		expect: expectations{
			permissionID:            "number",
			cancelledPermissionStop: "cancelled",
			staleAnswerAfterCancel:  true,
			exitsOnEOF:              true,
			forksOnlyInPlace:        true,
		},
	}
}

func describe(method, path, model string, tools int, served string, results int, gone, open bool) string {
	var b strings.Builder
	b.WriteString(method + " " + path)
	if model != "" {
		b.WriteString(" model=" + model)
	}
	if tools > 0 {
		b.WriteString(" tools=" + strconv.Itoa(tools))
	}
	if results > 0 {
		b.WriteString(" tool_results=" + strconv.Itoa(results))
	}
	b.WriteString(" -> " + served)
	if gone {
		b.WriteString(" (client went away)")
	}
	if open {
		b.WriteString(" (still open)")
	}
	return b.String()
}
