package broker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"acpbroker/config"
	"acpbroker/internal/agenttest"
)

// loadComplete loads the configuration at path and finds on the machine
// what it names, as the broker does when it is wired.
func loadComplete(t *testing.T, path string, environ []string) (*config.Config, error) {
	t.Helper()
	cfg, err := config.Load(path, environ)
	if err != nil {
		return nil, err
	}
	return cfg, complete(cfg, environ, true)
}

// loadTextComplete is loadComplete of a configuration written as text,
// with PATH holding the fake agent's directory.
func loadTextComplete(t *testing.T, text string) (*config.Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "broker.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return loadComplete(t, path, []string{"PATH=" + filepath.Dir(fakeAgent)})
}

func agentTable() string { return fmt.Sprintf("[agent]\ncommand = %q\n", fakeAgent) }

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
		cfg, err := loadComplete(t, base, []string{"PATH=" + os.Getenv("PATH")})
		if err != nil {
			t.Fatalf("[agent] %s, [agents.x] %s: %v", tc.agent, tc.profile, err)
		}
		problems := errors.Join(checkSandbox(cfg)...)
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

// Each API token's token_file is one of the broker's files, as the chat
// platforms' token files are: hidden from agents, and a path shown
// writable that holds it, a workspace that holds it or a path shown
// read-only that is its directory is refused naming both keys.
func TestSandbox_AnAPITokenFileIsHiddenAndRefusedNamingBothKeys(t *testing.T) {
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets")
	os.MkdirAll(secrets, 0o755)
	agenttest.Traversable(t, secrets)
	files := []string{filepath.Join(secrets, "ci"), filepath.Join(secrets, "ops")}
	for _, f := range files {
		os.WriteFile(f, []byte("tok-0123456789abcdef-"+filepath.Base(f)), 0o600)
	}
	for _, tc := range []struct {
		agent string
		want  []string
	}{
		{fmt.Sprintf("sandbox_rw = [%q]", secrets), []string{
			fmt.Sprintf("agent.sandbox_rw = %q shows api.tokens[0].token_file %q: an agent may write around it there", secrets, files[0]),
			fmt.Sprintf("agent.sandbox_rw = %q shows api.tokens[1].token_file %q", secrets, files[1])}},
		{fmt.Sprintf("cwd = %q\nper_thread_dir = false", secrets), []string{
			fmt.Sprintf("agent.cwd = %q shows api.tokens[0].token_file %q: the broker serves its agents' file requests there", secrets, files[0])}},
		{fmt.Sprintf("sandbox_ro = [%q]", secrets), []string{
			fmt.Sprintf("agent.sandbox_ro = %q is the directory of api.tokens[0].token_file, which agents are not shown", secrets)}},
		{fmt.Sprintf("sandbox_ro = [%q]", dir), nil}, // hidden there
	} {
		text := fmt.Sprintf("[agent]\ncommand = %q\nrun_as_user = %q\n%s\n[state]\ndir = %q\n", fakeAgent, agenttest.AgentUser(), tc.agent, filepath.Join(dir, "state"))
		if !strings.Contains(tc.agent, "cwd") {
			text = strings.Replace(text, "[agent]\n", fmt.Sprintf("[agent]\ncwd = %q\n", filepath.Join(dir, "work")), 1)
		}
		for i, f := range files {
			text += fmt.Sprintf("[[api.tokens]]\nname = \"t%d\"\ntoken_file = %q\nchannels = [\"*\"]\n", i, f)
		}
		cfg, err := loadTextComplete(t, text)
		if err != nil {
			t.Fatalf("%s: %v", tc.agent, err)
		}
		for _, f := range files {
			if !slices.Contains(hidden(cfg), f) {
				t.Errorf("%s is not among the files hidden from agents: %q", f, hidden(cfg))
			}
		}
		problems := errors.Join(checkSandbox(cfg)...)
		if tc.want == nil && problems != nil {
			t.Errorf("%s: refused: %v", tc.agent, problems)
		}
		for _, w := range tc.want {
			if problems == nil || !strings.Contains(problems.Error(), w) {
				t.Errorf("%s: %v\nwant %q", tc.agent, problems, w)
			}
		}
	}
}

// agent.run_as_user = "nobody" (by name or uid) is warned of, with how
// to make a user of the agents' own; another user is not.
func TestCheck_AgentsRunAsNobodyIsWarned(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("agent.run_as_user needs root")
	}
	for user, warned := range map[string]bool{"nobody": true, "65534": true, "daemon": false} {
		cfg, err := loadTextComplete(t, strings.Replace(agentTable(), "[agent]\n", fmt.Sprintf("[agent]\nrun_as_user = %q\n", user), 1))
		if err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		got := slices.ContainsFunc(machineWarnings(cfg), func(w string) bool {
			return strings.Contains(w, fmt.Sprintf("agent.run_as_user = %q is a user other services run as too", user)) && strings.Contains(w, "useradd --system")
		})
		if got != warned {
			t.Errorf("agent.run_as_user = %q: warned %v (%q), want %v", user, got, machineWarnings(cfg), warned)
		}
	}
}

// A file a secret is read from that every user may read is warned of,
// naming its key; one the broker's alone is not.
func TestCheck_ASecretFileEveryUserMayReadIsWarned(t *testing.T) {
	dir := t.TempDir()
	for mode, warned := range map[os.FileMode]bool{0o644: true, 0o640: false, 0o600: false} {
		f := filepath.Join(dir, fmt.Sprintf("token-%04o", mode))
		os.WriteFile(f, []byte("tok-0123456789abcdef"), 0o600)
		os.Chmod(f, mode)
		cfg, err := loadTextComplete(t, agentTable()+fmt.Sprintf("[[api.tokens]]\nname = \"ci\"\ntoken_file = %q\nchannels = [\"*\"]\n", f))
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("api.tokens[0].token_file = %q is readable by every user of the machine (mode %04o)", f, mode)
		got := slices.ContainsFunc(machineWarnings(cfg), func(w string) bool { return strings.Contains(w, want) })
		if got != warned {
			t.Errorf("mode %04o: warned %v (%q), want %v", mode, got, machineWarnings(cfg), warned)
		}
	}
}

// secretFilesHidden writes a secret file for each key of table in a
// directory shown to agents writable (sandbox_rw), with the TOML extra
// naming them (its %q verbs take the files in keys' order), and checks
// that the sandbox's check refuses each naming both keys and that each is
// hidden from agents.
func secretFilesHidden(t *testing.T, table string, keys []string, extra string) {
	t.Helper()
	dir := t.TempDir()
	if user := agenttest.AgentUser(); user != "" {
		agenttest.Traversable(t, dir)
	}
	secrets := filepath.Join(t.TempDir(), "secrets")
	os.MkdirAll(secrets, 0o755)
	agenttest.Traversable(t, secrets)
	files := map[string]string{}
	args := make([]any, len(keys))
	for i, k := range keys {
		files[k] = filepath.Join(secrets, k)
		os.WriteFile(files[k], []byte("s3cret"), 0o600)
		args[i] = files[k]
	}
	base := filepath.Join(dir, "broker.toml")
	conf := fmt.Sprintf("[agent]\ncommand = %q\ncwd = %q\nrun_as_user = %q\nsandbox_rw = [%q]\n[state]\ndir = %q\n",
		fakeAgent, filepath.Join(dir, "work"), agenttest.AgentUser(), secrets, filepath.Join(dir, "state")) + fmt.Sprintf(extra, args...)
	if err := os.WriteFile(base, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadComplete(t, base, []string{"PATH=" + os.Getenv("PATH")})
	if err != nil {
		t.Fatal(err)
	}
	problems := errors.Join(checkSandbox(cfg)...)
	for k, f := range files {
		want := fmt.Sprintf("agent.sandbox_rw = %q shows %s.%s %q", secrets, table, k, f)
		if problems == nil || !strings.Contains(problems.Error(), want) {
			t.Errorf("%v\nwant %q", problems, want)
		}
		if !slices.Contains(hidden(cfg), f) {
			t.Errorf("%s is not among the files hidden from agents: %q", f, hidden(cfg))
		}
	}
}

// The files Slack's secrets are read from are the broker's own: an agent
// shown their directory writable is refused naming both keys, and a
// sandbox hides them wherever they are shown.
func TestSandbox_SlackSecretFilesAreHiddenFromAgents(t *testing.T) {
	secretFilesHidden(t, "slack", []string{"bot_token_file", "app_token_file", "signing_secret_file"},
		"[slack]\nbot_token_file = %q\napp_token_file = %q\nsigning_secret_file = %q\n")
}

// The files the cluster's credentials are read from are the broker's (and
// a host's) own: an agent shown their directory writable is refused
// naming both keys, and a sandbox hides them wherever they are shown.
func TestSandbox_ClusterCredentialFilesAreHiddenFromAgents(t *testing.T) {
	secretFilesHidden(t, "cluster", []string{"password_file", "nkey_seed_file", "tls_key"},
		"[cluster]\nurl = \"nats://127.0.0.1:4222\"\nuser = \"acp\"\npassword_file = %q\nnkey_seed_file = %q\ntls_cert = \"/etc/acp-broker/cert.pem\"\ntls_key = %q\n")
}
