package config

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"acpbroker/acp"
)

// mcpConfig writes a configuration whose agent is the fake agent, with
// extra appended (TOML, inside [agent] until it opens a table), and
// returns its path.
func mcpConfig(t *testing.T, extra string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "broker.toml")
	text := fmt.Sprintf("[agent]\ncommand = %q\n%s", fakeAgent, extra)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// mcpBin returns a PATH directory holding an executable "facts-mcp".
func mcpBin(t *testing.T) (dir, program string) {
	t.Helper()
	dir = t.TempDir()
	program = filepath.Join(dir, "facts-mcp")
	if err := os.WriteFile(program, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, program
}

// [[agent.mcp_servers]] tables become the servers given to agents: the
// stdio command as written (the broker finds it as it finds
// agent.command), ${VAR} expanded from the
// broker's environment in args, env, url and headers, and env names kept
// as written, in either of env's forms.
func TestLoadConfig_MCPServersAsWritten(t *testing.T) {
	bin, program := mcpBin(t)
	path := mcpConfig(t, `
[[agent.mcp_servers]]
name = "facts"
command = "facts-mcp"
args = ["--db", "${HOME}/facts.db"]
env = ["FACTS_TOKEN=${FACTS_TOKEN}", "Mixed_Case=1"]

[[agent.mcp_servers]]
name = "facts2"
type = "stdio"
command = "`+program+`"
env = { API_KEY = "k-${FACTS_TOKEN}", lower = "x" }

[[agent.mcp_servers]]
name = "docs"
type = "http"
url = "https://${DOCS_HOST}/mcp"
headers = { Authorization = "Bearer ${DOCS_TOKEN}", "X-Team" = "blue" }

[[agent.mcp_servers]]
name = "legacy"
type = "sse"
url = "http://127.0.0.1:9000/sse"
`)
	c, err := Load(path, []string{"PATH=/nonexistent:" + bin, "HOME=/home/u", "FACTS_TOKEN=ft-123456",
		"DOCS_HOST=docs.example.com", "DOCS_TOKEN=dt-abcdef"})
	if err != nil {
		t.Fatal(err)
	}
	want := []acp.MCPServer{
		{Name: "facts", Type: acp.MCPStdio, Command: "facts-mcp", Args: []string{"--db", "/home/u/facts.db"},
			Env: []acp.EnvVariable{{Name: "FACTS_TOKEN", Value: "ft-123456"}, {Name: "Mixed_Case", Value: "1"}}},
		{Name: "facts2", Type: acp.MCPStdio, Command: program,
			Env: []acp.EnvVariable{{Name: "API_KEY", Value: "k-ft-123456"}, {Name: "lower", Value: "x"}}},
		{Name: "docs", Type: acp.MCPHTTP, URL: "https://docs.example.com/mcp",
			Headers: []acp.HTTPHeader{{Name: "Authorization", Value: "Bearer dt-abcdef"}, {Name: "X-Team", Value: "blue"}}},
		{Name: "legacy", Type: acp.MCPSSE, URL: "http://127.0.0.1:9000/sse"},
	}
	got, _ := json.Marshal(c.Agent.MCPServers)
	wantJSON, _ := json.Marshal(want)
	if string(got) != string(wantJSON) {
		t.Fatalf("servers\n%s\nwant\n%s", got, wantJSON)
	}

	c, err = Load(mcpConfig(t, ""), []string{"PATH=" + bin})
	if err != nil || len(c.Agent.MCPServers) != 0 {
		t.Fatalf("no tables: %v, %v", c.Agent.MCPServers, err)
	}
}

// Each mistake in a server's table is refused with the key and the
// table's index named.
func TestLoadConfig_MCPServerMistakesNameTheKeyAndIndex(t *testing.T) {
	bin, _ := mcpBin(t)
	stdio := "[[agent.mcp_servers]]\nname = \"a\"\ncommand = \"facts-mcp\"\n"
	for _, tc := range []struct {
		name, toml, want string
	}{
		{"no name", "[[agent.mcp_servers]]\ncommand = \"facts-mcp\"",
			"agent.mcp_servers[0].name is required"},
		{"duplicate name", stdio + stdio,
			`agent.mcp_servers[1].name = "a" is already the name of agent.mcp_servers[0]`},
		{"url not http", "[[agent.mcp_servers]]\nname = \"w\"\ntype = \"http\"\nurl = \"ftp://example.com/mcp\"",
			`agent.mcp_servers[0].url = "ftp://example.com/mcp" is not an http(s) URL`},
		{"url with no host", "[[agent.mcp_servers]]\nname = \"w\"\ntype = \"sse\"\nurl = \"localhost:9000\"",
			`agent.mcp_servers[0].url = "localhost:9000" is not an http(s) URL`},
		{"http without url", "[[agent.mcp_servers]]\nname = \"w\"\ntype = \"http\"",
			"agent.mcp_servers[0].url is required for an http server"},
		{"stdio without command", "[[agent.mcp_servers]]\nname = \"a\"",
			"agent.mcp_servers[0].command is required for a stdio server"},
		{"http with command", "[[agent.mcp_servers]]\nname = \"w\"\ntype = \"http\"\nurl = \"https://example.com\"\ncommand = \"facts-mcp\"",
			"agent.mcp_servers[0].command is for stdio servers; this one is http"},
		{"stdio with url", stdio + "url = \"https://example.com\"",
			"agent.mcp_servers[0].url is for http and sse servers; this one is stdio"},
		{"stdio with headers", stdio + "headers = { A = \"b\" }",
			"agent.mcp_servers[0].headers is for http and sse servers"},
		{"unknown type", stdio + "type = \"websocket\"",
			`agent.mcp_servers[0].type = "websocket" must be one of stdio, http, sse`},
		{"unknown keys", stdio + "commmand = \"x\"\nenviron = []",
			"agent.mcp_servers[0] has unknown key(s): commmand, environ"},
		{"env entry", stdio + "env = [\"NOEQUALS\"]",
			`agent.mcp_servers[0].env entry "NOEQUALS" must look like NAME=value`},
		{"env value", stdio + "env = { N = 1 }",
			"agent.mcp_servers[0].env.N must be a string"},
		{"headers as a list", "[[agent.mcp_servers]]\nname = \"w\"\ntype = \"http\"\nurl = \"https://example.com\"\nheaders = [\"A=b\"]",
			"agent.mcp_servers[0].headers must be a table"},
		{"args", stdio + "args = \"--x\"",
			"agent.mcp_servers[0].args must be a list of strings"},
		{"a broker secret", stdio + "env = [\"T=${BROKER_DISCORD_TOKEN}\"]",
			"agent.mcp_servers[0].env.T refers to ${BROKER_DISCORD_TOKEN}, a broker secret"},
		{"one table", "[agent.mcp_servers]\nname = \"a\"\ncommand = \"facts-mcp\"",
			"agent.mcp_servers must be an array of tables"},
		{"not a table", "mcp_servers = [\"a\"]", // in [agent]
			"agent.mcp_servers[0] must be a table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(mcpConfig(t, tc.toml), []string{"PATH=" + bin, "BROKER_DISCORD_TOKEN=tok"})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v\nwant one saying %q", err, tc.want)
			}
		})
	}

	_, err := Load(mcpConfig(t, ""), []string{"PATH=" + bin, "BROKER_AGENT_MCP_SERVERS=a"})
	if err == nil || !strings.Contains(err.Error(), "agent.mcp_servers cannot be set from the environment") {
		t.Fatalf("BROKER_AGENT_MCP_SERVERS: err = %v", err)
	}
}

// Env and header values are secrets: a reload that changes them says so
// by key only, and one that renames a server shows none of them, even
// unmasked.
func TestDiff_MCPServerValuesAreNamedNotShown(t *testing.T) {
	bin, _ := mcpBin(t)
	table := func(envValue, header string) string {
		return `
[[agent.mcp_servers]]
name = "facts"
command = "facts-mcp"
env = ["FACTS_TOKEN=` + envValue + `"]
[[agent.mcp_servers]]
name = "docs"
type = "http"
url = "https://docs.example.com/mcp"
headers = { Authorization = "` + header + `" }
`
	}
	environ := []string{"PATH=" + bin}
	old, err := Load(mcpConfig(t, table("env-secret-1", "Bearer header-secret-1")), environ)
	if err != nil {
		t.Fatal(err)
	}
	changed, err := Load(mcpConfig(t, table("env-secret-2", "Bearer header-secret-2")), environ)
	if err != nil {
		t.Fatal(err)
	}
	applied, restart := Diff(old, changed, unmasked)
	diff := strings.Join(append(applied, restart...), "\n")
	if diff != ("agent." + mcpServersField + mcpSecretsSuffix) {
		t.Fatalf("changed values: diff %q, want only %q", diff, ("agent." + mcpServersField + mcpSecretsSuffix))
	}

	renamed, err := Load(mcpConfig(t, strings.Replace(table("env-secret-1", "Bearer header-secret-1"), `"docs"`, `"wiki"`, 1)), environ)
	if err != nil {
		t.Fatal(err)
	}
	applied, restart = Diff(old, renamed, unmasked)
	diff = strings.Join(append(applied, restart...), "\n")
	if len(restart) != 0 || !strings.Contains(diff, "agent.mcp_servers: ") || !strings.Contains(diff, "wiki type=http") ||
		!strings.Contains(diff, "values for Authorization") || strings.Contains(diff, "secret") {
		t.Fatalf("renamed server: diff %q", diff)
	}
}

func unmasked(s string) string { return s }
