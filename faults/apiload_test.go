package faults

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

// Two hundred prompts posted through the API at once, each opening a
// thread of its own with an agent of its own (pool.max_sessions = 32:
// the rest wait for a slot), all through the real broker and the fake
// Discord: every one is accepted, and every one ends with exactly one
// outcome (one end event, and GET says done), and the chat shows each
// thread's answer. The figures go to BENCHMARKS.md.
func TestAPI_TwoHundredPromptsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test")
	}
	const n = 200
	w, b := apiWorld(t, settings{"pool.max_sessions": 32, "api.rate_limit": 10000, "api.max_streams": n})
	c := b.client(ciToken)
	c.http = &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	start := time.Now()
	ids := make([]string, n)
	threads := make([]string, n)
	accepted := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var s started
			if code, raw := c.do("POST", "/v1/prompts", map[string]any{"channel": w.Channel, "text": "stream 3 10ms"}, &s); code != http.StatusAccepted {
				t.Errorf("prompt %d: %d %s", i, code, raw)
				return
			}
			ids[i], threads[i], accepted[i] = s.ID, s.Thread, time.Since(start)
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	allAccepted := time.Since(start)
	ends := make([]int, n)
	endedAt := make([]time.Duration, n)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for i := range n {
		wg.Go(func() {
			evs, err := c.stream(ctx, ids[i], "", nil)
			if err != nil {
				t.Errorf("prompt %d's events: %v", i, err)
				return
			}
			endedAt[i] = time.Since(start)
			for _, e := range evs {
				if e.Type == "end" {
					ends[i]++
				}
			}
		})
	}
	wg.Wait()
	allEnded := time.Since(start)
	for i := range n {
		if ends[i] != 1 {
			t.Errorf("prompt %d had %d end events", i, ends[i])
		}
		if v := c.get(ids[i]); v.State != "done" {
			t.Errorf("prompt %d ended %s: %s", i, v.State, v.Error)
		}
	}
	for i := range n {
		w.awaitAnswers(threads[i], 1)
	}
	slices.Sort(accepted)
	slices.Sort(endedAt)
	rss, _ := b.RSS()
	t.Logf("%d prompts: all accepted in %s (p50 %s, p99 %s), all ended in %s (p50 %s); broker RSS %d MiB",
		n, allAccepted.Round(time.Millisecond), accepted[n/2].Round(time.Millisecond), accepted[n*99/100].Round(time.Millisecond),
		allEnded.Round(time.Millisecond), endedAt[n/2].Round(time.Millisecond), rss>>20)
	b.awaitMetric(`acp_broker_turns_total{outcome="done"}`, func(v float64) bool { return v == n })
}
