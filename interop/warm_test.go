package interop

import (
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"acpbroker/adapter"
	"acpbroker/internal/brokertest"
	"acpbroker/pool"
)

// warmThreads is how many new threads each broker of
// TestFigures_ClaudeWarmFirstChunk answers.
const warmThreads = 10

// TestFigures_ClaudeWarmFirstChunk: claude-agent-acp, which takes a
// second or more to start, behind two brokers side by side whose
// profile shares one directory (per_thread_dir = false): one starts an
// agent for each new thread (cold), the other keeps one agent warm
// (warm = 1). New threads come one after another, each once the warm
// broker has its warm agent ready again; every thread is answered with
// the model's text, every thread of the warm broker took a warm agent
// and none of the cold one's did. It logs the mention to the first
// chunk shown in the thread, p50 and slowest of each, for
// BENCHMARKS.md; it does not fail on them. It takes minutes, so it runs
// with INTEROP_FIGURES=1 (make bench) only.
func TestFigures_ClaudeWarmFirstChunk(t *testing.T) {
	if os.Getenv("INTEROP_FIGURES") == "" {
		t.Skip("a measurement for BENCHMARKS.md: run with INTEROP_FIGURES=1")
	}
	// Room for every thread's agent and the warm one: a warm agent gives
	// way to the threads' and is not started when no slot is free.
	shared := brokertest.Settings{"agent.per_thread_dir": false, "pool.max_sessions": warmThreads + 2}
	coldS, warmS := claude(t), claude(t)
	cold := newDiscordBroker(t, coldS, adapter.Config{}, shared)
	warm := newDiscordBroker(t, warmS, adapter.Config{}, shared, brokertest.Settings{"agent.warm": 1})
	var coldT, warmT []time.Duration
	for i := range warmThreads {
		warm.await(t, "a warm agent ready", func() bool { return warm.broker.Pool().Stats().Warm == 1 })
		warmT = append(warmT, firstChunk(t, warm, i))
		coldT = append(coldT, firstChunk(t, cold, i))
	}
	name := pool.DefaultProfileName
	if got := warm.broker.Pool().Stats().WarmClaims[name]; got != warmThreads {
		t.Errorf("the warm broker's threads took %d warm agents, want %d", got, warmThreads)
	}
	if got := cold.broker.Pool().Stats().WarmClaims[name]; got != 0 {
		t.Errorf("the cold broker's threads took %d warm agents, want none", got)
	}
	if got := cold.broker.Pool().Stats().ColdStarts[name]; got < warmThreads {
		t.Errorf("the cold broker started %d agents for its threads, want %d", got, warmThreads)
	}
	p50 := func(d []time.Duration) time.Duration {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[len(s)/2]
	}
	slowest := func(d []time.Duration) time.Duration {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[len(s)-1]
	}
	t.Logf("claude-agent-acp, mention to first chunk shown, %d threads each: cold p50 %v (slowest %v), warm p50 %v (slowest %v)",
		warmThreads, p50(coldT).Round(time.Millisecond), slowest(coldT).Round(time.Millisecond),
		p50(warmT).Round(time.Millisecond), slowest(warmT).Round(time.Millisecond))
}

// firstChunk mentions the bot in a new thread, with the model scripted
// to answer, waits for the turn's end, and returns how long after the
// mention the model's first words were shown in the thread.
func firstChunk(t *testing.T, b *discordBroker, i int) time.Duration {
	t.Helper()
	const first = "Warm or"
	b.s.text(first, " cold, answer ", strings.Repeat("x", i+1), ".")
	thread, sent := b.mention(t, "Say something.")
	st := awaitEnd(t, b, thread, "")
	if !strings.HasPrefix(st.footer, "-# ✅ done in ") || !strings.HasSuffix(st.body, "answer "+strings.Repeat("x", i+1)+".") {
		t.Fatalf("thread %d was answered %q", i, st.body+"\n"+st.footer)
	}
	var shown time.Time
	for _, id := range st.answer {
		for _, r := range b.revisions(thread, id) {
			if strings.Contains(r.text, first) && (shown.IsZero() || r.at.Before(shown)) {
				shown = r.at
			}
		}
	}
	if shown.IsZero() {
		t.Fatalf("thread %d never showed %q", i, first)
	}
	return shown.Sub(sent)
}
