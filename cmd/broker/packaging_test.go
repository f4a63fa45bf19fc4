package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The systemd unit parses (systemd-analyze verify), is Type=notify with a
// watchdog, and its hardening leaves the state directory writable and
// the unit's control group the broker's to divide among its agents.
func TestPackaging_UnitFileVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	b, err := os.ReadFile("../../packaging/broker.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{"Type=notify", "WatchdogSec=", "Restart=on-failure", "User=acp-broker", "StateDirectory=acp-broker",
		"NoNewPrivileges=yes", "ProtectSystem=strict", "ReadWritePaths=/var/lib/acp-broker", "PrivateTmp=yes",
		"EnvironmentFile=", "ExecReload=/bin/kill -HUP $MAINPID", "Delegate=yes"} {
		if !strings.Contains(unit, want+"") {
			t.Errorf("unit lacks %s", want)
		}
	}
	// Agents' control groups are made under the unit's.
	if strings.Contains(unit, "\nProtectControlGroups=yes") {
		t.Error("the unit makes the cgroup file system read-only, where agents' control groups are made")
	}
	// verify wants the ExecStart program to exist.
	dir := t.TempDir()
	path := filepath.Join(dir, "acp-broker.service")
	os.WriteFile(path, []byte(strings.ReplaceAll(unit, "/usr/local/bin/acp-broker", "/bin/true")), 0o644)
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}
