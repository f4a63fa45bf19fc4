package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// loadText loads a configuration written as text, with PATH holding bin.
func loadText(t *testing.T, text string, environ ...string) (*Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "broker.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return LoadConfig(path, append(environ, "PATH="+filepath.Dir(fakeAgent)))
}

// Today's example configuration, written before profiles, still runs:
// [agent] is the one profile, "default", and every thread gets it.
func TestProfiles_TheExampleIsOneDefaultProfile(t *testing.T) {
	c, err := LoadConfig("../../config.example.toml", []string{"BROKER_AGENT_COMMAND=" + fakeAgent})
	if err != nil {
		t.Fatal(err)
	}
	p := c.Profiles[DefaultProfileName]
	if len(c.Profiles) != 1 || p == nil || c.DefaultProfile != DefaultProfileName {
		t.Fatalf("profiles %v, default %q; want only %q", sortedKeys(c.Profiles), c.DefaultProfile, DefaultProfileName)
	}
	if p.Command != fakeAgent || p.Cwd != "./work" || !p.PerThreadDir || p.Workspace != "dir" || p.StartTimeout.String() != "1m0s" {
		t.Fatalf("the default profile is %+v", p)
	}
}

// [agents.NAME] sections are profiles over [agent]: what they leave out
// comes from it; channels name the profile their threads get.
func TestProfiles_SectionsInheritFromAgentAndChannelsPickThem(t *testing.T) {
	c, err := loadText(t, `
[agent]
cwd = "/srv/agents"
args = ["--shared"]
env = ["SHARED=1"]
start_timeout = "90s"

[agents]
default = "claude"

[agents.claude]
command = "`+filepath.Base(fakeAgent)+`"
description = "Claude Code"
max_sessions = 3

[agents.reviewer]
command = "`+fakeAgent+`"
args = ["--read-only"]
workspace = "worktree"
repo = "/srv/repo"

[channels."111"]
agent = "reviewer"
`)
	if err != nil {
		t.Fatal(err)
	}
	claude, reviewer := c.Profiles["claude"], c.Profiles["reviewer"]
	if len(c.Profiles) != 2 || claude == nil || reviewer == nil || c.DefaultProfile != "claude" {
		t.Fatalf("profiles %v, default %q", sortedKeys(c.Profiles), c.DefaultProfile)
	}
	if claude.Name != "claude" || claude.Command != fakeAgent || claude.Cwd != "/srv/agents" || !slices.Equal(claude.Args, []string{"--shared"}) ||
		claude.Env["SHARED"] != "1" || claude.StartTimeout.String() != "1m30s" || claude.MaxSessions != 3 || claude.Description != "Claude Code" {
		t.Fatalf("claude = %+v", claude)
	}
	if !slices.Equal(reviewer.Args, []string{"--read-only"}) || reviewer.Workspace != "worktree" || reviewer.Repo != "/srv/repo" ||
		reviewer.Base != "HEAD" || reviewer.MaxSessions != 0 || reviewer.Cwd != "/srv/agents" {
		t.Fatalf("reviewer = %+v", reviewer)
	}
	if c.Channels["111"] != "reviewer" || len(c.Channels) != 1 {
		t.Fatalf("channels = %v", c.Channels)
	}
}

// Each mistake in profiles is named by its profile and key.
func TestProfiles_ErrorsNameTheProfileAndKey(t *testing.T) {
	agent := fakeAgent
	for _, tc := range []struct{ name, text, want string }{
		{"several without a default", "[agents.a]\ncommand = \"" + agent + "\"\n[agents.b]\ncommand = \"" + agent + "\"\n",
			"agents.default is required with several profiles: one of a, b"},
		{"a default that is not a profile", "[agents]\ndefault = \"c\"\n[agents.a]\ncommand = \"" + agent + "\"\n",
			`agents.default = "c" is not a profile: one of a`},
		{"a channel's unknown profile", "[agents.a]\ncommand = \"" + agent + "\"\n[channels.\"5\"]\nagent = \"zz\"\n",
			`channels.5.agent = "zz" is not a profile: one of a`},
		{"no command anywhere", "[agents.a]\nargs = []\n",
			"agents.a.command is required: the agent program to run (here, or agent.command for every profile)"},
		{"a command not found", "[agents.a]\ncommand = \"no-such-agent\"\n",
			`agents.a.command = "no-such-agent" is not found on PATH`},
		{"an unknown key in a profile", "[agents.a]\ncommand = \"" + agent + "\"\ncomand = \"x\"\n",
			"unknown key(s): agents.a.comand"},
		{"a worktree without a repository", "[agents.a]\ncommand = \"" + agent + "\"\nworkspace = \"worktree\"\n",
			`agents.a.repo is required with workspace = "worktree"`},
		{"a bad value", "[agents.a]\ncommand = \"" + agent + "\"\nstart_timeout = \"soon\"\n",
			`agents.a.start_timeout = "soon" is not a duration`},
		{"a bad workspace", "[agents.a]\ncommand = \"" + agent + "\"\nworkspace = \"tmp\"\n",
			`agents.a.workspace = "tmp" must be one of dir, worktree`},
		{"a profile that is not a table", "[agents]\na = 3\n",
			"agents.a must be a table"},
		{"a profile name with a dot", "[agents.\"a.b\"]\ncommand = \"" + agent + "\"\n",
			`agents."a.b" is not a profile name: use up to 32 lower-case letters, digits, - and _`},
		{"the default written as a profile", "[agents.a]\ncommand = \"" + agent + "\"\n[agents.default]\ncommand = \"" + agent + "\"\n",
			"agents.default is the default profile's name, not a profile"},
		{"two profiles differing only in case", "[agents]\ndefault = \"claude\"\n[agents.Claude]\ncommand = \"" + agent + "\"\nmax_sessions = 2\n[agents.claude]\nargs = [\"-x\"]\n",
			"agents.Claude and agents.claude differ only in case"},
		{"two keys of a profile differing only in case", "[agents.a]\ncommand = \"" + agent + "\"\nMax_Sessions = 2\nmax_sessions = 3\n",
			"agents.a.Max_Sessions and agents.a.max_sessions differ only in case"},
	} {
		_, err := loadText(t, tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v\nwant it to say %q", tc.name, err, tc.want)
		}
	}
}

// A channel named in [channels] is allowed: a Discord configuration
// needs no discord.allowed_channels beside it.
func TestProfiles_AChannelWithAProfileIsAllowed(t *testing.T) {
	c, err := loadText(t, "[chat]\nplatform = \"discord\"\n[discord]\ntoken = \"t\"\n[agent]\ncommand = \""+fakeAgent+"\"\n[channels.\"42\"]\nagent = \"default\"\n")
	if err != nil {
		t.Fatal(err)
	}
	if acc := discordAccess(c); !slices.Contains(acc.AllowedChannels, "42") {
		t.Fatalf("allowed channels = %v, want 42 among them", acc.AllowedChannels)
	}
}

// A profile's permission rules are read from its tables, errors naming
// the profile, index and key; a profile without its own takes [agent]'s.
func TestProfiles_PermissionRulesPerProfile(t *testing.T) {
	c, err := loadText(t, `
[agent]
command = "`+fakeAgent+`"
[[agent.permissions]]
kind = "read"
action = "allow"

[agents]
default = "a"
[agents.a]
[agents.reviewer]
[[agents.reviewer.permissions]]
kind = ["edit", "delete", "move", "execute"]
action = "deny"
[[agents.reviewer.permissions]]
title = '^Read '
action = "allow"
`)
	if err != nil {
		t.Fatal(err)
	}
	a, rev := c.Profiles["a"].Permissions, c.Profiles["reviewer"].Permissions
	if len(a) != 1 || a[0].String() != "kind read" || len(rev) != 2 || rev[1].Title.String() != "^Read " {
		t.Fatalf("rules: a %v, reviewer %v", a, rev)
	}
	_, err = loadText(t, "[agents.x]\ncommand = \""+fakeAgent+"\"\n[[agents.x.permissions]]\ntitle = \"(\"\naction = \"allow\"\n")
	if err == nil || !strings.Contains(err.Error(), `agents.x.permissions[0].title = "(" is not a regular expression`) {
		t.Fatalf("a bad rule: %v", err)
	}
}

// The two-agent setup the README and config.example.toml show is a
// configuration that loads (with the fake agent for npx and a real
// repository path).
func TestProfiles_TheDocumentedTwoAgentSetupLoads(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, _ := strings.Cut(string(readme), "```toml\n[agent]                       # shared by both profiles\n")
	block, _, _ = strings.Cut(block, "```")
	example, err := os.ReadFile("../../config.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	_, commented, _ := strings.Cut(string(example), "\n[agents]\n")
	_, commented, _ = strings.Cut(commented, "\n") // default = "", as it stands
	var uncommented strings.Builder
	uncommented.WriteString("[agents]\ndefault = \"claude\"\n")
	for _, line := range strings.Split(commented, "\n") {
		uncommented.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "#"), " ") + "\n")
	}
	repo := gitRepo(t)
	for name, text := range map[string]string{"README": "[agent]\n" + block, "config.example.toml": "[agent]\ncommand = \"npx\"\n" + uncommented.String()} {
		text = strings.ReplaceAll(text, `"npx"`, `"`+fakeAgent+`"`)
		text = strings.ReplaceAll(text, `"/srv/repo"`, `"`+repo+`"`)
		c, err := loadText(t, text)
		if err != nil {
			t.Fatalf("%s's example: %v\n%s", name, err, text)
		}
		if len(c.Profiles) != 2 || c.DefaultProfile != "claude" || c.Profiles["codex"].Workspace != "worktree" || c.Channels["123456789012345678"] != "codex" {
			t.Fatalf("%s's example: profiles %v, default %q, channels %v", name, sortedKeys(c.Profiles), c.DefaultProfile, c.Channels)
		}
	}
}

// A profile's own [[agents.NAME.mcp_servers]] replace [agent]'s; a
// profile without them takes [agent]'s.
func TestProfiles_MCPServersPerProfile(t *testing.T) {
	c, err := loadText(t, `
[agent]
command = "`+fakeAgent+`"
[[agent.mcp_servers]]
name = "shared"
command = "`+fakeAgent+`"

[agents]
default = "a"
[agents.a]
[agents.b]
[[agents.b.mcp_servers]]
name = "docs"
type = "http"
url = "https://mcp.example.com/mcp"
headers = { Authorization = "Bearer T0KEN-of-b" }
`)
	if err != nil {
		t.Fatal(err)
	}
	a, b := c.Profiles["a"].MCPServers, c.Profiles["b"].MCPServers
	if len(a) != 1 || a[0].Name != "shared" || len(b) != 1 || b[0].Name != "docs" || b[0].Headers[0].Value != "Bearer T0KEN-of-b" {
		t.Fatalf("servers: a %v, b %v", a, b)
	}
	if v := c.values["agents.b.mcp_servers"]; strings.Contains(v, "T0KEN") {
		t.Fatalf("the reload record shows a header value: %q", v)
	}
}

// The console offers the profiles too: /agents lists them, /new NAME
// starts a conversation with one, and a reload (SIGHUP) adds one that
// /new can then start.
func TestRun_ConsoleNewAndAgentsWithProfilesAndAReload(t *testing.T) {
	profiles := "[agents]\ndefault = \"a\"\n[agents.a]\ndescription = \"the first\"\nenv = [\"WHO=a\"]\n[agents.b]\nenv = [\"WHO=b\"]\n"
	config := writeConfig(t, profiles+"[pool]\nmax_sessions = 4\n")
	b := startBroker(t, config, "BROKER_AGENT_SANDBOX=none", "BROKER_LOG_LEVEL=info")
	b.out.waitFor(t, "Type a message", 20*time.Second)
	b.say(t, "/agents")
	b.out.waitFor(t, "[a (default): the first — 0 live, 0 busy]", 10*time.Second)
	b.out.waitFor(t, "[b — 0 live, 0 busy]", 10*time.Second)
	b.say(t, "env")
	b.out.waitFor(t, "WHO=a", 20*time.Second)
	b.say(t, "/new b")
	b.out.waitFor(t, "[new conversation with b", 10*time.Second)
	b.say(t, "env")
	b.out.waitFor(t, "WHO=b", 20*time.Second)
	b.say(t, "/new c")
	b.out.waitFor(t, `[there is no agent "c"; the agents are a, b]`, 10*time.Second)

	text, _ := os.ReadFile(config)
	os.WriteFile(config, []byte(strings.Replace(string(text), "[agents.b]", "[agents.c]\nenv = [\"WHO=c\"]\n[agents.b]", 1)), 0o600)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	b.err.waitFor(t, "configuration reloaded", 10*time.Second)
	b.say(t, "/new c")
	b.out.waitFor(t, "[new conversation with c", 10*time.Second)
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
	b.out.waitFor(t, "[new conversation with rev", 10*time.Second)
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
	b.out.waitFor(t, "[session reset", 10*time.Second)
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

// agents.default can be set from the environment, as every key of the
// table: BROKER_AGENTS_DEFAULT picks the default profile.
func TestProfiles_TheDefaultFromTheEnvironment(t *testing.T) {
	text := "[agents]\ndefault = \"a\"\n[agents.a]\ncommand = \"" + fakeAgent + "\"\n[agents.b]\ncommand = \"" + fakeAgent + "\"\n"
	c, err := loadText(t, text, "BROKER_AGENTS_DEFAULT=b")
	if err != nil {
		t.Fatal(err)
	}
	if c.DefaultProfile != "b" {
		t.Fatalf("with BROKER_AGENTS_DEFAULT=b the default is %q", c.DefaultProfile)
	}
	if _, err := loadText(t, text, "BROKER_AGENTS_DEFAULT=c"); err == nil || !strings.Contains(err.Error(), `agents.default = "c" is not a profile: one of a, b`) {
		t.Fatalf("BROKER_AGENTS_DEFAULT=c: %v", err)
	}
}

// /agents lists a removed profile as long as its agents still run,
// marked removed; /new no longer offers it.
func TestRun_AgentsListsARemovedProfilesLiveAgents(t *testing.T) {
	config := writeConfig(t, "[agents]\ndefault = \"a\"\n[agents.a]\nenv = [\"WHO=a\"]\n[agents.b]\nenv = [\"WHO=b\"]\n")
	b := startBroker(t, config, "BROKER_AGENT_SANDBOX=none", "BROKER_LOG_LEVEL=info")
	b.out.waitFor(t, "Type a message", 20*time.Second)
	b.say(t, "/new b")
	b.say(t, "env")
	b.out.waitFor(t, "WHO=b", 20*time.Second)
	text, _ := os.ReadFile(config)
	os.WriteFile(config, []byte(strings.Replace(string(text), "[agents.b]\nenv = [\"WHO=b\"]\n", "", 1)), 0o600)
	from := b.err.mark()
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	b.err.waitFrom(t, from, "configuration reloaded", 10*time.Second)
	from = b.out.mark()
	b.say(t, "/agents")
	b.out.waitFrom(t, from, "[b (removed) — 1 live, 0 busy]", 10*time.Second)
	b.say(t, "/new b")
	b.out.waitFrom(t, from, `[there is no agent "b"; the agents are a]`, 10*time.Second)
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
// with its demo agent (the fake agent, at the path the file names; the
// metrics port moved from the environment, as the file's own port may be
// taken on a shared machine).
func TestRun_TheConfigurationOfBeforeProfilesRunsUnchanged(t *testing.T) {
	config, err := filepath.Abs("../../testdata/config.pre-profiles.toml")
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
	c, err := LoadConfig(config, []string{"PATH=" + os.Getenv("PATH")})
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Profiles[DefaultProfileName]; len(c.Profiles) != 1 || p == nil || c.DefaultProfile != DefaultProfileName ||
		p.Command != filepath.Join(dir, "bin/demo-agent") || p.Cwd != "./work" || c.Agent.Sandbox != "bwrap" {
		t.Fatalf("profiles %v, default %q, the default profile %+v", sortedKeys(c.Profiles), c.DefaultProfile, p)
	}
	// As root, the one change: agents may not run as root.
	b := startBroker(t, config, append(agentUserEnv(t, dir), "BROKER_HTTP_LISTEN=127.0.0.1:0")...)
	b.out.waitFor(t, "Type a message", 20*time.Second)
	b.say(t, "hello")
	b.out.waitFor(t, "You said: hello", 20*time.Second)
	b.out.waitFor(t, "[done in", 20*time.Second)
	b.say(t, "/status")
	b.out.waitFor(t, `agent "default"`, 10*time.Second)
	if code := b.exit(t); code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", code, b.err.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "state", "state.db")); err != nil {
		t.Fatalf("no state where the file says: %v", err)
	}
}
