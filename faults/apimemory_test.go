package faults

import (
	"strings"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
)

// A hundred prompts through the API, each answered with 5 MiB, leave
// the broker's memory bounded: an ended prompt keeps its last events
// and its clipped answer, within a budget for every ended prompt. The
// broker's peak and final RSS go to BENCHMARKS.md.
func TestAPI_AHundredBigAnswersLeaveMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test")
	}
	const n = 100
	w := newWorld(t, withAPI(settings{"chat.platform": "none", "discord.token": nil, "discord.api_url": nil, "discord.allowed_channels": nil,
		"api.rate_limit": 100000}))
	w.Raw = `
[[api.tokens]]
name = "ci"
token = "` + ciToken + `"
`
	b := w.start()
	c := b.client(ciToken)
	startRSS, _ := b.RSS()
	start := time.Now()
	ids := make([]string, n)
	for i := range n {
		ids[i] = c.start(map[string]any{"text": "flood-answer 5 64"}).ID
	}
	for _, id := range ids {
		for {
			v := c.get(id)
			if v.State == "done" {
				break
			}
			if v.State == "failed" || v.State == "cancelled" {
				t.Fatalf("prompt %s ended %s: %s", id, v.State, v.Error)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	elapsed := time.Since(start)
	peak, err := brokertest.PeakRSS(b.PID())
	if err != nil {
		t.Fatal(err)
	}
	end, _ := b.RSS()
	last := c.get(ids[n-1])
	if len(last.Answer) > 300<<10 || !strings.Contains(last.Answer, "left out") {
		t.Errorf("the last answer as GET gives it: %d bytes", len(last.Answer))
	}
	t.Logf("%d prompts of 5 MiB answers in %s: broker RSS %d MiB at the start, %d MiB at its peak, %d MiB at the end",
		n, elapsed.Round(time.Millisecond), startRSS>>20, peak>>20, end>>20)
	if peak > 400<<20 {
		t.Errorf("the broker's RSS peaked at %d MiB", peak>>20)
	}
}
