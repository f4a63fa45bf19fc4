package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sdkAgent is the ACP SDK's example agent, installed by make interop-deps
// (which make test runs).
func sdkAgent(t *testing.T) string {
	t.Helper()
	path, _ := filepath.Abs("../../testdata/interop/node_modules/@agentclientprotocol/sdk/dist/examples/agent.js")
	if _, err := os.Stat(path); err != nil {
		t.Skip("the SDK example agent is not installed: run make interop-deps")
	}
	return path
}

// A full turn through the broker with an agent someone else wrote: the
// SDK example agent streams, runs tool calls, asks permission (answered at
// the console), and finishes; a second turn is cancelled mid-way and the
// agent honours it.
func TestRun_ConsoleWithTheSDKExampleAgent(t *testing.T) {
	agent := sdkAgent(t)
	// In the sandbox the script's package must be given, as an operator
	// would with agent.sandbox_ro.
	modules, _ := filepath.Abs("../../testdata/interop/node_modules")
	b := startBroker(t, writeConfig(t, ""), "BROKER_AGENT_COMMAND=node", "BROKER_AGENT_ARGS="+agent, "BROKER_AGENT_SANDBOX_RO="+modules)
	b.say(t, "hello")
	b.out.waitFor(t, "✅ `Reading project files` done", 30*time.Second)
	b.out.waitFor(t, "1) Allow this change\n", 30*time.Second)
	b.say(t, "1")
	b.out.waitFor(t, "chose Allow this change", 10*time.Second)
	b.out.waitFor(t, "✅ done in", 30*time.Second)

	from := b.out.mark()
	b.say(t, "again")
	b.out.waitFrom(t, from, "⏳ `Reading project files` running", 30*time.Second)
	b.say(t, "/cancel")
	took := b.out.waitFrom(t, from, "⏹️ cancelled by ", 10*time.Second)
	if took > 3*time.Second {
		t.Fatalf("the SDK agent took %s to honour the cancel", took)
	}
	// The thread is idle once the cancelled turn's outcome is delivered;
	// /status is asked until it says so.
	deadline := time.Now().Add(10 * time.Second)
	for {
		at := b.out.mark()
		b.say(t, "/status")
		b.out.waitFrom(t, at, "State: ", 10*time.Second)
		if strings.Contains(b.out.String()[at:], "State: idle") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the thread was not idle within 10s of the cancel:\n%s", b.out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.exit(t)
}
