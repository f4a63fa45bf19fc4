package faults

import (
	"strings"
	"syscall"
	"testing"
)

// A secret an agent prints in its error never reaches the thread or the
// log: the stderr tail shown is masked, and so are the broker's log lines
// and a reload's diff of agent.env.
func TestRedact_SecretsInAnAgentsStderrAreMasked(t *testing.T) {
	const key = "sk-test-9f8e7d6c5b4a"
	w := newWorld(t, setup{conf: settings{"agent.env": []string{"API_KEY=${TEST_API_KEY}"}}})
	w.env = []string{"TEST_API_KEY=" + key}
	b := w.start()
	thread := w.mention(alice, "leak-env API_KEY")
	got := w.awaitAnswers(thread, 1)[0]
	if !strings.Contains(got.footer, "bad credentials [redacted]") || strings.Contains(got.footer+got.text, key) {
		t.Fatalf("the thread shows %q / %q", got.text, got.footer)
	}

	w.conf["agent.env"] = []string{"API_KEY=" + key + "-rotated"}
	w.writeConfig()
	b.cmd.Process.Signal(syscall.SIGHUP)
	w.srv.Await("reload logged", func() bool { return strings.Contains(b.log.String(), "configuration reloaded") })
	b.stop()
	log := b.log.String()
	if strings.Contains(log, key) {
		for _, l := range strings.Split(log, "\n") {
			if strings.Contains(l, key) {
				t.Errorf("the log shows the secret: %s", l)
			}
		}
	}
	if !strings.Contains(log, `"agent.env"`) {
		t.Errorf("the reload does not say agent.env changed:\n%s", grepLines(log, `{"level":"warn"`))
	}
}
