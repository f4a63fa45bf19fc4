package broker

import (
	"errors"
	"strings"
	"testing"
)

// With [cluster], a profile whose agents could reach the cluster's NATS
// is refused, naming its key: the host's network, no sandbox, an allowed
// address that is NATS's. Without [cluster] the same profiles are fine.
func TestCheckCluster_AgentsThatCouldReachNATSAreRefused(t *testing.T) {
	const cluster = "[cluster]\nurl = \"nats://127.0.0.1:4333\"\n"
	for _, c := range []struct {
		name, text, want string
	}{
		{"host network", "[agents.h]\nnetwork = \"host\"\n", `agents.h.network = "host": with [cluster]`},
		{"allowed NATS", "[agents.p]\nallow_hosts = [\"127.0.0.1:4333\"]\n", "agents.p.allow_hosts lets its agents reach 127.0.0.1:4333, the cluster's NATS"},
		{"embedded NATS", "[agents.p]\nallow_hosts = [\"127.0.0.1:4555\"]\n[cluster]\nembedded = true\nlisten = \"127.0.0.1:4555\"\n", "reach 127.0.0.1:4555, the cluster's NATS"},
		{"no sandbox", "sandbox = \"none\"\n", `agent.sandbox = "none": with [cluster]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			text := agentTable() + c.text
			if !strings.Contains(c.text, "[cluster]") {
				text += cluster
			}
			cfg, err := loadText(t, text)
			if err != nil {
				t.Fatal(err)
			}
			if err := errors.Join(checkCluster(cfg)...); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want %q", err, c.want)
			}
			alone, err := loadText(t, agentTable()+strings.ReplaceAll(c.text, "[cluster]\nembedded = true\nlisten = \"127.0.0.1:4555\"\n", ""))
			if err != nil {
				t.Fatal(err)
			}
			if problems := checkCluster(alone); len(problems) != 0 {
				t.Errorf("without [cluster]: %v", problems)
			}
		})
	}
}
