package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// With agent.sandbox = "bwrap" (the default) and no bubblewrap to be
// found, check-config and the broker itself refuse, saying what to
// install or to set; with agent.sandbox = "none" they go on.
func TestSandbox_MissingBubblewrapIsRefusedWithWhatToDo(t *testing.T) {
	bin := brokerBin(t)
	config := writeConfig(t, "")
	for _, cmd := range []string{"check-config", "run"} {
		c := exec.Command(bin, cmd, "--config", config)
		c.Env = []string{"PATH=/nonexistent", "HOME=" + t.TempDir()}
		out, err := c.CombinedOutput()
		code := c.ProcessState.ExitCode()
		if err == nil || code != 2 {
			t.Fatalf("%s without bubblewrap: status %d, %s", cmd, code, out)
		}
		for _, want := range []string{`agent.sandbox = "bwrap"`, "apt-get install bubblewrap", `agent.sandbox = "none"`} {
			if !strings.Contains(string(out), want) {
				t.Fatalf("%s says %q, without %q", cmd, out, want)
			}
		}
	}
	c := exec.Command(bin, "check-config", "--config", config)
	c.Env = []string{"PATH=/nonexistent", "HOME=" + t.TempDir(), "BROKER_AGENT_SANDBOX=none"}
	if out, err := c.CombinedOutput(); err != nil || !strings.Contains(string(out), "configuration is valid") {
		t.Fatalf("check-config with agent.sandbox = none: %v, %s", err, out)
	}
}

// A broker started as root runs sandboxed agents only as another user:
// without agent.run_as_user, check-config and the broker refuse, saying
// so; with it, a path that user cannot reach (a program under a
// directory only root may enter) is refused naming the key and the
// path, since bubblewrap runs as that user.
func TestSandbox_RootNamesTheUserAgentsRunAsAndThatUserReachesTheirPaths(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root")
	}
	bin := brokerBin(t)
	config := writeConfig(t, "")
	for user, want := range map[string]string{
		"":     `agent.run_as_user is required when the broker runs as root with agent.sandbox = "bwrap"`,
		"root": `agent.run_as_user = "root" is root: agents would be root outside their sandbox`,
	} {
		for _, cmd := range []string{"check-config", "run"} {
			c := exec.Command(bin, cmd, "--config", config)
			c.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "BROKER_AGENT_RUN_AS_USER=" + user}
			out, err := c.CombinedOutput()
			if code := c.ProcessState.ExitCode(); err == nil || code != 2 || !strings.Contains(string(out), want) {
				t.Fatalf("%s as root with agent.run_as_user %q: status %d, %s", cmd, user, code, out)
			}
		}
	}
	private := t.TempDir()
	os.Chmod(private, 0o700) // root's alone
	program := filepath.Join(private, "agent")
	data, _ := os.ReadFile(fakeAgent)
	os.WriteFile(program, data, 0o755)
	c := exec.Command(bin, "check-config", "--config", config)
	c.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "BROKER_AGENT_COMMAND=" + program}
	out, err := c.CombinedOutput()
	want := fmt.Sprintf(`agent.command = %q: agent.run_as_user "nobody" cannot reach it (%s is mode 0700`, program, private)
	if code := c.ProcessState.ExitCode(); err == nil || code != 2 || !strings.Contains(string(out), want) {
		t.Fatalf("a program run_as_user cannot reach: status %d, %s\nwant %q", code, out, want)
	}
}
