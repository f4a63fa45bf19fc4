package pool_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/agenttest"
	"acpbroker/pool"
)

// A terminal's command gets the agent's environment, as the pool built
// it, and nothing of the broker's: its token stays out.
func TestPool_TerminalHasTheAgentsEnvironmentAndNoBrokerSecret(t *testing.T) {
	t.Setenv("BROKER_DISCORD_TOKEN", "tok-secret")
	t.Setenv("DISCORD_TOKEN", "tok-secret-2")
	t.Setenv("UNRELATED_BROKER_VAR", "not-for-agents")
	env, err := pool.BuildEnv(nil, map[string]string{"MODE": "test"})
	if err != nil {
		t.Fatal(err)
	}
	p := newPool(t, pool.Config{Env: env})
	a := acquire(t, p, "t")
	defer p.Release(a, false)
	got := prompt(t, a, "terminal env")
	if !strings.HasPrefix(got, `exit: {"exitCode":0}`) || !strings.Contains(got, "\nMODE=test\n") || !strings.Contains(got, "\nPATH=") {
		t.Fatalf("terminal env answered:\n%s", got)
	}
	for _, leak := range []string{"tok-secret", "BROKER_", "DISCORD_TOKEN", "not-for-agents"} {
		if strings.Contains(got, leak) {
			t.Fatalf("the terminal's environment holds %q:\n%s", leak, got)
		}
	}
	if n := p.Stats().Conn.TerminalsOpen; n != 0 {
		t.Fatalf("TerminalsOpen = %d after the agent released its terminal", n)
	}
}

// Sandboxed, a terminal's command is confined as its agent is: it
// writes in the agent's directory, and cannot read outside what the
// agent sees.
func TestSandbox_TerminalIsConfinedAsItsAgent(t *testing.T) {
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil {
		t.Skip("bubblewrap is not installed")
	}
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	os.WriteFile(secret, []byte("broker secret"), 0o644)
	work := t.TempDir()
	p := newPool(t, pool.Config{WorkDir: work, Env: []string{"PATH=/usr/bin:/bin"}, Sandbox: pool.Sandbox{Bwrap: "bwrap"}})
	a := acquire(t, p, "t")
	defer p.Release(a, false)
	if got := prompt(t, a, "terminal cat "+secret); strings.Contains(got, "broker secret") || strings.Contains(got, `"exitCode":0`) {
		t.Fatalf("the terminal read a file outside the sandbox:\n%s", got)
	}
	made := filepath.Join(a.Dir, "made-by-terminal")
	if got := prompt(t, a, "terminal touch "+made); !strings.HasPrefix(got, `exit: {"exitCode":0}`) {
		t.Fatalf("touch in the agent's directory answered:\n%s", got)
	}
	if _, err := os.Stat(made); err != nil {
		t.Fatalf("the terminal's file is not in the agent's directory: %v", err)
	}
	// Its own PID namespace: only its own processes in /proc.
	if got := prompt(t, a, "terminal ls /proc"); strings.Contains(got, fmt.Sprintf("\n%d\n", os.Getpid())) {
		t.Fatalf("the terminal sees the broker's pid %d in /proc", os.Getpid())
	}
}

var pids = func(text string) (grandchild, shell int) {
	fmt.Sscanf(text, "grandchild:%d shell:%d", &grandchild, &shell)
	return grandchild, shell
}

// An agent stopped, discarded after a turn or at the pool's shutdown,
// takes its terminals with it: their shells and grandchildren are gone,
// a shell that ignores SIGTERM too, and none is counted open.
func TestPool_StoppedAgentsTakeTheirTerminalsWithThem(t *testing.T) {
	p := newPool(t, pool.Config{MaxSessions: 4, ExitGrace: 300 * time.Millisecond, Env: []string{"PATH=" + os.Getenv("PATH")}})
	a := acquire(t, p, "discarded")
	g1, s1 := pids(firstChunk(t, a, "terminal-long"))
	b := acquire(t, p, "shutdown")
	g2, s2 := pids(firstChunk(t, b, "terminal-ignore-term"))
	for _, pid := range []int{g1, s1, g2, s2} {
		if pid == 0 || !agenttest.Running(pid) {
			t.Fatalf("terminal processes %d %d %d %d not all running", g1, s1, g2, s2)
		}
	}
	if n := p.Stats().Conn.TerminalsOpen; n != 2 {
		t.Fatalf("TerminalsOpen = %d, want 2", n)
	}
	p.Release(a, true)
	for _, pid := range []int{g1, s1} {
		if !agenttest.WaitGone(pid, 10*time.Second) {
			t.Fatalf("terminal process %d outlived its discarded agent", pid)
		}
	}
	p.Close()
	// SIGKILL went to their group before Close returned; the kernel
	// takes a moment to end them.
	for _, pid := range []int{g2, s2} {
		if !agenttest.WaitGone(pid, time.Second) {
			t.Fatalf("terminal process %d (ignoring SIGTERM) outlived the pool's Close", pid)
		}
	}
	if n := p.Stats().Conn.TerminalsOpen; n != 0 {
		t.Fatalf("TerminalsOpen = %d after Close, want 0", n)
	}
}
