package faults

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// MCP servers configured per profile reach session/new exactly as
// configured (${VAR} expanded from the broker's environment): an agent
// that advertises http MCP servers gets its profile's http server, one
// that does not gets the stdio server alone, and the broker warns that
// it left the http one out; no env or header value is logged.
func TestMCP_ServersArriveAsConfiguredPerProfile(t *testing.T) {
	w := newWorld(t, setup{conf: settings{
		"agents.default":   "plain",
		"agents.plain.env": []string{"WHO=plain"},
		"agents.web.args":  []string{"--mcp-http"},
	}})
	w.Env = append(w.Env, "FACTS_TOKEN=facts-secret-1", "DOCS_TOKEN=docs-secret-2")
	w.Raw = `
[[agents.plain.mcp_servers]]
name = "facts"
command = "` + bins.Agent + `"
args = ["--db", "${HOME}/facts.db"]
env = ["FACTS_TOKEN=${FACTS_TOKEN}", "Mixed_Case=1"]

[[agents.plain.mcp_servers]]
name = "docs"
type = "http"
url = "https://mcp.example.com/mcp"
headers = { Authorization = "Bearer ${DOCS_TOKEN}" }

[[agents.web.mcp_servers]]
name = "docs"
type = "http"
url = "https://mcp.example.com/web"
headers = { Authorization = "Bearer ${DOCS_TOKEN}", X-Team = "web" }
`
	b := w.start()
	received := func(thread string) any {
		t.Helper()
		text := w.awaitAnswers(thread, 1)[0].Text
		start, end := strings.Index(text, "["), strings.LastIndex(text, "]")
		if start < 0 || end < start {
			t.Fatalf("the agent reported no servers: %q", text)
		}
		var got any
		if err := json.Unmarshal([]byte(text[start:end+1]), &got); err != nil {
			t.Fatalf("the agent reported %q: %v", text, err)
		}
		return got
	}
	want := func(s string) any {
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}

	plain := w.mention(alice, "mcp-servers")
	if got, exp := received(plain), want(`[{"name":"facts","command":"`+bins.Agent+`","args":["--db","`+w.Dir+`/facts.db"],
		"env":[{"name":"FACTS_TOKEN","value":"facts-secret-1"},{"name":"Mixed_Case","value":"1"}]}]`); !reflect.DeepEqual(got, exp) {
		t.Fatalf("the agent without http MCP got %v\nwant %v", got, exp)
	}
	if lines := b.Log.Grep(`"level":"warn"`, `"profile":"plain"`, `"mcp_servers":["docs (http)"]`, "the agent does not advertise these MCP servers' transports"); len(lines) != 1 {
		t.Fatalf("%d warnings that the http server was left out; log:\n%s", len(lines), b.Log.Tail(8<<10))
	}

	web := w.slashNew(alice, "web", "mcp-servers")
	if got, exp := received(web), want(`[{"type":"http","name":"docs","url":"https://mcp.example.com/web",
		"headers":[{"name":"Authorization","value":"Bearer docs-secret-2"},{"name":"X-Team","value":"web"}]}]`); !reflect.DeepEqual(got, exp) {
		t.Fatalf("the agent with http MCP got %v\nwant %v", got, exp)
	}
	for _, secret := range []string{"facts-secret-1", "docs-secret-2"} {
		if lines := b.Log.Grep(secret); len(lines) > 0 {
			t.Errorf("the broker's log shows %q: %s", secret, lines[0])
		}
	}
}
