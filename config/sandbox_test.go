package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"acpbroker/internal/agenttest"
)

// What agents would be shown is checked against the broker's own files:
// a path shown writable, or a workspace (whose files the broker serves),
// that holds one, or a path inside the state directory, is refused
// naming both keys, in [agent] and in a profile alike; a path shown
// read-only that holds them is fine (they are hidden there), unless it
// is the directory of the configuration itself.
func TestSandbox_APathShowingABrokerFileIsRefusedNamingBothKeys(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "broker.toml")
	user := agenttest.AgentUser()
	if user != "" {
		agenttest.Traversable(t, dir)
	}
	text := fmt.Sprintf("[agent]\ncommand = %q\ncwd = %q\nrun_as_user = %q\n[state]\ndir = %q\n",
		fakeAgent, filepath.Join(dir, "work"), user, filepath.Join(dir, "state"))
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o755); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(t.TempDir(), "secrets")
	os.MkdirAll(tokens, 0o755)
	token := filepath.Join(tokens, "token")
	os.WriteFile(token, []byte("tok"), 0o600)
	inState := filepath.Join(state, "agent")
	data, _ := os.ReadFile(fakeAgent)
	os.WriteFile(inState, data, 0o755)
	agenttest.Traversable(t, tokens)
	for _, tc := range []struct {
		agent, profile string   // TOML lines in [agent], and in [agents.x]
		want           []string // nil: accepted
	}{
		{agent: fmt.Sprintf("sandbox_rw = [%q]", dir), want: []string{
			fmt.Sprintf("agent.sandbox_rw = %q shows state.dir %q", dir, state),
			fmt.Sprintf("agent.sandbox_rw = %q shows the configuration file %q", dir, base)}},
		{agent: fmt.Sprintf("sandbox_rw = [%q]", tokens), profile: `description = "x"`, want: []string{
			fmt.Sprintf("agent.sandbox_rw = %q shows discord.token_file %q", tokens, token)}},
		{profile: fmt.Sprintf("sandbox_rw = [%q]", state), want: []string{
			fmt.Sprintf("agents.x.sandbox_rw = %q is state.dir", state)}},
		{profile: fmt.Sprintf("cwd = %q\nper_thread_dir = false", dir), want: []string{
			fmt.Sprintf("agents.x.cwd = %q shows state.dir %q: the broker serves its agents' file requests there", dir, state)}},
		{profile: fmt.Sprintf("cwd = %q", filepath.Join(state, "work")), want: []string{
			fmt.Sprintf("agents.x.cwd = %q is inside state.dir %q", filepath.Join(state, "work"), state)}},
		{profile: fmt.Sprintf("command = %q", inState), want: []string{
			fmt.Sprintf("agents.x.command = %q is inside state.dir %q", inState, state)}},
		{agent: fmt.Sprintf("sandbox_ro = [%q]", dir), want: []string{
			fmt.Sprintf("agent.sandbox_ro = %q is the directory of the configuration file, which agents are not shown", dir)}},
		{agent: fmt.Sprintf("sandbox_ro = [%q]", filepath.Dir(dir))},
	} {
		conf := strings.Replace(text, "[agent]\n", "[agent]\n"+tc.agent+"\n", 1) + fmt.Sprintf("[discord]\ntoken_file = %q\n", token)
		if tc.profile != "" {
			conf += "[agents.x]\n" + tc.profile + "\n"
		}
		if err := os.WriteFile(base, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(base, []string{"PATH=" + os.Getenv("PATH")})
		if err != nil {
			t.Fatalf("[agent] %s, [agents.x] %s: %v", tc.agent, tc.profile, err)
		}
		problems := errors.Join(CheckSandbox(cfg)...)
		switch {
		case tc.want == nil && problems != nil:
			t.Errorf("[agent] %s, [agents.x] %s: refused: %v", tc.agent, tc.profile, problems)
		case tc.want != nil && problems == nil:
			t.Errorf("[agent] %s, [agents.x] %s: accepted", tc.agent, tc.profile)
		}
		for _, w := range tc.want {
			if problems != nil && !strings.Contains(problems.Error(), w) {
				t.Errorf("[agent] %s, [agents.x] %s: %v\nwant %q", tc.agent, tc.profile, problems, w)
			}
		}
	}
}

// A broker run as root with agents unconfined and no user of their own
// is warned that its agents run as root; naming a user, or the
// sandbox, ends the warning.
func TestLoadConfig_RootWithAgentsUnconfinedIsWarned(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root")
	}
	const warning = `agent.sandbox = "none" with the broker running as root and no agent.run_as_user`
	base := "[agent]\ncommand = " + strconv.Quote(fakeAgent) + "\nsandbox = \"none\"\n"
	for _, tc := range []struct {
		name, extra string
		warned      bool
	}{
		{"root, unconfined", "", true},
		{"root, unconfined, as nobody", "run_as_user = \"nobody\"\n", false},
	} {
		cfg, err := loadText(t, base+tc.extra)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		warned := slices.ContainsFunc(cfg.Warnings, func(w string) bool { return strings.Contains(w, warning) })
		if warned != tc.warned {
			t.Errorf("%s: warned %v (%q), want %v", tc.name, warned, cfg.Warnings, tc.warned)
		}
	}
}
