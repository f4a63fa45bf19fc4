package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A reload gives a profile's changed MCP servers to its agents started
// from then on; the running agent keeps those it started with.
func TestRun_AReloadGivesNewAgentsTheChangedMCPServers(t *testing.T) {
	server := func(name string) string {
		return fmt.Sprintf("[[agent.mcp_servers]]\nname = %q\ncommand = %q\n", name, fakeAgent)
	}
	config := writeConfig(t, "")
	original, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string) {
		text := strings.Replace(string(original), "[state]\n", server(name)+"[state]\n", 1)
		if err := os.WriteFile(config, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("facts")
	b := startBroker(t, config, "BROKER_AGENT_SANDBOX=none", "BROKER_LOG_LEVEL=info")
	b.out.waitFor(t, "Type a message", 20*time.Second)
	servers := func(want, not string) {
		t.Helper()
		from := b.out.mark()
		b.say(t, "mcp-servers")
		b.out.waitFrom(t, from, "✅ done in", 20*time.Second)
		got := b.out.String()[from:]
		if !strings.Contains(got, `"name":"`+want+`"`) || (not != "" && strings.Contains(got, `"name":"`+not+`"`)) {
			t.Fatalf("the agent got %s; want %q", got, want)
		}
	}
	servers("facts", "")

	from := b.err.mark()
	write("wiki")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	b.err.waitFrom(t, from, "configuration reloaded", 10*time.Second)
	servers("facts", "wiki")
	b.say(t, "/reset")
	servers("wiki", "facts")
	if code := b.exit(t); code != 0 {
		t.Fatalf("exit status %d", code)
	}
}
