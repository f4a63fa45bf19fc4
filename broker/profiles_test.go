package broker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"acpbroker/internal/redact"

	"github.com/rs/zerolog"
)

// MCP servers' env and header values are secrets: the redactor masks
// them, a bearer token alone too (config's TestDiff_MCPServerValuesAreNamedNotShown
// holds reload diffs to them).
func TestProfiles_MCPServerValuesAreMasked(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "facts-mcp"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	table := func(envValue, header string) string {
		return `
[[agent.mcp_servers]]
name = "facts"
command = "` + filepath.Join(bin, "facts-mcp") + `"
env = ["FACTS_TOKEN=` + envValue + `"]
[[agent.mcp_servers]]
name = "docs"
type = "http"
url = "https://docs.example.com/mcp"
headers = { Authorization = "` + header + `" }
`
	}
	old, err := loadText(t, "[agent]\ncommand = \""+fakeAgent+"\"\n"+table("env-secret-1", "Bearer header-secret-1"))
	if err != nil {
		t.Fatal(err)
	}
	agents, err := buildProfiles(old, nil, nil, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	masked := redact.New(agents.secrets...).String("agent said env-secret-1, Bearer header-secret-1 and header-secret-1")
	if strings.Contains(masked, "secret") {
		t.Fatalf("the redactor leaves %q", masked)
	}
}
