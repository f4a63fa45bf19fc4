package pool_test

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"acpbroker/acp"
	"acpbroker/internal/agenttest"
	"acpbroker/pool"

	"github.com/rs/zerolog"
)

var mcpServers = []acp.MCPServer{
	{Name: "facts", Command: "/opt/mcp/facts", Args: []string{"--fast"}, Env: []acp.EnvVariable{{Name: "FACTS_KEY", Value: "env-secret-1"}}},
	{Name: "web", Type: acp.MCPHTTP, URL: "https://mcp.example.com/mcp", Headers: []acp.HTTPHeader{{Name: "Authorization", Value: "Bearer header-secret-2"}}},
	{Name: "old", Type: acp.MCPSSE, URL: "https://mcp.example.com/sse"},
}

// servedMCP asks the fake agent which mcpServers its session received,
// and says whether they are want, in the wire's form.
func servedMCP(t *testing.T, a *pool.Agent, want []acp.MCPServer) (string, bool) {
	t.Helper()
	got := prompt(t, a, "mcp-servers")
	var servers []acp.MCPServer
	if err := json.Unmarshal([]byte(got), &servers); err != nil {
		t.Fatalf("the agent's mcpServers %q: %v", got, err)
	}
	g, _ := json.Marshal(servers)
	w, _ := json.Marshal(want)
	return got, string(g) == string(w)
}

// Every session/new and session/load carries the configured MCP servers
// the agent can use; an http or sse server it does not advertise is left
// out with a warning naming it, and the session starts all the same.
func TestPool_SessionsGetTheConfiguredMCPServersTheAgentSupports(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		want   []acp.MCPServer
		warned string
	}{
		{"stdio only", nil, mcpServers[:1], "web (http), old (sse)"},
		{"http", []string{"-mcp-http"}, mcpServers[:2], "old (sse)"},
		{"all", []string{"-mcp-http", "-mcp-sse"}, mcpServers, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logged agenttest.Buffer
			p := newPool(t, pool.Config{
				Args:       append([]string{"-load-session"}, tc.args...),
				MCPServers: mcpServers,
				Logger:     zerolog.New(io.MultiWriter(&logged, zerolog.NewTestWriter(t))).Level(zerolog.WarnLevel),
			})
			a := acquire(t, p, "t1")
			if got, ok := servedMCP(t, a, tc.want); !ok {
				t.Fatalf("session/new got %s, want %v", got, tc.want)
			}
			p.Release(a, true)
			a = acquire(t, p, "t1")
			if !a.Resumed {
				t.Fatal("the second agent did not load the session")
			}
			if got, ok := servedMCP(t, a, tc.want); !ok {
				t.Fatalf("session/load got %s, want %v", got, tc.want)
			}
			p.Release(a, false)

			log := logged.String()
			warnings := strings.Count(log, "mcpCapabilities")
			if tc.warned == "" && warnings != 0 {
				t.Fatalf("warned with every transport advertised:\n%s", log)
			}
			if tc.warned != "" && warnings != 2 { // one per agent start
				t.Fatalf("%d warnings for two agent starts:\n%s", warnings, log)
			}
			for _, name := range strings.Split(tc.warned, ", ") {
				if !strings.Contains(log, name) {
					t.Errorf("the warning does not name %s:\n%s", name, log)
				}
			}
			if strings.Contains(log, "secret") || strings.Contains(log, "example.com") {
				t.Errorf("the log shows server values:\n%s", log)
			}
		})
	}
}

// In the sandbox the agent starts its stdio MCP servers itself, so their
// programs are shown to it read-only: their files, not what is beside
// them in their directories, and nothing it writes there reaches them.
func TestSandbox_AgentSeesItsMCPServersPrograms(t *testing.T) {
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil {
		t.Skip("bubblewrap is not installed")
	}
	tools := t.TempDir()
	program := filepath.Join(tools, "facts-mcp")
	if err := os.WriteFile(program, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	beside := filepath.Join(tools, "facts.db")
	if err := os.WriteFile(beside, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := newPool(t, pool.Config{Env: []string{"PATH=/usr/bin:/bin"}, Sandbox: pool.Sandbox{Bwrap: "bwrap"},
		MCPServers: []acp.MCPServer{{Name: "facts", Command: program}}})
	a := acquire(t, p, "t")
	defer p.Release(a, false)
	got := prompt(t, a, "probe r:"+program+" w:"+program+" r:"+beside+" w:"+filepath.Join(tools, "planted"))
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 4 || !strings.HasSuffix(lines[0], " ok") || !strings.Contains(lines[1], "denied") || !strings.Contains(lines[2], "denied") {
		t.Fatalf("probes in the sandbox:\n%s\nwant the server's program readable and read-only, nothing beside it", got)
	}
	if _, err := os.Stat(filepath.Join(tools, "planted")); err == nil {
		t.Fatal("the agent wrote into the directory of an MCP server's program")
	}
}
