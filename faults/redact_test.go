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
