package faults

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
)

// Fifty threads started at once in one channel are each answered once,
// in full, by an agent of their own, with ✅ on each first message; the
// broker keeps within the platform's limits all along: on Slack, whose
// limits are the workspace's and the channel's (about one message a
// second there), it holds calls back rather than meet a 429, and none
// is answered 429. On every platform.
func TestThreads_FiftyAtOnceAreEachAnsweredOnce(t *testing.T) {
	forEachPlatform(t, func(t *testing.T, platform string) {
		const n = 50
		w, f := newWorldOn(t, platform, setup{conf: settings{"pool.max_sessions": n, "agent.sandbox": "none"}})
		b := w.start()
		start := time.Now()
		threads := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { threads[i] = f.send(pAlice, fmt.Sprintf("stream 3 20ms thread-%d", i)) })
		}
		wg.Wait()
		// Slack's limits make the last answer come about a minute later:
		// fifty first messages in one channel.
		deadline := time.Now().Add(6 * time.Minute)
		pids := map[int]string{}
		for i, thread := range threads {
			var got []answer
			for {
				got = f.answers(thread)
				if len(got) >= 1 || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if len(got) != 1 {
				t.Fatalf("thread %d shows %d answers by %s", i, len(got), time.Since(start).Round(time.Second))
			}
			if !strings.HasPrefix(got[0].text, "chunk 1\nchunk 2\nchunk 3\n-# ✅ done") {
				t.Errorf("thread %d was answered %q", i, got[0].text)
			}
		}
		took := time.Since(start)
		for i, thread := range threads {
			for !slices.Contains(f.botReactions(thread, thread), "✅") {
				if time.Now().After(deadline) {
					t.Fatalf("thread %d shows %v by %s, no ✅", i, f.botReactions(thread, thread), time.Since(start).Round(time.Second))
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		all := time.Since(start)
		for i, thread := range threads[:5] {
			pid := f.agentPID(thread, pAlice)
			if other, ok := pids[pid]; ok || pid == 0 {
				t.Errorf("thread %d has agent %d, as thread %s", i, pid, other)
			}
			pids[pid] = thread
		}
		m := brokertest.MustGet(t, patience, b.Metrics)
		limited := m[`acp_broker_chat_rate_limited_total{platform="`+platform+`"}`]
		throttled := m[`acp_broker_chat_throttled_total{platform="`+platform+`"}`]
		calls := m[`acp_broker_chat_rest_calls_total{platform="`+platform+`"}`]
		t.Logf("%s: %d threads answered in %s, their ✅ shown in %s; %.0f calls, %.0f held back, %.0f answered 429",
			platform, n, took.Round(100*time.Millisecond), all.Round(100*time.Millisecond), calls, throttled, limited)
		if platform == "slack" {
			if limited != 0 || f.rateLimited() != 0 {
				t.Errorf("Slack answered %d calls 429 (%.0f counted): the broker did not keep within its limits", f.rateLimited(), limited)
			}
			if throttled == 0 {
				t.Error("no call was held back: fifty threads in one channel went past none of Slack's limits?")
			}
		}
	})
}
