package config

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

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
