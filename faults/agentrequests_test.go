package faults

import (
	"strings"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
)

// A hostile agent cannot hang or flood the broker through its requests:
// a named pipe in its workspace is refused at once for reading and
// writing, and the thread carries on; the first line of a 4 GiB sparse
// file is read while the broker's peak RSS stays under 256 MiB; with
// agent.max_requests = 4, a
// flood of 40 permission requests has 4 served and 36 refused at once,
// and the in-flight count returns to zero; the broker then stops within
// shutdown.grace.
func TestAgentRequests_PipesAndFloodsAreBounded(t *testing.T) {
	w := newWorld(t, setup{conf: settings{
		"agent.max_requests":      4,
		"turn.permission_timeout": "1s",
		"turn.permission_mode":    "ask",
		"shutdown.grace":          "5s",
	}})
	b := w.start()

	thread := w.mention(alice, "fs-fifo")
	got := w.awaitAnswers(thread, 1)[0]
	for _, method := range []string{"fs/read_text_file", "fs/write_text_file"} {
		line := ""
		for _, l := range strings.Split(got.Text, "\n") {
			if strings.HasPrefix(l, method) {
				line = l
			}
		}
		if !strings.Contains(line, "refused:") || !strings.Contains(line, "named pipe") {
			t.Fatalf("%s on a named pipe: %q", method, line)
		}
		_, took, _ := strings.Cut(line, " in ")
		if d, err := time.ParseDuration(took); err != nil || d > time.Second {
			t.Fatalf("%s on a named pipe answered after %q", method, took)
		}
	}
	w.Discord.Post(thread, alice, "stream 1")
	if next := w.awaitAnswers(thread, 2)[1]; !strings.HasPrefix(next.Text, "chunk 1") {
		t.Fatalf("the message after the pipe got %q", next.Text)
	}

	sparse := w.mention(alice, "read-sparse")
	got = w.awaitAnswers(sparse, 1)[0]
	if !strings.HasPrefix(got.Text, `read "first line\n" in `) {
		t.Fatalf("first line of a 4 GiB sparse file: %q", got.Text)
	}
	if hwm, err := brokertest.PeakRSS(b.PID()); err != nil || hwm > 256<<20 {
		t.Fatalf("the broker's peak RSS is %d MiB after reading from a 4 GiB file (%v)", hwm>>20, err)
	}

	flood := w.mention(alice, "flood 40")
	got = w.awaitAnswers(flood, 1)[0]
	if !strings.Contains(got.Text, "flood: 4 answered, 36 refused") {
		t.Fatalf("flood answer = %q", got.Text)
	}
	b.awaitMetric("acp_broker_acp_agent_requests_in_flight", func(v float64) bool { return v == 0 })
	if v, _ := b.metric("acp_broker_acp_agent_requests_refused_total"); v != 36 {
		t.Fatalf("refused requests metric = %v, want 36", v)
	}

	start := time.Now()
	if code := b.stop(); code != 0 {
		t.Fatalf("exit status %d", code)
	}
	if took := time.Since(start); took > 6*time.Second {
		t.Fatalf("stopping took %s with a 5s grace", took)
	}
}
