package acp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// sameJSON reports whether two JSON texts hold the same value.
func sameJSON(t *testing.T, got, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("not JSON: %s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("not JSON: %s: %v", want, err)
	}
	return reflect.DeepEqual(g, w)
}

var testServers = []MCPServer{
	{Name: "facts", Command: "/opt/mcp/facts"},
	{Name: "files", Type: MCPStdio, Command: "/usr/bin/files-mcp", Args: []string{"--root", "/srv"},
		Env: []EnvVariable{{Name: "FILES_TOKEN", Value: "env-secret"}}},
	{Name: "web", Type: MCPHTTP, URL: "https://mcp.example.com/mcp",
		Headers: []HTTPHeader{{Name: "Authorization", Value: "Bearer header-secret"}}},
	{Name: "old", Type: MCPSSE, URL: "http://127.0.0.1:9000/sse"},
}

// The wire shapes of the spec: stdio without "type" and with [] for empty
// lists, http and sse with their type, url and headers and nothing else.
const testServersJSON = `[
	{"name":"facts","command":"/opt/mcp/facts","args":[],"env":[]},
	{"name":"files","command":"/usr/bin/files-mcp","args":["--root","/srv"],"env":[{"name":"FILES_TOKEN","value":"env-secret"}]},
	{"type":"http","name":"web","url":"https://mcp.example.com/mcp","headers":[{"name":"Authorization","value":"Bearer header-secret"}]},
	{"type":"sse","name":"old","url":"http://127.0.0.1:9000/sse","headers":[]}
]`

func TestMCPServer_MarshalsTheSpecShapeAndReadsItBack(t *testing.T) {
	b, err := json.Marshal(testServers)
	if err != nil {
		t.Fatal(err)
	}
	if !sameJSON(t, string(b), testServersJSON) {
		t.Fatalf("marshalled\n%s\nwant\n%s", b, testServersJSON)
	}
	var back []MCPServer
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back[0].Transport() != MCPStdio || back[2].Transport() != MCPHTTP || back[3].Transport() != MCPSSE ||
		back[1].Env[0] != testServers[1].Env[0] || back[2].Headers[0] != testServers[2].Headers[0] {
		t.Fatalf("read back %+v", back)
	}
	if _, err := json.Marshal(MCPServer{Name: "x", Type: "websocket"}); err == nil {
		t.Fatal("an unknown transport was marshalled")
	}
}

// Formatting a server, as a log line or an error might, shows its name and
// transport and none of its values.
func TestMCPServer_FormatsWithoutValues(t *testing.T) {
	for _, s := range testServers {
		for _, f := range []string{"%v", "%+v", "%s"} {
			out := fmt.Sprintf(f, s)
			if strings.Contains(out, "secret") || !strings.Contains(out, s.Name) {
				t.Errorf("Sprintf(%q) = %q", f, out)
			}
		}
	}
}

// session/new and session/load carry the servers given, in the spec's
// shape; none given is an empty list, never null.
func TestSessions_SendTheMCPServersGiven(t *testing.T) {
	c, p := newPair(t, Options{})
	done := asyncResult(func() error { _, _, err := c.NewSession(context.Background(), t.TempDir(), testServers); return err })
	req := p.NextMethod("session/new")
	var params struct {
		MCPServers json.RawMessage `json:"mcpServers"`
	}
	json.Unmarshal(req["params"], &params)
	if !sameJSON(t, string(params.MCPServers), testServersJSON) {
		t.Fatalf("session/new mcpServers = %s", params.MCPServers)
	}
	p.Reply(req, `{"sessionId":"S1"}`)
	if err := waitErr(t, done); err != nil {
		t.Fatal(err)
	}

	done = asyncResult(func() error {
		_, err := c.LoadSession(context.Background(), "S1", t.TempDir(), testServers[:1])
		return err
	})
	req = p.NextMethod("session/load")
	json.Unmarshal(req["params"], &params)
	if !sameJSON(t, string(params.MCPServers), `[{"name":"facts","command":"/opt/mcp/facts","args":[],"env":[]}]`) {
		t.Fatalf("session/load mcpServers = %s", params.MCPServers)
	}
	p.Reply(req, `null`)
	if err := waitErr(t, done); err != nil {
		t.Fatal(err)
	}

	done = asyncResult(func() error { _, _, err := c.NewSession(context.Background(), t.TempDir(), nil); return err })
	req = p.NextMethod("session/new")
	json.Unmarshal(req["params"], &params)
	if string(params.MCPServers) != `[]` {
		t.Fatalf("session/new without servers: mcpServers = %s", params.MCPServers)
	}
	p.Reply(req, `{"sessionId":"S2"}`)
	if err := waitErr(t, done); err != nil {
		t.Fatal(err)
	}
}

// An agent gets every stdio server, and http or sse ones only when it
// advertised that transport; the rest are left out with one warning that
// names them and shows no header or env value.
func TestUsableMCPServers_LeavesOutUnadvertisedTransportsWithOneWarning(t *testing.T) {
	names := func(servers []MCPServer) string {
		var out []string
		for _, s := range servers {
			out = append(out, s.Name)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		caps     string // agentCapabilities as the agent sends them
		want     string
		warnings int
	}{
		{`{}`, "facts,files", 1},
		{`{"mcpCapabilities":{"http":true}}`, "facts,files,web", 1},
		{`{"mcpCapabilities":{"http":true,"sse":true}}`, "facts,files,web,old", 0},
	} {
		var caps AgentCapabilities
		if err := json.Unmarshal([]byte(tc.caps), &caps); err != nil {
			t.Fatal(err)
		}
		var logged bytes.Buffer
		got := UsableMCPServers(caps, testServers, zerolog.New(&logged))
		if names(got) != tc.want {
			t.Errorf("caps %s: servers %s, want %s", tc.caps, names(got), tc.want)
		}
		lines := strings.Count(logged.String(), "\n")
		if lines != tc.warnings {
			t.Errorf("caps %s: %d log lines, want %d:\n%s", tc.caps, lines, tc.warnings, logged.String())
		}
		if strings.Contains(logged.String(), "secret") || strings.Contains(logged.String(), "example.com") {
			t.Errorf("caps %s: the warning shows values:\n%s", tc.caps, logged.String())
		}
		if tc.warnings > 0 && (!strings.Contains(logged.String(), `"level":"warn"`) || !strings.Contains(logged.String(), "old (sse)")) {
			t.Errorf("caps %s: warning = %s, want one naming old (sse)", tc.caps, logged.String())
		}
	}
}
