package faults

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A bad configuration value stops the broker before it touches Discord:
// `broker --config` and `broker check-config --config` both exit with
// status 2 and a message naming the key and what is wrong with it, and
// the fake Discord never sees a connection or a request.
func TestBadConfig_RefusedWithTheKeyBeforeConnecting(t *testing.T) {
	w := newWorld(t, setup{})
	cases := []struct {
		name   string
		change settings
		env    []string
		reason string
	}{
		{"typo in a key", settings{"turn.timout": "5m"}, nil, "unknown key(s): turn.timout"},
		{"ceiling over 6h", settings{"turn.timeout": "7h"}, nil, "turn.timeout = 7h0m0s is out of range [1s, 6h0m0s]"},
		{"not a duration", settings{"turn.cancel_grace": "soon"}, nil, `turn.cancel_grace = "soon" is not a duration`},
		{"not a duration from the environment", nil, []string{"BROKER_TURN_TIMEOUT=forever"}, `turn.timeout = "forever" is not a duration`},
		{"not a number from the environment, named", nil, []string{"BROKER_TURN_QUEUE_SIZE=eight"}, `BROKER_TURN_QUEUE_SIZE=eight: turn.queue_size must be a whole number, not "eight"`},
		{"unknown permission mode", settings{"turn.permission_mode": "yolo"}, nil, `turn.permission_mode = "yolo" must be one of ask, allow, deny`},
		{"discord without allowed channels", settings{"discord.allowed_channels": []string{}}, nil, "discord.allowed_channels is empty"},
		{"discord without a token", settings{"discord.token": nil}, nil, "discord.token is required"},
		{"agent not installed", settings{"agent.command": "claude-agent-acp-missing"}, nil, `agent.command = "claude-agent-acp-missing" is not found on PATH`},
		{"agent path not executable", settings{"agent.command": "/nonexistent/agent"}, nil, `agent.command = "/nonexistent/agent": /nonexistent/agent is not an executable file`},
		{"unknown log level", settings{"log.level": "verbose"}, nil, `log.level = "verbose" must be one of trace, debug, info, warn, error`},
		{"api_url not a URL", settings{"discord.api_url": "discord.example/api/v9"}, nil, `discord.api_url = "discord.example/api/v9" is not an http(s) URL`},
		{"http.listen not an address", settings{"http.listen": "metrics-port"}, nil, `http.listen = "metrics-port" is not a host:port address`},
		{"web.listen on http.listen's address", settings{"http.listen": "127.0.0.1:9464", "web.listen": "127.0.0.1:9464"}, nil, `web.listen = "127.0.0.1:9464" is http.listen's address too`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "broker.toml")
			if err := os.WriteFile(path, []byte(w.Conf.With(tc.change).TOML()), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{{"--config", path}, {"check-config", "--config", path}} {
				code, stderr := runBrokerCommand(t, tc.env, args...)
				if code != 2 || !strings.Contains(stderr, tc.reason) {
					t.Errorf("broker %s: exit status %d, stderr %q; want 2 and %q", strings.Join(args, " "), code, stderr, tc.reason)
				}
			}
		})
	}
	// The same configuration without the fault is valid, and checking it
	// does not connect either.
	code, stderr := runBrokerCommand(t, nil, "check-config", "--config", w.writeConfig())
	if code != 0 {
		t.Errorf("check-config of the good configuration: exit status %d, stderr %q", code, stderr)
	}
	if st := w.Srv.Stats(); st.Connections != 0 || st.Identifies != 0 {
		t.Errorf("the fake Discord saw %d gateway connection(s) and %d IDENTIFY", st.Connections, st.Identifies)
	}
	if reqs := w.Srv.Requests(); len(reqs) != 0 {
		t.Errorf("the fake Discord saw %d REST request(s), the first %s %s", len(reqs), reqs[0].Method, reqs[0].Path)
	}
}

// runBrokerCommand runs the broker binary to its end (killing it after
// 20s) and returns its exit status and what it wrote.
func runBrokerCommand(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.Broker, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("broker %s was still running after 20s; it wrote:\n%s", strings.Join(args, " "), out.String())
	}
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("broker %s: %v", strings.Join(args, " "), err)
	}
	return cmd.ProcessState.ExitCode(), out.String()
}

// Slack chosen without what it needs stops the broker before it touches
// Slack, naming the key, as a bad value does; a token Slack refuses
// stops the broker once Slack says so, with status 1 and the reason,
// and nothing else is asked of Slack.
func TestBadConfig_SlackRefusedWithTheKeyBeforeConnecting(t *testing.T) {
	w, _ := newWorldOn(t, "slack", setup{})
	for _, tc := range []struct {
		name   string
		change settings
		reason string
	}{
		{"no bot token", settings{"slack.bot_token": nil}, `slack.bot_token is required when chat.platform has "slack"`},
		{"no app token", settings{"slack.app_token": nil}, `slack.app_token is required with slack.mode = "socket"`},
		{"http without a secret", settings{"slack.mode": "http", "slack.listen": "127.0.0.1:0"}, `slack.signing_secret is required with slack.mode = "http"`},
		{"http without an address", settings{"slack.mode": "http", "slack.signing_secret": "s"}, `slack.listen is required with slack.mode = "http"`},
		{"nowhere to answer", settings{"slack.allowed_channels": []string{}}, "slack.allowed_channels is empty"},
		{"an unknown mode", settings{"slack.mode": "rtm"}, `slack.mode = "rtm" must be one of socket, http`},
		{"both platforms, Slack without a token", settings{"chat.platform": []string{"discord", "slack"}, "slack.bot_token": nil}, `slack.bot_token is required`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "broker.toml")
			if err := os.WriteFile(path, []byte(w.Conf.With(tc.change).TOML()), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{{"--config", path}, {"check-config", "--config", path}} {
				code, stderr := runBrokerCommand(t, nil, args...)
				if code != 2 || !strings.Contains(stderr, tc.reason) {
					t.Errorf("broker %s: exit status %d, stderr %q; want 2 and %q", strings.Join(args, " "), code, stderr, tc.reason)
				}
			}
		})
	}
	if calls := w.Slack.Srv.Calls(); len(calls) != 0 {
		t.Fatalf("the fake Slack saw %d call(s), the first %s", len(calls), calls[0].Method)
	}

	t.Run("a token Slack refuses", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "broker.toml")
		os.WriteFile(path, []byte(w.Conf.With(settings{"slack.bot_token": "xoxb-revoked", "agent.sandbox": "none"}).TOML()), 0o600)
		code, out := runBrokerCommand(t, nil, "--config", path)
		if code != 1 || !strings.Contains(out, "the bot token was refused") {
			t.Errorf("exit status %d, output %q; want 1 and the refusal", code, out)
		}
		for _, c := range w.Slack.Srv.Calls() {
			if c.Method != "auth.test" {
				t.Errorf("a broker whose token Slack refused called %s", c.Method)
			}
		}
	})
}
