package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"acpbroker/config"
	"acpbroker/internal/redact"
	"acpbroker/workspace"
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

// A clustered broker runs no agent: Check does not ask its machine for
// the programs, working directories and repositories its profiles name,
// and leaves the programs as written, for the hosts; an agent host's
// check (CheckHost) of the same configuration refuses each, naming its
// key.
func TestCheck_AClusteredBrokerLeavesTheAgentsNeedsToItsHosts(t *testing.T) {
	// A directory no one can make: its parent is a file.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	path := writeConfigArgs(t, nil, "[cluster]\nurl = \"nats://127.0.0.1:4333\"\n"+
		"[agents]\ndefault = \"far\"\n"+
		"[agents.far]\ncommand = \"no-such-agent\"\ncwd = \""+filepath.Join(file, "work")+"\"\n"+
		"[[agents.far.mcp_servers]]\nname = \"facts\"\ncommand = \"no-such-mcp\"\n"+
		"[agents.wt]\nworkspace = \"worktree\"\nrepo = \"/nonexistent/repo\"\n")
	load := func() *config.Config {
		t.Helper()
		cfg, err := config.Load(path, []string{"PATH=" + filepath.Dir(fakeAgent)})
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	env := []string{"PATH=" + filepath.Dir(fakeAgent)}
	cfg := load()
	if err := Check(context.Background(), cfg, env); err != nil {
		t.Errorf("Check of a clustered broker: %v", err)
	}
	if p := cfg.Profiles["far"]; p.Command != "no-such-agent" || p.MCPServers[0].Command != "no-such-mcp" {
		t.Errorf("the clustered broker changed the programs its hosts find: %q, %q", p.Command, p.MCPServers[0].Command)
	}
	err := CheckHost(context.Background(), load(), env)
	for _, want := range []string{
		`agents.far.command = "no-such-agent" is not found on PATH`,
		`agents.far.mcp_servers[0].command = "no-such-mcp" is not found on PATH`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckHost: %v; want %q", err, want)
		}
	}
	// The programs found, what a host asks of its disk is refused too.
	cfg = load()
	cfg.Profiles["far"].Command, cfg.Profiles["far"].MCPServers = fakeAgent, nil
	err = CheckHost(context.Background(), cfg, env)
	for _, want := range []string{`agents.far.cwd`, `agents.wt.repo = "/nonexistent/repo"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckHost: %v; want %q", err, want)
		}
	}
}

// The token in a shared_repo URL is one of a host's secrets: masked in
// what a failure after a turn tells its broker (and in agents' stderr).
// Over ssh the URL's user is a user ("git"), not a secret.
func TestAfterTurnError_TheSharedRepositorysTokenIsMasked(t *testing.T) {
	for _, tc := range []struct {
		repo   string
		secret []string
	}{
		{"https://ghp_token42@git.example.com/shared.git", []string{"ghp_token42"}},
		{"https://x-access-token:ghp_token43@git.example.com/shared.git", []string{"x-access-token", "ghp_token43"}},
		{"ssh://git@git.example.com/shared.git", nil},
		{"/srv/shared.git", nil},
	} {
		got := secretValues(&config.Profile{SharedRepo: tc.repo}, nil)
		if !slices.Equal(got, tc.secret) {
			t.Errorf("%s: secrets %q, want %q", tc.repo, got, tc.secret)
		}
	}
	r := redact.New(secretValues(&config.Profile{SharedRepo: "https://ghp_token42@git.example.com/shared.git"}, nil)...)
	cause := fmt.Errorf("%w: fatal: unable to access 'https://ghp_token42@git.example.com/shared.git/'", workspace.ErrSharedRepo)
	err := afterTurnError{cause, r.String(cause.Error())}
	if strings.Contains(err.Error(), "ghp_token42") || !errors.Is(err, workspace.ErrSharedRepo) || err.FailureKind() != workspace.ErrSharedRepo.Error() {
		t.Errorf("told %q (kind %q)", err.Error(), err.FailureKind())
	}
}
