package main

import (
	"os/exec"
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
