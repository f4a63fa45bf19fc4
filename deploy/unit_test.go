package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

// decodeTOML decodes a configuration's text as TOML.
func decodeTOML(text string, v any) error { return toml.Unmarshal([]byte(text), v) }

// directives are a unit file's settings, by name (a name set twice keeps
// its last value).
func directives(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			out[k] = v
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The agent host's unit runs broker host, parses (systemd-analyze verify
// where it is installed), and keeps every hardening setting of the
// broker's unit: it runs agents in the same sandbox and control groups.
// It is Type=notify: the host says READY=1 once it has joined its
// cluster (cmd/broker TestHost_TellsSystemdItIsReadyOnceJoined), and no
// watchdog, which it does not ping.
func TestPackaging_HostUnit(t *testing.T) {
	const path = "../packaging/broker-host.service"
	host := directives(t, path)
	broker := directives(t, "../packaging/broker.service")
	if !strings.Contains(host["ExecStart"], "acp-broker host --config /etc/acp-broker/host.toml") {
		t.Errorf("ExecStart=%s does not run broker host", host["ExecStart"])
	}
	if host["Type"] != "notify" || host["NotifyAccess"] != "main" || host["WatchdogSec"] != "" {
		t.Errorf("Type=%s, NotifyAccess=%s, WatchdogSec=%s: the host says it is ready and pings no watchdog", host["Type"], host["NotifyAccess"], host["WatchdogSec"])
	}
	for _, k := range []string{"NoNewPrivileges", "ProtectSystem", "PrivateTmp", "PrivateDevices", "ProtectHome",
		"ProtectKernelModules", "ProtectKernelLogs", "Delegate", "ProtectClock", "ProtectHostname", "RestrictSUIDSGID",
		"RestrictRealtime", "RestrictNamespaces", "LockPersonality", "RestrictAddressFamilies", "KillMode", "User", "Restart"} {
		if broker[k] == "" {
			t.Fatalf("broker.service has no %s", k)
		}
		if host[k] != broker[k] {
			t.Errorf("%s=%s, where broker.service has %s", k, host[k], broker[k])
		}
	}
	for _, k := range []string{"ProtectControlGroups", "ProtectKernelTunables", "ProtectProc", "MemoryDenyWriteExecute"} {
		if _, ok := host[k]; ok {
			t.Errorf("%s is set: agents' sandboxes or control groups need it unset", k)
		}
	}
	// Its state is its own, and the only place it writes.
	if host["StateDirectory"] == broker["StateDirectory"] || "/var/lib/"+host["StateDirectory"] != host["ReadWritePaths"] {
		t.Errorf("StateDirectory=%s, ReadWritePaths=%s: a directory of the host's own, its only writable one",
			host["StateDirectory"], host["ReadWritePaths"])
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// verify wants the ExecStart program to exist.
	unit := filepath.Join(t.TempDir(), "acp-broker-host.service")
	if err := os.WriteFile(unit, []byte(strings.ReplaceAll(string(b), "/usr/local/bin/acp-broker", "/bin/true")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", unit).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}
