package faults

import (
	"context"
	"strings"
	"syscall"
	"testing"

	"acpbroker/internal/brokertest"
)

// A secret an agent prints in its error never reaches the thread or the
// log: the stderr tail shown is masked, and so are the broker's log lines
// and a reload's diff of agent.env.
func TestRedact_SecretsInAnAgentsStderrAreMasked(t *testing.T) {
	const key = "sk-test-9f8e7d6c5b4a"
	w := newWorld(t, setup{conf: settings{"agent.env": []string{"API_KEY=${TEST_API_KEY}"}}})
	w.Env = []string{"TEST_API_KEY=" + key}
	b := w.start()
	thread := w.mention(alice, "leak-env API_KEY")
	got := w.awaitAnswers(thread, 1)[0]
	if !strings.Contains(got.Footer, "bad credentials [redacted]") || strings.Contains(got.Footer+got.Text, key) {
		t.Fatalf("the thread shows %q / %q", got.Text, got.Footer)
	}

	w.Conf["agent.env"] = []string{"API_KEY=" + key + "-rotated"}
	w.writeConfig()
	b.Signal(syscall.SIGHUP)
	brokertest.MustGet(t, patience, func(ctx context.Context) (string, error) {
		return b.Log.Await(ctx, "configuration reloaded")
	})
	b.stop()
	for _, l := range b.Log.Grep(key) {
		t.Errorf("the log shows the secret: %s", l)
	}
	if len(b.Log.Grep(`"agent.env"`)) == 0 {
		t.Errorf("the reload does not say agent.env changed:\n%s", strings.Join(b.Log.Grep(`{"level":"warn"`), "\n"))
	}
}

// Slack's secrets never leave the broker: a bot token, an app-level
// token or a signing secret in an agent's error is masked in the thread
// (the agent here has it as LANG, which agents inherit from the
// broker's environment, so that only its being Slack's makes it a
// secret), and none of them is in the broker's log, at debug level, in
// Socket Mode or over HTTP.
func TestRedact_SlackSecretsAreMaskedAndNeverLogged(t *testing.T) {
	for _, tc := range []struct {
		name, mode string
		secret     func(s *brokertest.Slack) string
	}{
		{"bot token", "socket", func(s *brokertest.Slack) string { return s.Srv.BotToken() }},
		{"app token", "socket", func(s *brokertest.Slack) string { return s.Srv.AppToken() }},
		{"signing secret", "http", func(s *brokertest.Slack) string { return s.Srv.SigningSecret() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, f := newWorldOn(t, "slack", setup{conf: settings{"log.level": "debug", "agent.sandbox": "none"}})
			if tc.mode == "http" {
				if err := w.SlackOverHTTP(); err != nil {
					t.Fatal(err)
				}
			}
			secret := tc.secret(w.Slack)
			w.Env = []string{"LANG=" + secret}
			b := w.start()
			thread := f.mention(pAlice, "leak-env LANG")
			got := f.awaitAnswers(thread, 1)[0]
			if !strings.Contains(got.footer, "bad credentials [redacted]") || strings.Contains(got.text, secret) {
				t.Errorf("the thread shows %q", got.text)
			}
			f.post(thread, pAlice, "hello")
			f.awaitAnswers(thread, 2)
			b.stop()
			if len(b.Log.Grep(`"level":"debug"`)) == 0 {
				t.Fatal("no debug lines in the log to search")
			}
			for _, l := range b.Log.Grep(secret) {
				t.Errorf("the log shows the %s: %s", tc.name, l)
			}
		})
	}
}
