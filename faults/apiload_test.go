package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// loadStall is how long a load test waits with nothing going on.
const loadStall = 2 * time.Minute

// Two hundred prompts posted through the API together (8 clients a core
// posting at once), each opening a thread of its own with an agent of
// its own (pool.max_sessions = 32: the rest wait for a slot), all
// through the real broker and the fake Discord: every one is accepted,
// and every one ends with exactly one outcome (one end event, and GET
// says done), and the chat shows each thread's answer. The figures go
// to BENCHMARKS.md.
//
// However busy the machine, the test waits as long as the broker goes
// on: it fails once no prompt has been accepted, nor any ended, for
// loadStall.
func TestAPI_TwoHundredPromptsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test")
	}
	const n = 200
	w, b := apiWorld(t, settings{"pool.max_sessions": 32, "api.rate_limit": 10000, "api.max_streams": n})
	c := b.client(ciToken)
	httpc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	ctx, stalled := context.WithCancelCause(context.Background())
	defer stalled(nil)
	watch := time.AfterFunc(loadStall, func() {
		stalled(fmt.Errorf("no prompt accepted or ended for %s", loadStall))
	})
	defer watch.Stop()
	start := time.Now()
	ids := make([]string, n)
	threads := make([]string, n)
	accepted := make([]time.Duration, n)
	// Posted by 8 clients a core at once: the broker posts a channel's
	// messages one after another, each call given 15 s with its wait for
	// the channel included, and all 200 at once on a busy machine wait
	// longer than that.
	var wg sync.WaitGroup
	posters := make(chan struct{}, 8*runtime.NumCPU())
	for i := range n {
		posters <- struct{}{}
		wg.Go(func() {
			defer func() { <-posters }()
			body, _ := json.Marshal(map[string]any{"channel": w.Channel, "text": "stream 3 10ms"})
			req, _ := http.NewRequestWithContext(ctx, "POST", c.base+"/v1/prompts", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+c.token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := httpc.Do(req)
			if err != nil {
				t.Errorf("prompt %d: %v (%v)", i, err, context.Cause(ctx))
				return
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			var s started
			if json.Unmarshal(raw, &s); resp.StatusCode != http.StatusAccepted {
				t.Errorf("prompt %d: %d %s", i, resp.StatusCode, raw)
				return
			}
			watch.Reset(loadStall)
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
	for i := range n {
		wg.Go(func() {
			evs, err := c.stream(ctx, ids[i], "", nil)
			if err != nil {
				t.Errorf("prompt %d's events: %v (%v)", i, err, context.Cause(ctx))
				return
			}
			watch.Reset(loadStall)
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
