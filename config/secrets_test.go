package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"acpbroker/internal/agenttest"
)

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
		cfg, err := loadText(t, text)
		if err != nil {
			t.Fatalf("%s: %v", tc.agent, err)
		}
		for _, f := range files {
			if !slices.Contains(cfg.Hidden(), f) {
				t.Errorf("%s is not among the files hidden from agents: %q", f, cfg.Hidden())
			}
		}
		problems := errors.Join(CheckSandbox(cfg)...)
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

// A token the project's own examples show (README.md, config.example.toml,
// testdata, packaging) is refused, in an [[api.tokens]] table and from
// BROKER_API_TOKEN alike, naming where it was given: every token-like
// literal those files hold is among the ones refused.
func TestLoadConfig_ATokenTheExamplesShowIsRefused(t *testing.T) {
	var files []string
	for _, pattern := range []string{"../README.md", "../config.example.toml", "../testdata/*.toml", "../packaging/*"} {
		m, _ := filepath.Glob(pattern)
		for _, f := range m {
			if fi, err := os.Stat(f); err == nil && fi.Mode().IsRegular() {
				files = append(files, f)
			}
		}
	}
	literal := regexp.MustCompile(`(?i)(?:token\s*=\s*"|bearer\s+|\bT=)([^\s"$]{16,})`)
	found := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range literal.FindAllSubmatch(b, -1) {
			found[string(m[1])] = f
		}
	}
	for _, tok := range publishedTokens {
		found[tok] = "publishedTokens"
	}
	tables := agentTable() + "[[api.tokens]]\nname = \"ci\"\ntoken = %q\nchannels = [\"*\"]\n"
	for tok, where := range found {
		_, err := loadText(t, fmt.Sprintf(tables, tok))
		if err == nil || !strings.Contains(err.Error(), "api.tokens[0].token is the example token the broker's own documentation shows") {
			t.Errorf("%q (from %s) in [[api.tokens]]: %v", tok, where, err)
		}
		_, err = loadText(t, agentTable(), EnvTokenVar+"="+tok)
		if err == nil || !strings.Contains(err.Error(), EnvTokenVar+" is the example token") {
			t.Errorf("%q (from %s) in %s: %v", tok, where, EnvTokenVar, err)
		}
	}
	if _, err := loadText(t, fmt.Sprintf(tables, "a-token-of-its-own-0123456789")); err != nil {
		t.Errorf("a token of its own: %v", err)
	}
}

// BROKER_API_TOKEN gives the API one more client, named env, that may
// use every channel, name every profile and answer its prompts'
// permission requests, besides the file's; it is checked as a file's
// token is, naming the variable, and masked as a secret.
func TestLoadConfig_BROKER_API_TOKENIsOneMoreClient(t *testing.T) {
	const tok = "from-the-environment-0123456789"
	file := agentTable() + "[[api.tokens]]\nname = \"ci\"\ntoken = \"ci-token-0123456789abcdef\"\nchannels = [\"*\"]\n"
	cfg, err := loadText(t, file, EnvTokenVar+"="+tok)
	if err != nil {
		t.Fatal(err)
	}
	want := APIToken{Name: "env", Token: tok, Channels: []string{"*"}, Agents: []string{"*"}, MayApprove: true}
	if n := len(cfg.API.Tokens); n != 2 || !tokensEqual(cfg.API.Tokens[1], want) || cfg.API.Tokens[0].Name != "ci" {
		t.Fatalf("tokens %+v, want ci and %+v", cfg.API.Tokens, want)
	}
	if !slices.Contains(cfg.Secrets(), tok) {
		t.Errorf("the token is not among the secrets masked: %q", cfg.Secrets())
	}
	if cfg, err := loadText(t, agentTable()); err != nil || len(cfg.API.Tokens) != 0 {
		t.Errorf("without it: %+v, %v", cfg, err)
	}
	for _, tc := range []struct{ text, env, want string }{
		{agentTable(), EnvTokenVar + "=short", EnvTokenVar + " is shorter than 16 characters"},
		{file, EnvTokenVar + "=ci-token-0123456789abcdef", EnvTokenVar + " is the token of api.tokens[0] too"},
		{strings.Replace(file, `"ci"`, `"env"`, 1), EnvTokenVar + "=" + tok, `api.tokens[0].name = "env" is the name of the client BROKER_API_TOKEN gives`},
	} {
		if _, err := loadText(t, tc.text, tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v\nwant %q", tc.env, err, tc.want)
		}
	}
}

// agentTable is an [agent] table naming the fake agent.
func agentTable() string { return fmt.Sprintf("[agent]\ncommand = %q\n", fakeAgent) }

func tokensEqual(a, b APIToken) bool {
	return a.Name == b.Name && a.Token == b.Token && slices.Equal(a.Channels, b.Channels) && slices.Equal(a.Agents, b.Agents) && a.MayApprove == b.MayApprove
}

// api.listen beyond loopback is warned of (bearer tokens over plain
// HTTP); on loopback it is not.
func TestLoadConfig_TheAPIBeyondLoopbackIsWarned(t *testing.T) {
	for listen, warned := range map[string]bool{
		"0.0.0.0:9480": true, ":9480": true, "[::]:9480": true, "192.0.2.7:9480": true, "broker.example.com:9480": true,
		"127.0.0.1:9480": false, "127.0.0.2:0": false, "[::1]:9480": false, "localhost:9480": false,
	} {
		cfg, err := loadText(t, agentTable()+fmt.Sprintf("[api]\nlisten = %q\n", listen))
		if err != nil {
			t.Fatalf("%s: %v", listen, err)
		}
		got := slices.ContainsFunc(cfg.Warnings, func(w string) bool {
			return strings.Contains(w, fmt.Sprintf("api.listen = %q is beyond loopback", listen)) && strings.Contains(w, "TLS proxy")
		})
		if got != warned {
			t.Errorf("api.listen = %q: warned %v (%q), want %v", listen, got, cfg.Warnings, warned)
		}
	}
}

// agent.run_as_user = "nobody" (by name or uid) is warned of, with how
// to make a user of the agents' own; another user is not.
func TestLoadConfig_AgentsRunAsNobodyIsWarned(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("agent.run_as_user needs root")
	}
	for user, warned := range map[string]bool{"nobody": true, "65534": true, "daemon": false} {
		cfg, err := loadText(t, strings.Replace(agentTable(), "[agent]\n", fmt.Sprintf("[agent]\nrun_as_user = %q\n", user), 1))
		if err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		got := slices.ContainsFunc(cfg.Warnings, func(w string) bool {
			return strings.Contains(w, fmt.Sprintf("agent.run_as_user = %q is a user other services run as too", user)) && strings.Contains(w, "useradd --system")
		})
		if got != warned {
			t.Errorf("agent.run_as_user = %q: warned %v (%q), want %v", user, got, cfg.Warnings, warned)
		}
	}
}

// The secrets masked wherever text from outside is logged are the chat
// platforms' tokens and secrets, Slack's too, and the API's tokens.
func TestLoadConfig_SecretsAreEveryPlatformsAndTheAPIs(t *testing.T) {
	cfg, err := loadText(t, agentTable()+"[chat]\nplatform = [\"discord\", \"slack\"]\n[discord]\ntoken = \"discord-token\"\nallowed_channels = [\"1\"]\n"+
		"[slack]\nbot_token = \"xoxb-bot\"\napp_token = \"xapp-app\"\nallowed_channels = [\"C1\"]\n"+
		"[[api.tokens]]\nname = \"ci\"\ntoken = \"ci-token-0123456789abcdef\"\nchannels = [\"*\"]\n", "BROKER_SLACK_SIGNING_SECRET=signing-secret")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"discord-token", "xoxb-bot", "xapp-app", "signing-secret", "ci-token-0123456789abcdef"} {
		if !slices.Contains(cfg.Secrets(), s) {
			t.Errorf("%s is not among the secrets: %q", s, cfg.Secrets())
		}
	}
}

// A file a secret is read from that every user may read is warned of,
// naming its key; one the broker's alone is not.
func TestLoadConfig_ASecretFileEveryUserMayReadIsWarned(t *testing.T) {
	dir := t.TempDir()
	for mode, warned := range map[os.FileMode]bool{0o644: true, 0o640: false, 0o600: false} {
		f := filepath.Join(dir, fmt.Sprintf("token-%04o", mode))
		os.WriteFile(f, []byte("tok-0123456789abcdef"), 0o600)
		os.Chmod(f, mode)
		cfg, err := loadText(t, agentTable()+fmt.Sprintf("[[api.tokens]]\nname = \"ci\"\ntoken_file = %q\nchannels = [\"*\"]\n", f))
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("api.tokens[0].token_file = %q is readable by every user of the machine (mode %04o)", f, mode)
		got := slices.ContainsFunc(cfg.Warnings, func(w string) bool { return strings.Contains(w, want) })
		if got != warned {
			t.Errorf("mode %04o: warned %v (%q), want %v", mode, got, cfg.Warnings, warned)
		}
	}
}
