package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"acpbroker/internal/agenttest"
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

// What agents would be shown is checked against the broker's own files:
// a path shown writable, or a workspace (whose files the broker serves),
// that holds one, or a path inside the state directory, is refused
// naming both keys, in [agent] and in a profile alike; a path shown
// read-only that holds them is fine (they are hidden there), unless it
// is the directory of the configuration itself.
func TestSandbox_APathShowingABrokerFileIsRefusedNamingBothKeys(t *testing.T) {
	base := writeConfig(t, "")
	dir := filepath.Dir(base)
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
	text, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
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
		conf := strings.Replace(string(text), "[agent]\n", "[agent]\n"+tc.agent+"\n", 1) + fmt.Sprintf("[discord]\ntoken_file = %q\n", token)
		if tc.profile != "" {
			conf += "[agents.x]\n" + tc.profile + "\n"
		}
		if err := os.WriteFile(base, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := LoadConfig(base, []string{"PATH=" + os.Getenv("PATH")})
		if err != nil {
			t.Fatalf("[agent] %s, [agents.x] %s: %v", tc.agent, tc.profile, err)
		}
		problems := errors.Join(checkSandbox(cfg, base)...)
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

// A reload is checked as a start is: a profile whose workspace would
// show the broker's state is refused, and the running profiles stay.
func TestReload_APathShowingABrokerFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	conf := map[string]string{
		"agent.command":  fmt.Sprintf("%q", fakeAgent),
		"agent.cwd":      fmt.Sprintf("%q", filepath.Join(dir, "work")),
		"agent.sandbox":  `"none"`,
		"state.dir":      fmt.Sprintf("%q", state),
		"http.listen":    `""`,
		"agents.default": `"a"`,
		"agents.a.env":   `["WHO=a"]`,
	}
	path := filepath.Join(dir, "broker.toml")
	if err := os.WriteFile(path, []byte(tomlOf(conf)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	log, level := newLogger("json", cfg.Log.Level, io.Discard)
	b, err := open(cfg, path, nil, log, level, strings.NewReader(""), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer b.stop(context.Background())
	conf["agents.b.cwd"] = fmt.Sprintf("%q", dir)
	conf["agents.b.per_thread_dir"] = "false"
	if err := os.WriteFile(path, []byte(tomlOf(conf)), 0o600); err != nil {
		t.Fatal(err)
	}
	res := b.prepareReload(context.Background())
	want := fmt.Sprintf("agents.b.cwd = %q shows state.dir %q", dir, state)
	if res.err == nil || !strings.Contains(res.err.Error(), want) {
		t.Fatalf("the reload: %v\nwant %q", res.err, want)
	}
}
