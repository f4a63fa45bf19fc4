package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Today's example configuration, written before profiles, still runs:
// [agent] is the one profile, "default", and every thread gets it.
func TestProfiles_TheExampleIsOneDefaultProfile(t *testing.T) {
	c, err := Load("../config.example.toml", []string{"BROKER_AGENT_COMMAND=" + fakeAgent})
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
	if claude.Name != "claude" || claude.Command != filepath.Base(fakeAgent) || claude.Cwd != "/srv/agents" || !slices.Equal(claude.Args, []string{"--shared"}) ||
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
		{"an unknown key in a profile", "[agents.a]\ncommand = \"" + agent + "\"\ncomand = \"x\"\n",
			"unknown key(s): agents.a.comand"},
		{"a worktree without a repository", "[agents.a]\ncommand = \"" + agent + "\"\nworkspace = \"worktree\"\n",
			`agents.a.repo is required with workspace = "worktree"`},
		{"a shared repository without a worktree", "[agents.a]\ncommand = \"" + agent + "\"\nshared_repo = \"/srv/shared.git\"\n",
			`agents.a.shared_repo is only for workspace = "worktree"`},
		{"a shared repository over a transport that runs a command", "[agents.a]\ncommand = \"" + agent + "\"\nworkspace = \"worktree\"\nrepo = \"/srv/r\"\nshared_repo = \"ext::sh -c x\"\n",
			`agents.a.shared_repo is not an absolute path, a file://, ssh:// or https:// URL, or host:path`},
		{"a shared repository over plain http", "[agents.a]\ncommand = \"" + agent + "\"\nworkspace = \"worktree\"\nrepo = \"/srv/r\"\nshared_repo = \"http://code.example.com/r.git\"\n",
			`agents.a.shared_repo is not an absolute path`},
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
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, _ := strings.Cut(string(readme), "```toml\n[agent]                       # shared by both profiles\n")
	block, _, _ = strings.Cut(block, "```")
	example, err := os.ReadFile("../config.example.toml")
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
