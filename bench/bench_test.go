package bench

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
)

// stamps reads the send times the fake agent's "stamp" script wrote.
func stamps(content string) []time.Time {
	var out []time.Time
	for _, line := range strings.Split(content, "\n") {
		if ns, ok := strings.CutPrefix(line, "t="); ok {
			if n, err := strconv.ParseInt(ns, 10, 64); err == nil {
				out = append(out, time.Unix(0, n))
			}
		}
	}
	return out
}

// BenchmarkTurnOverhead measures what the broker adds to a turn, with a
// fast fake agent and the fake Discord, the broker a real process: from
// the agent writing its first chunk to the first message call reaching
// Discord, and from the agent's last chunk (written just before it
// answers end_turn) to the edit that shows the finished answer. One op is
// one turn in its own thread; b.N turns run one after another.
func BenchmarkTurnOverhead(b *testing.B) {
	r := start(b, 4, nil)
	var first, final []time.Duration
	b.ResetTimer()
	for range b.N {
		thread := r.ask("stamp 3 20ms")
		r.Srv.Await("finished", func() bool { return r.finished(thread) })
		a, _ := r.lastAnswer(thread)
		revs := r.Srv.Revisions(thread, a.Msgs[len(a.Msgs)-1].ID)
		sent := stamps(revs[len(revs)-1].Content)
		if len(sent) != 3 {
			b.Fatalf("answer %q", revs[len(revs)-1].Content)
		}
		// The first revision with the agent's text (an earlier one may say
		// the turn waits for an agent slot), and the first that ends it.
		for _, rev := range revs {
			if len(stamps(rev.Content)) > 0 {
				first = append(first, rev.At.Sub(sent[0]))
				break
			}
		}
		for _, rev := range revs {
			if strings.Contains(rev.Content, "-# ✅") {
				final = append(final, rev.At.Sub(sent[2]))
				break
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(ms(percentile(first, 50)), "first-p50-ms")
	b.ReportMetric(ms(percentile(first, 99)), "first-p99-ms")
	b.ReportMetric(ms(percentile(final, 50)), "final-p50-ms")
	b.ReportMetric(ms(percentile(final, 99)), "final-p99-ms")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkScale runs N conversations at once, each with its own agent
// process, in one channel, against the fake Discord with Discord's rate
// limits: every answer must arrive. It reports the time until the last
// one did, the broker's CPU time and peak memory, its memory per idle
// conversation afterwards, the Discord calls per turn, and the most
// message calls any thread saw in 5 seconds (Discord allows 5). Run with
// -benchtime 1x.
func BenchmarkScale(b *testing.B) {
	for _, n := range []int{10, 50, 100, 500} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			for range b.N {
				scale(b, n)
			}
		})
	}
}

func scale(b *testing.B, n int) {
	r := start(b, n, brokertest.Settings{"turn.queue_size": 8})
	pid := r.broker.PID()
	time.Sleep(time.Second) // let the broker settle after connecting
	cpu0, rss0, _ := proc(pid)
	requests0 := len(r.Srv.Requests())
	b.ResetTimer()
	threads, took := r.askAll(n, "stream 5 50ms")
	b.StopTimer()
	cpu1, _, hwm := proc(pid)
	time.Sleep(2 * time.Second) // the agents are idle now; so is the broker
	_, rssIdle, _ := proc(pid)
	worst := 0
	for _, th := range threads {
		worst = max(worst, maxIn5s(r.messageCalls(th)))
	}
	calls := len(r.Srv.Requests()) - requests0
	b.ReportMetric(took.Seconds(), "s-all-answered")
	b.ReportMetric((cpu1 - cpu0).Seconds(), "broker-cpu-s")
	b.ReportMetric(float64(hwm)/(1<<20), "broker-peak-MiB")
	b.ReportMetric(float64(rssIdle-rss0)/float64(n)/1024, "KiB/idle-thread")
	b.ReportMetric(float64(calls)/float64(n), "discord-calls/turn")
	b.ReportMetric(float64(worst), "max-calls/thread/5s")
	if worst > 5 {
		b.Errorf("a thread saw %d message calls within 5s; Discord allows 5", worst)
	}
}

// BenchmarkRecovery measures how fast a thread recovers from a broken
// agent, through the real broker and the fake Discord: an agent that dies
// (from its last chunk to the message that says it exited), and an agent
// that hangs and ignores cancel (from the prompt to the failure, against
// the 2s ceiling plus the 1s cancel grace).
func BenchmarkRecovery(b *testing.B) {
	r := start(b, 4, brokertest.Settings{"turn.timeout": "2s", "turn.cancel_grace": "1s"})
	var dead, hung []time.Duration
	b.ResetTimer()
	for range b.N {
		thread := r.ask("die 3")
		r.Srv.Await("told", func() bool { return r.ended(thread, "agent exited with status 3") })
		a, _ := r.lastAnswer(thread)
		revs := r.Srv.Revisions(thread, a.Msgs[len(a.Msgs)-1].ID)
		sent := stamps(revs[0].Content)
		for _, rev := range revs {
			if strings.Contains(rev.Content, "agent exited") && len(sent) > 0 {
				dead = append(dead, rev.At.Sub(sent[0]))
				break
			}
		}
		begin := time.Now()
		thread = r.ask("ignore-cancel")
		r.Srv.Await("timed out", func() bool { return r.ended(thread, "timed out after 2s") })
		hung = append(hung, time.Since(begin))
	}
	b.StopTimer()
	b.ReportMetric(ms(percentile(dead, 50)), "death-told-p50-ms")
	b.ReportMetric(ms(percentile(dead, 99)), "death-told-p99-ms")
	b.ReportMetric(ms(percentile(hung, 50)), "hung-recovered-p50-ms")
	b.ReportMetric(ms(percentile(hung, 99)), "hung-recovered-p99-ms")
}
