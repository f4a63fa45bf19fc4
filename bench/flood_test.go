package bench

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
)

// floodLimit is the most the broker's peak RSS may reach while an agent
// floods it.
const floodLimit = 256 << 20

// BenchmarkFlood measures the broker's peak memory (VmHWM) while an agent
// sends far more than a turn keeps, the broker a real process against
// the fake Discord: 1 GiB of answer in 64 KiB chunks; 64 updates of 1 MiB
// for each of 8 sessions that do not exist, during a turn, and 16 such
// sessions with 128 each; and the same 8 × 64 before the session/new
// answer. Each turn must end with a visible note (for the answer, that
// its middle is left out), and the thread's next prompt must be
// answered. Run with -benchtime 1x.
func BenchmarkFlood(b *testing.B) {
	for _, tc := range []struct {
		name, prompt, note string
		args               []string
	}{
		{"answer=1GiB", "flood-answer 1024 64", "the answer is 1.0 GiB: its start and its end are attached as answer.md.", nil},
		{"unknown=8x64x1MiB", "flood-unknown 64 1024 8", "flooded", nil},
		{"unknown=16x128x1MiB", "flood-unknown 128 1024 16", "flooded", nil},
		{"early=8x64x1MiB", "hello", "You said: hello", []string{"--early-flood", "64:1024:8"}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				flood(b, tc.prompt, tc.note, tc.args)
			}
		})
	}
}

func flood(b *testing.B, prompt, note string, args []string) {
	conf := brokertest.Settings{}
	if args != nil {
		conf["agent.args"] = args
	}
	r := start(b, 2, conf)
	pid := r.broker.PID()
	_, _, base := proc(pid)
	cpu0, _, _ := proc(pid)
	// The peak is read from VmHWM at the end; sampling VmRSS on the way
	// says when it was reached.
	var sampled atomic.Int64
	ctx, stop := context.WithCancel(context.Background())
	sampling := make(chan struct{})
	go func() {
		defer close(sampling)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if rss, err := brokertest.RSS(pid); err == nil && rss > sampled.Load() {
					sampled.Store(rss)
				}
			}
		}
	}()
	b.ResetTimer()
	begin := time.Now()
	thread := r.ask(prompt)
	answers := brokertest.MustGet(b, 10*time.Minute, func(ctx context.Context) ([]brokertest.Answer, error) {
		return r.Discord.AwaitAnswers(ctx, thread, 1)
	})
	took := time.Since(begin)
	b.StopTimer()
	first := answers[0]
	if !strings.HasPrefix(first.Footer, "-# ✅") || !strings.Contains(first.Text, note) {
		b.Fatalf("the flooded turn ended %q; its text does not say %q: …%q", first.Footer, note, first.Text[max(0, len(first.Text)-300):])
	}
	r.Discord.Post(thread, brokertest.Alice, "and now?")
	next := brokertest.MustGet(b, time.Minute, func(ctx context.Context) ([]brokertest.Answer, error) {
		return r.Discord.AwaitAnswers(ctx, thread, 2)
	})
	if !strings.Contains(next[1].Text, "You said: and now?") {
		b.Fatalf("the prompt after the flood got %q", next[1].Text)
	}
	stop()
	<-sampling
	cpu1, _, hwm := proc(pid)
	b.ReportMetric(took.Seconds(), "s-to-answer")
	b.ReportMetric((cpu1 - cpu0).Seconds(), "broker-cpu-s")
	b.ReportMetric(float64(base)/(1<<20), "broker-start-peak-MiB")
	b.ReportMetric(float64(hwm)/(1<<20), "broker-peak-MiB")
	if hwm >= floodLimit {
		b.Errorf("the broker's peak RSS reached %s (sampled %s), over %d MiB", mib(hwm), mib(sampled.Load()), floodLimit>>20)
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
