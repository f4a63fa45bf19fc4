package faults

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"acpbroker/internal/brokertest"
)

// A broker killed while a schedule's run and an API prompt run: at the
// next start both threads are told which message did not finish, as
// every turn's are; the run is recorded interrupted (broker audit
// --schedules), and the prompt reads failed, saying why.
func TestRestart_ScheduleRunsAndAPIPromptsInterruptedAreSaid(t *testing.T) {
	w := newWorld(t, withAPI(nil))
	w.Raw = apiTokens(w.Channel) + schedule(w.Channel, "@every 2s", "hang")
	b := w.start()
	run := w.awaitScheduleThreads(1)[0]
	w.awaitReaction(w.Channel, run, brokertest.Working)
	c := b.client(ciToken)
	s := c.start(map[string]any{"channel": w.Channel, "text": "hang"})
	w.awaitReaction(w.Channel, s.Thread, brokertest.Working)

	b2 := brokertest.MustGet(t, patience, func(ctx context.Context) (*brokertest.Broker, error) { return w.Restart(ctx, b.Broker, true) })
	b = &broker{Broker: b2, t: t}
	for _, th := range []string{run, s.Thread} {
		notice := w.awaitBotText(th, brokertest.RestartNotice)
		if !strings.Contains(notice.Content, "did not finish") {
			t.Errorf("thread %s: %q", th, notice.Content)
		}
	}
	v := b.client(ciToken).get(s.ID)
	if v.State != "failed" || !strings.Contains(v.Error, "the broker stopped") {
		t.Errorf("the interrupted prompt reads %+v", v)
	}
	out, err := exec.Command(w.Bins.Broker, "audit", "--schedules", "--json", "--config", w.writeConfig()).CombinedOutput()
	if err != nil {
		t.Fatalf("broker audit: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), `"outcome":"interrupted"`) || !strings.Contains(string(out), "the broker stopped while it ran") {
		t.Errorf("broker audit --schedules --json:\n%s", out)
	}
}
