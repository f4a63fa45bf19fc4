package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"acpbroker/config"
)

// The console offers the profiles too: /agents lists them, /new NAME
// starts a conversation with one, and a reload (SIGHUP) adds one that
// /new can then start.
func TestRun_ConsoleNewAndAgentsWithProfilesAndAReload(t *testing.T) {
	profiles := "[agents]\ndefault = \"a\"\n[agents.a]\ndescription = \"the first\"\nenv = [\"WHO=a\"]\n[agents.b]\nenv = [\"WHO=b\"]\n"
	config := writeConfig(t, profiles+"[pool]\nmax_sessions = 4\n")
	b := startBroker(t, config, "BROKER_AGENT_SANDBOX=none", "BROKER_LOG_LEVEL=info")
	b.out.waitFor(t, "Type a message", 20*time.Second)
	b.say(t, "/agents")
	b.out.waitFor(t, "• a (default): the first — 0 live, 0 busy", 10*time.Second)
	b.out.waitFor(t, "• b — 0 live, 0 busy", 10*time.Second)
	b.say(t, "env")
	b.out.waitFor(t, "WHO=a", 20*time.Second)
	b.say(t, "/new b")
	b.out.waitFor(t, "b is ready.", 10*time.Second)
	b.say(t, "env")
	b.out.waitFor(t, "WHO=b", 20*time.Second)
	b.say(t, "/new c")
	b.out.waitFor(t, `There is no agent "c".`, 10*time.Second)

	text, _ := os.ReadFile(config)
	os.WriteFile(config, []byte(strings.Replace(string(text), "[agents.b]", "[agents.c]\nenv = [\"WHO=c\"]\n[agents.b]", 1)), 0o600)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	b.err.waitFor(t, "configuration reloaded", 10*time.Second)
	b.say(t, "/new c")
	b.out.waitFor(t, "c is ready.", 10*time.Second)
	b.say(t, "env")
	b.out.waitFor(t, "WHO=c", 20*time.Second)
	if code := b.exit(t); code != 0 {
		t.Fatalf("exit status %d", code)
	}
}

// A reload that removes or changes a profile leaves its running agent
// the permission rules it started with: with turn.permission_mode =
// "allow", the agent of a removed profile whose rule denies a command is
// still denied it. The thread's next agent gets the rules then in force.
func TestRun_ARunningAgentKeepsItsRulesAcrossAReload(t *testing.T) {
	rev := "[agents.rev]\n[[agents.rev.permissions]]\nkind = \"execute\"\naction = \"deny\"\n"
	head := "[turn]\npermission_mode = \"allow\"\n[agents]\ndefault = \"a\"\n[agents.a]\n"
	config := writeConfig(t, head+rev)
	b := startBroker(t, config, "BROKER_AGENT_SANDBOX=none", "BROKER_LOG_LEVEL=info")
	b.out.waitFor(t, "Type a message", 20*time.Second)
	b.say(t, "/new rev")
	b.out.waitFor(t, "rev is ready.", 10*time.Second)
	ask := func(want string) {
		t.Helper()
		from := b.out.mark()
		b.say(t, "permission-for execute - Run make")
		b.out.waitFrom(t, from, want, 20*time.Second)
		b.out.waitFrom(t, from, "chose ", 20*time.Second)
	}
	denied := "Denied “Run make” by rule 1 (kind execute)."
	ask(denied)

	reload := func(text string) {
		t.Helper()
		from := b.err.mark()
		if err := os.WriteFile(config, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		syscall.Kill(os.Getpid(), syscall.SIGHUP)
		b.err.waitFrom(t, from, "configuration reloaded", 10*time.Second)
	}
	original, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	reload(strings.Replace(string(original), rev, "", 1))
	ask(denied)
	allowing := strings.Replace(string(original), "action = \"deny\"", "action = \"ask\"\ntitle = \"^Never\"", 1)
	reload(allowing)
	ask(denied)

	b.say(t, "/reset")
	b.out.waitFor(t, "reset the session", 10*time.Second)
	ask("Allowed “Run make” by turn.permission_mode = allow.")
	if code := b.exit(t); code != 0 {
		t.Fatalf("exit status %d", code)
	}
}

// check-config refuses two profiles whose names differ only in case,
// naming both, rather than merging their settings into one profile.
func TestCheckConfig_ProfilesDifferingOnlyInCaseAreRefused(t *testing.T) {
	config := writeConfig(t, "[agents]\ndefault = \"claude\"\n[agents.Claude]\nmax_sessions = 2\n[agents.claude]\nargs = [\"-x\"]\n")
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"check-config", "--config", config}, []string{"BROKER_AGENT_SANDBOX=none"}, nil, io.Discard, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "agents.Claude and agents.claude differ only in case") {
		t.Fatalf("exit %d, stderr %q; want 2 naming both sections", code, stderr.String())
	}
}

// /agents lists a removed profile as long as its agents still run,
// marked removed; /new no longer offers it.
func TestRun_AgentsListsARemovedProfilesLiveAgents(t *testing.T) {
	config := writeConfig(t, "[agents]\ndefault = \"a\"\n[agents.a]\nenv = [\"WHO=a\"]\n[agents.b]\nenv = [\"WHO=b\"]\n")
	b := startBroker(t, config, "BROKER_AGENT_SANDBOX=none", "BROKER_LOG_LEVEL=info")
	b.out.waitFor(t, "Type a message", 20*time.Second)
	b.say(t, "/new b")
	from := b.out.mark()
	b.say(t, "env")
	b.out.waitFrom(t, from, "WHO=b", 20*time.Second)
	b.out.waitFrom(t, from, "✅ done in", 20*time.Second) // its agent idle again
	text, _ := os.ReadFile(config)
	os.WriteFile(config, []byte(strings.Replace(string(text), "[agents.b]\nenv = [\"WHO=b\"]\n", "", 1)), 0o600)
	from = b.err.mark()
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	b.err.waitFrom(t, from, "configuration reloaded", 10*time.Second)
	from = b.out.mark()
	b.say(t, "/agents")
	b.out.waitFrom(t, from, "• b (removed) — 1 live, 0 busy", 10*time.Second)
	b.say(t, "/new b")
	b.out.waitFrom(t, from, `There is no agent "b".`, 10*time.Second)
	if code := b.exit(t); code != 0 {
		t.Fatalf("exit status %d", code)
	}
}

// A profile's env that names a broker secret is refused naming the key
// where it is written, once: agents.NAME.env.X in a profile's section,
// agent.env.X (once for every profile that inherits it) in [agent].
func TestRun_AnEnvErrorNamesTheKeyWhereItIsWritten(t *testing.T) {
	const secret = `env = ["T=${BROKER_DISCORD_TOKEN}"]` + "\n"
	profiles := "[agents]\ndefault = \"a\"\n[agents.a]\n%s[agents.b]\n"
	for _, tc := range []struct{ name, agent, profile, want, not string }{
		{"in a profile", "", secret, "agents.a.env.T: refers to ${BROKER_DISCORD_TOKEN}, a broker secret", "agent.env."},
		{"inherited from [agent]", secret, "", "agent.env.T: refers to ${BROKER_DISCORD_TOKEN}, a broker secret", "agents.a.env"},
	} {
		path := writeConfig(t, fmt.Sprintf(profiles, tc.profile))
		text, _ := os.ReadFile(path)
		os.WriteFile(path, []byte(strings.Replace(string(text), "[agent]\n", "[agent]\n"+tc.agent, 1)), 0o600)
		var stderr bytes.Buffer
		code := run(context.Background(), []string{"check-config", "--config", path}, []string{"BROKER_AGENT_SANDBOX=none"}, nil, io.Discard, &stderr)
		if code != 2 || strings.Count(stderr.String(), tc.want) != 1 || strings.Contains(stderr.String(), tc.not) {
			t.Errorf("%s: exit %d, %q; want 2 and %q once, without %q", tc.name, code, stderr.String(), tc.want, tc.not)
		}
	}
}

// A profile's max_sessions above pool.max_sessions can never be reached:
// check-config warns (and still calls the configuration valid), and so
// do the broker's log at start and at a reload.
func TestCheckConfig_WarnsOfAProfileBoundAboveThePools(t *testing.T) {
	config := writeConfig(t, "[pool]\nmax_sessions = 2\n[agents]\ndefault = \"a\"\n[agents.a]\nmax_sessions = 5\n[agents.b]\nmax_sessions = 2\n")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"check-config", "--config", config}, []string{"BROKER_AGENT_SANDBOX=none"}, nil, &stdout, &stderr)
	const warning = "agents.a.max_sessions = 5 is above pool.max_sessions = 2: the profile has at most 2 live agents"
	if code != 0 || !strings.Contains(stdout.String(), "configuration is valid") || strings.Count(stderr.String(), warning) != 1 ||
		strings.Contains(stderr.String(), "agents.b.max_sessions") {
		t.Fatalf("check-config: exit %d, stdout %q, stderr %q; want 0 and the warning for a alone", code, stdout.String(), stderr.String())
	}
	b := startBroker(t, config, "BROKER_AGENT_SANDBOX=none", "BROKER_LOG_LEVEL=info")
	b.out.waitFor(t, "Type a message", 20*time.Second)
	b.err.waitFor(t, warning, 10*time.Second)
	from := b.err.mark()
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	b.err.waitFrom(t, from, "configuration reloaded", 10*time.Second)
	if !strings.Contains(b.err.String()[from:], warning) {
		t.Fatalf("the reload does not warn:\n%s", b.err.String()[from:])
	}
	if code := b.exit(t); code != 0 {
		t.Fatalf("exit status %d", code)
	}
}

// The example configuration as it was before profiles, kept as it was,
// still loads as the one profile "default" and runs a whole console turn
// with its demo agent (the fake agent, at the path the file names, which
// the broker finds from its working directory as it starts; the
// metrics port moved from the environment, as the file's own port may be
// taken on a shared machine).
func TestRun_TheConfigurationOfBeforeProfilesRunsUnchanged(t *testing.T) {
	configPath, err := filepath.Abs("../../testdata/config.pre-profiles.toml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Chdir(dir)
	agent, err := os.ReadFile(fakeAgent)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll("bin", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("bin/demo-agent", agent, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(configPath, []string{"PATH=" + os.Getenv("PATH")})
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Profiles[config.DefaultProfileName]; len(c.Profiles) != 1 || p == nil || c.DefaultProfile != config.DefaultProfileName ||
		p.Command != "./bin/demo-agent" || p.Cwd != "./work" || c.Agent.Sandbox != "bwrap" {
		t.Fatalf("profiles %v, default %q, the default profile %+v", slices.Sorted(maps.Keys(c.Profiles)), c.DefaultProfile, p)
	}
	// As root, the one change: agents may not run as root.
	b := startBroker(t, configPath, append(agentUserEnv(t, dir), "BROKER_HTTP_LISTEN=127.0.0.1:0")...)
	b.out.waitFor(t, "Type a message", 20*time.Second)
	b.say(t, "hello")
	b.out.waitFor(t, "You said: hello", 20*time.Second)
	b.out.waitFor(t, "✅ done in", 20*time.Second)
	b.say(t, "/status")
	b.out.waitFor(t, "Profile: default\n", 10*time.Second)
	if code := b.exit(t); code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", code, b.err.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "state", "state.db")); err != nil {
		t.Fatalf("no state where the file says: %v", err)
	}
}
