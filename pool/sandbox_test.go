package pool_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"acpbroker/pool"
)

// needBwrap skips a test that needs bubblewrap where it is not installed.
func needBwrap(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil {
		t.Skip("bubblewrap is not installed")
	}
}

// A terminal's environment is its command's, inside the sandbox:
// bubblewrap, which runs outside before it confines anything, starts
// with none of it. Here the loader's debug output, which it writes
// where LD_DEBUG_OUTPUT says, would land outside had bubblewrap itself
// been given the variables; the command inside still gets them.
func TestSandbox_ATerminalsEnvironmentReachesOnlyItsCommand(t *testing.T) {
	needBwrap(t)
	outside := t.TempDir()
	os.Chmod(outside, 0o777)
	p := newPool(t, pool.Config{Env: []string{"PATH=/usr/bin:/bin"}, Sandbox: pool.Sandbox{Bwrap: "bwrap"}})
	a := acquire(t, p, "t")
	defer p.Release(a, false)
	got := prompt(t, a, "terminal-env LD_DEBUG=libs LD_DEBUG_OUTPUT="+filepath.Join(outside, "loader")+" MARK=inside -- /usr/bin/env")
	if !strings.Contains(got, "MARK=inside") || !strings.Contains(got, "LD_DEBUG=libs") {
		t.Fatalf("the terminal's command lacks its variables:\n%s", got)
	}
	if entries, _ := os.ReadDir(outside); len(entries) > 0 {
		t.Fatalf("the loader of a process outside the sandbox honoured the terminal's LD_DEBUG_OUTPUT: %s written", entries[0].Name())
	}
}

// The agent's environment (its API keys) is set inside the sandbox:
// bubblewrap's own environment holds only the mark that finds what it
// leaves behind, and its command line, which
// every user may read, does not hold them.
func TestSandbox_TheAgentsEnvironmentIsSetInsideOnly(t *testing.T) {
	needBwrap(t)
	const key = "sk-sandbox-test-0123456789"
	p := newPool(t, pool.Config{Env: []string{"PATH=/usr/bin:/bin", "API_KEY=" + key}, Sandbox: pool.Sandbox{Bwrap: "bwrap"}})
	a := acquire(t, p, "t")
	defer p.Release(a, false)
	got := prompt(t, a, "env")
	if !strings.Contains(got, "API_KEY="+key) {
		t.Fatalf("the agent's environment lacks its key:\n%s", got)
	}
	if strings.Contains(got, "ACP_BROKER_SANDBOX") {
		t.Errorf("the agent sees the sandbox's mark:\n%s", got)
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", a.Proc.PID()))
	if err != nil {
		t.Fatal(err)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", a.Proc.PID()))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range strings.Split(strings.TrimSuffix(string(environ), "\x00"), "\x00") {
		if kv != "" && !strings.HasPrefix(kv, "ACP_BROKER_SANDBOX=") {
			t.Errorf("bubblewrap's own environment holds %q, want only the sandbox's mark", kv)
		}
	}
	if strings.Contains(string(cmdline), key) {
		t.Errorf("bubblewrap's command line shows the agent's key: %q", cmdline)
	}
}

// Whoever starts it (root too), an agent has no capabilities, cannot
// make a user namespace to get some, and so cannot unmount what hides
// the broker's paths nor remount what it is shown read-only.
func TestSandbox_AnAgentHasNoCapabilitiesAndNoUserNamespaces(t *testing.T) {
	needBwrap(t)
	hidden := t.TempDir()
	os.WriteFile(filepath.Join(hidden, "secret"), []byte("broker secret"), 0o644)
	shown := filepath.Dir(hidden)
	p := newPool(t, pool.Config{Env: []string{"PATH=/usr/bin:/bin"}, Sandbox: pool.Sandbox{Bwrap: "bwrap", ReadOnly: []string{shown}, Hide: []string{hidden}}})
	a := acquire(t, p, "t")
	defer p.Release(a, false)
	status := prompt(t, a, "run cat /proc/self/status")
	for _, field := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		if !strings.Contains(status, field+":\t0000000000000000") {
			t.Errorf("%s is not empty:\n%s", field, status)
		}
	}
	for _, cmd := range []string{
		"run /usr/bin/unshare -U /bin/true",
		"run /bin/umount " + hidden,
		"run /bin/mount -o remount,rw " + shown,
	} {
		if got := prompt(t, a, cmd); strings.Contains(got, "exit: <nil>") {
			t.Errorf("%s succeeded:\n%s", cmd, got)
		}
	}
	if got := prompt(t, a, "probe r:"+filepath.Join(hidden, "secret")+" w:"+filepath.Join(shown, "planted")); !strings.Contains(got, "secret denied") || !strings.Contains(got, "planted denied") {
		t.Fatalf("after the attempts:\n%s", got)
	}
}

// An agent's program is shown as a file, not with its directory, which
// may hold anything (here the broker's files beside it); under HOME,
// whose empty tmpfs comes first, it still starts.
func TestSandbox_AnAgentsProgramIsShownAloneWhereverItIs(t *testing.T) {
	needBwrap(t)
	data, err := os.ReadFile(fakeAgent)
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	for _, dir := range []string{filepath.Join(home, ".local", "bin"), t.TempDir()} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			os.MkdirAll(dir, 0o755)
			program := filepath.Join(dir, "agent")
			beside := filepath.Join(dir, "broker.toml")
			os.WriteFile(program, data, 0o755)
			os.WriteFile(beside, []byte("token = \"x\""), 0o600)
			p := newPool(t, pool.Config{Command: program, Env: []string{"PATH=/usr/bin:/bin", "HOME=" + home}, Sandbox: pool.Sandbox{Bwrap: "bwrap"}})
			a := acquire(t, p, "t")
			defer p.Release(a, false)
			got := prompt(t, a, "probe r:"+program+" r:"+beside+" w:"+filepath.Join(dir, "planted"))
			if !strings.Contains(got, "agent ok") || !strings.Contains(got, "broker.toml denied") {
				t.Fatalf("probes beside the program:\n%s", got)
			}
			if _, err := os.Stat(filepath.Join(dir, "planted")); err == nil {
				t.Fatal("the agent wrote into its program's directory")
			}
		})
	}
}

// A program given as a symbolic link gets the link and the file it
// leads to, nothing else of either directory.
func TestSandbox_ASymlinkedProgramGetsTheLinkAndItsFile(t *testing.T) {
	needBwrap(t)
	data, err := os.ReadFile(fakeAgent)
	if err != nil {
		t.Fatal(err)
	}
	real, links := t.TempDir(), t.TempDir()
	program := filepath.Join(real, "agent-1.0")
	os.WriteFile(program, data, 0o755)
	os.WriteFile(filepath.Join(real, "beside"), []byte("x"), 0o644)
	link := filepath.Join(links, "agent")
	if err := os.Symlink("../"+filepath.Base(real)+"/agent-1.0", link); err != nil {
		t.Fatal(err)
	}
	p := newPool(t, pool.Config{Command: link, Env: []string{"PATH=/usr/bin:/bin"}, Sandbox: pool.Sandbox{Bwrap: "bwrap"}})
	a := acquire(t, p, "t")
	defer p.Release(a, false)
	got := prompt(t, a, "run /bin/readlink -f "+link)
	if !strings.Contains(got, program) {
		t.Fatalf("the link leads to %q inside, want %s", got, program)
	}
	if got := prompt(t, a, "probe r:"+filepath.Join(real, "beside")); !strings.Contains(got, "denied") {
		t.Fatalf("beside the program's file:\n%s", got)
	}
}

// The broker's paths are hidden wherever a path shown holds them: a
// file unreadable, a directory empty; a path shown inside a hidden one
// is shown again.
func TestSandbox_HiddenPathsStayHiddenInsideShownOnes(t *testing.T) {
	needBwrap(t)
	shown := t.TempDir()
	config := filepath.Join(shown, "broker.toml")
	state := filepath.Join(shown, "state")
	again := filepath.Join(state, "shared")
	os.MkdirAll(again, 0o755)
	os.WriteFile(config, []byte("token"), 0o600)
	os.WriteFile(filepath.Join(state, "state.db"), []byte("db"), 0o600)
	os.WriteFile(filepath.Join(again, "tool"), []byte("tool"), 0o644)
	os.WriteFile(filepath.Join(shown, "notes"), []byte("notes"), 0o644)
	p := newPool(t, pool.Config{Env: []string{"PATH=/usr/bin:/bin"}, Sandbox: pool.Sandbox{Bwrap: "bwrap",
		ReadOnly: []string{again, shown}, Hide: []string{config, state}}})
	a := acquire(t, p, "t")
	defer p.Release(a, false)
	got := prompt(t, a, "probe r:"+config+" r:"+filepath.Join(state, "state.db")+" r:"+filepath.Join(again, "tool")+" r:"+filepath.Join(shown, "notes"))
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "denied") || !strings.Contains(lines[1], "denied") || !strings.HasSuffix(lines[2], " ok") || !strings.HasSuffix(lines[3], " ok") {
		t.Fatalf("probes:\n%s\nwant the configuration and the state hidden, the rest shown", got)
	}
}
