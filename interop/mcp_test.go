package interop

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/internal/agenttest"
	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakeanthropic"
	"acpbroker/pool"

	"github.com/rs/zerolog"
)

// buildFactsMCP compiles testdata/factsmcp, a stdio MCP server with one
// tool, into a temporary directory.
func buildFactsMCP(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "factsmcp")
	out, err := exec.Command("go", "build", "-o", bin, "./testdata/factsmcp").CombinedOutput()
	if err != nil {
		t.Fatalf("build factsmcp: %v\n%s", err, out)
	}
	return bin
}

// toolNames lists the names of the tools a Messages API request offered.
func toolNames(t *testing.T, body []byte) []string {
	t.Helper()
	var b struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		t.Fatalf("request body: %v", err)
	}
	var out []string
	for _, tool := range b.Tools {
		out = append(out, tool.Name)
	}
	return out
}

// TestMCPServerReachesTheModel proves that an MCP server given in
// session/new is started by claude-agent-acp with the env it was given,
// that its tool is offered to the model as mcp__<server>__<tool>, and that
// the model's call of it runs the server's tool, whose answer (carrying a
// nonce only the server's environment had) comes back in the next request.
// "direct" drives the agent over its stdio; "pool" starts it as the broker
// does, from pool.Config.MCPServers, in bubblewrap when there is one: the
// server's program, in a temporary directory, is there only because the
// sandbox shows it. "broker" runs the broker binary on the fake Discord
// from a TOML configuration whose profile names the server in
// [[agents.claude.mcp_servers]], and asks in a thread.
func TestMCPServerReachesTheModel(t *testing.T) {
	const tool = "mcp__facts__lookup_fact"
	setup := func(t *testing.T, logDir string) (*subject, acp.MCPServer, string) {
		s := claude(t)
		nonce := make([]byte, 8)
		rand.Read(nonce)
		fact := "nonce-" + hex.EncodeToString(nonce)
		s.anthropic.Enqueue(
			fakeanthropic.ToolUse(tool, map[string]string{"topic": "the broker"}),
			fakeanthropic.Text("The server says so."),
		)
		server := acp.MCPServer{Name: "facts", Command: buildFactsMCP(t), Env: []acp.EnvVariable{
			{Name: "FACTS_NONCE", Value: fact}, {Name: "FACTS_LOG", Value: filepath.Join(logDir, "calls.log")}}}
		return s, server, fact
	}
	const question = "What is the fact about the broker? Use the facts server."

	t.Run("direct", func(t *testing.T) {
		logDir := t.TempDir()
		s, server, fact := setup(t, logDir)
		ctx := testContext(t)
		a := startAgent(t, s.spec)
		init, sid, _ := a.handshake(ctx, server)
		t.Logf("claude-agent-acp mcpCapabilities: %+v", init.AgentCapabilities.MCPCapabilities)
		appr := newApprover(allowOnce)
		res := a.startTurn(ctx, sid, question, appr).wait()
		checkFactReachedModel(t, s, res, tool, fact, logDir, appr)
	})

	t.Run("pool", func(t *testing.T) {
		work := t.TempDir()
		logDir := filepath.Join(work, "mcp") // the thread's workspace
		s, server, fact := setup(t, logDir)
		env, err := agentEnv(s.spec.Env)
		if err != nil {
			t.Fatal(err)
		}
		sandbox := interopSandbox(t, env)
		// The agent's TMPDIR is the real /tmp, which holds the server's
		// program: without it, only the pool's MCP binding shows the
		// program (the agent has a /tmp of its own anyway).
		sandbox.ReadWrite = slices.DeleteFunc(sandbox.ReadWrite, func(p string) bool { return p == os.TempDir() })
		p := pool.New(pool.Config{
			Sandbox:      sandbox,
			Command:      s.spec.Command,
			Args:         s.spec.Args,
			Env:          env,
			WorkDir:      work,
			PerThreadDir: true,
			MaxSessions:  1,
			StartTimeout: startTimeout,
			ExitGrace:    500 * time.Millisecond,
			MCPServers:   []acp.MCPServer{server},
			Logger:       zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
		})
		defer p.Close()
		ctx := testContext(t)
		pa, err := p.Acquire(ctx, "mcp", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Release(pa, false)
		t.Logf("sandboxed: %v; the agent's program is %s", sandbox.Enabled(), s.spec.Command)
		appr := newApprover(allowOnce)
		a := &agent{t: t, name: "claude-agent-acp (pool)", conn: pa.Conn}
		res := a.startTurn(ctx, pa.SessionID, question, appr).wait()
		checkFactReachedModel(t, s, res, tool, fact, logDir, appr)
	})

	t.Run("broker", func(t *testing.T) {
		bins, err := brokertest.Build(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		logDir := t.TempDir()
		s, server, fact := setup(t, logDir)
		var env []string
		var home string
		for _, kv := range s.spec.Env {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "PATH", "USER", "LANG", "TMPDIR":
			case "HOME":
				home = v
				env = append(env, kv)
			default:
				env = append(env, kv)
			}
		}
		pkgs, err := filepath.Abs("../testdata/interop")
		if err != nil {
			t.Fatal(err)
		}
		conf := brokertest.Settings{
			"agents.default":              "claude",
			"agents.claude.description":   "claude-agent-acp on a fake model",
			"agents.claude.command":       s.spec.Command,
			"agents.claude.args":          s.spec.Args,
			"agents.claude.env":           env,
			"agents.claude.start_timeout": startTimeout.String(),
			"agents.claude.sandbox_ro":    []string{pkgs},
			"agents.claude.sandbox_rw":    []string{home, logDir},
			"agents.claude.allow_hosts":   s.allow,
			"turn.permission_timeout":     "30s",
		}
		if err := (pool.Sandbox{Bwrap: "bwrap"}).Check(10*time.Second, nil); err != nil {
			t.Logf("the agent runs unconfined: %v", err)
			conf["agent.sandbox"] = "none"
		}
		if agenttest.AgentUser() != "" {
			// As root, the broker runs its agents as another user, who
			// must reach the server's program and own what it writes.
			agenttest.Traversable(t, filepath.Dir(bins.Agent))
			agenttest.Traversable(t, filepath.Dir(server.Command))
			agenttest.GiveToAgentUser(t, home)
			agenttest.GiveToAgentUser(t, logDir)
		}
		w := brokertest.NewWorld(t, bins, brokertest.Options{Conf: conf})
		w.Raw = fmt.Sprintf(`
[[agents.claude.mcp_servers]]
name = %q
command = %q
env = [%q, %q]

[[agents.claude.permissions]]
action = "allow"
`, server.Name, server.Command, "FACTS_NONCE="+server.Env[0].Value, "FACTS_LOG="+server.Env[1].Value)
		ctx := testContext(t)
		b, err := w.Start(ctx)
		if err != nil {
			t.Fatal(err)
		}
		thread, err := w.Discord.Mention(ctx, brokertest.Alice, question)
		if err != nil {
			t.Fatal(err)
		}
		answers, err := w.Discord.AwaitAnswers(ctx, thread, 1)
		if err != nil {
			t.Fatalf("%v; broker log:\n%s", err, b.Log.Tail(16<<10))
		}
		a := answers[0]
		t.Logf("the thread shows: %q", a.Text)
		if !strings.Contains(a.Text, "The server says so.") || !strings.HasPrefix(a.Footer, "-# ✅") {
			t.Fatalf("the thread shows %q; model requests:\n%s", a.Text, strings.Join(s.modelRequests(), "\n"))
		}
		checkModelGotTheFact(t, s, tool, fact, logDir)
		if strings.Contains(a.Text, "Allowed “"+tool+"” by rule 1 (any tool call).") {
			t.Logf("permission asked for %q, allowed by the profile's rule", tool)
		} else {
			t.Log("no permission asked for the MCP tool")
		}
		if lines := b.Log.Grep(fact); len(lines) > 0 {
			t.Errorf("the broker's log shows the server's env value: %s", lines[0])
		}
	})
}

// checkFactReachedModel checks a turn in which the model called tool once:
// the request that got the tool_use offered the tool, and the next one
// carried its result with fact; the MCP server logged its calls in logDir.
func checkFactReachedModel(t *testing.T, s *subject, res turnResult, tool, fact, logDir string, appr *approver) {
	t.Helper()
	if res.Err != nil || res.Stop != acp.StopEndTurn {
		t.Fatalf("turn: stop %q, err %v; model requests:\n%s", res.Stop, res.Err, strings.Join(s.modelRequests(), "\n"))
	}
	checkModelGotTheFact(t, s, tool, fact, logDir)
	select {
	case req := <-appr.seen:
		t.Logf("permission asked for %q", req.ToolCall.Title)
	default:
		t.Log("no permission asked for the MCP tool")
	}
}

// checkModelGotTheFact checks that the model called tool once: the
// request that got the tool_use offered the tool, and the next one
// carried its result with fact; the MCP server logged its calls in
// logDir.
func checkModelGotTheFact(t *testing.T, s *subject, tool, fact, logDir string) {
	t.Helper()
	var asked, answered *fakeanthropic.Request
	reqs := s.anthropic.Requests()
	for i := range reqs {
		r := &reqs[i]
		if r.Path != "/v1/messages" {
			continue
		}
		switch {
		case asked == nil && r.Served == "tool_use":
			asked = r
		case asked != nil && answered == nil && len(r.ToolResults) > 0:
			answered = r
		}
	}
	if asked == nil || answered == nil {
		t.Fatalf("the model was not asked with the tool and then answered; requests:\n%s", strings.Join(s.modelRequests(), "\n"))
	}
	names := toolNames(t, asked.Body)
	t.Logf("request #%d offered %d tools, %s among them: %v", asked.Seq, len(names), tool, slices.Contains(names, tool))
	if !slices.Contains(names, tool) {
		t.Fatalf("request #%d did not offer %s; its tools: %v", asked.Seq, tool, names)
	}
	var result *fakeanthropic.ToolResult
	for i, r := range answered.ToolResults {
		if strings.Contains(r.Content, fact) {
			result = &answered.ToolResults[i]
		}
	}
	if result == nil || result.IsError {
		t.Fatalf("request #%d tool results %+v: want the answer of %s with %s", answered.Seq, answered.ToolResults, tool, fact)
	}
	t.Logf("request #%d carried the tool_result %q", answered.Seq, result.Content)

	log, _ := os.ReadFile(filepath.Join(logDir, "calls.log"))
	t.Logf("the MCP server was asked: %s", strings.Join(strings.Fields(string(log)), ", "))
	if !strings.Contains(string(log), "tools/call") {
		t.Fatalf("the MCP server logged no tools/call:\n%s", log)
	}
}
