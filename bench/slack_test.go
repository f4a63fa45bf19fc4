package bench

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakeslack"
)

// slackRig is the broker as a process, serving Slack against a fake
// Slack over Socket Mode, with Slack's rate limits.
type slackRig struct {
	*brokertest.World
	sl     *brokertest.Slack
	broker *brokertest.Broker
}

// startSlack runs the broker on Slack alone with maxSessions agent slots
// and the settings conf, logging warnings only and serving no HTTP, and
// waits until it is connected.
func startSlack(tb testing.TB, maxSessions int, conf brokertest.Settings) *slackRig {
	tb.Helper()
	w := brokertest.NewWorld(tb, bins, brokertest.Options{
		Slack: &fakeslack.Options{WaitTimeout: 10 * time.Minute},
		Conf:  brokertest.Settings{"chat.platform": "slack", "log.level": "warn", "http.listen": "", "pool.max_sessions": maxSessions}.With(conf),
	})
	b := brokertest.MustGet(tb, time.Minute, w.Start)
	tb.Cleanup(func() {
		if _, err := b.Stop(60 * time.Second); err != nil {
			tb.Error(err)
		}
	})
	return &slackRig{World: w, sl: w.Slack, broker: b}
}

// askIn mentions the app with text in channel and returns the message's
// ts (the thread's), without waiting.
func (r *slackRig) askIn(channel, text string) string {
	return r.sl.Srv.PostMessage(channel, r.sl.Alice.ID, r.sl.Srv.Bot().Mention()+" "+text)
}

// answer is the thread's finished answer, if it shows one.
func (r *slackRig) answer(channel, thread string) (fakeslack.Message, bool) {
	for _, m := range r.sl.Srv.Thread(channel, thread) {
		if m.FromBot() && m.TS != thread && strings.Contains(r.sl.Text(m), "-# ✅") {
			return m, true
		}
	}
	return fakeslack.Message{}, false
}

// slackPace keeps the turns of BenchmarkSlackTurnOverhead within
// chat.update's 50 a minute in a workspace, so that what is measured is
// the broker's own time and not Slack's limit (which
// BenchmarkSlackScale meets).
const slackPace = 1400 * time.Millisecond

// BenchmarkSlackTurnOverhead is BenchmarkTurnOverhead on Slack: from the
// agent writing its first chunk to the first Slack call that shows it
// (chat.postMessage in the thread), and from the agent's last chunk to
// the call showing the finished answer (chat.update). Each turn is in a
// channel of its own (Slack limits posts per channel, about one a
// second) and turns start at most one per 1.4 s (chat.update's 50 a
// minute are the workspace's); the broker is a real process and so is
// the fake agent.
func BenchmarkSlackTurnOverhead(b *testing.B) {
	r := startSlack(b, 4, brokertest.Settings{"slack.allow_all_channels": true})
	var first, final []time.Duration
	next := time.Now()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		channel := r.sl.Srv.AddChannel(fakeslack.Channel{Name: fmt.Sprintf("bench-%d", i)}).ID
		time.Sleep(time.Until(next))
		next = time.Now().Add(slackPace)
		b.StartTimer()
		thread := r.askIn(channel, "stamp 3 20ms")
		var m fakeslack.Message
		r.sl.Srv.Await("finished", func() bool {
			var ok bool
			m, ok = r.answer(channel, thread)
			return ok
		})
		revs := r.sl.Srv.Revisions(channel, m.TS)
		sent := stamps(brokertest.SlackText(revs[len(revs)-1].Blocks, revs[len(revs)-1].Text))
		if len(sent) != 3 {
			b.Fatalf("answer %q", r.sl.Text(m))
		}
		for _, rev := range revs {
			if len(stamps(brokertest.SlackText(rev.Blocks, rev.Text))) > 0 {
				first = append(first, rev.At.Sub(sent[0]))
				break
			}
		}
		for _, rev := range revs {
			if strings.Contains(brokertest.SlackText(rev.Blocks, rev.Text), "-# ✅") {
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
	if n := len(r.sl.Srv.RateLimited()); n > 0 {
		b.Errorf("%d calls answered 429", n)
	}
}

// BenchmarkSlackScale is BenchmarkScale on Slack: N conversations at
// once in one channel, each with its own agent process, against the
// fake Slack with Slack's rate limits (chat.postMessage about one a
// second in a channel, chat.update and reactions a workspace's 50 a
// minute, reactions.remove 20). It reports the time until the last
// answer arrived, until the last ✅ showed, the broker's CPU time and
// peak memory, the Slack calls per turn, and the calls Slack answered
// 429 (none: the broker holds them back first). Run with -benchtime 1x.
func BenchmarkSlackScale(b *testing.B) {
	for _, n := range []int{10, 50} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			for range b.N {
				slackScale(b, n)
			}
		})
	}
}

func slackScale(b *testing.B, n int) {
	r := startSlack(b, n, brokertest.Settings{"turn.queue_size": 8})
	pid := r.broker.PID()
	time.Sleep(time.Second)
	cpu0, _, _ := proc(pid)
	calls0 := len(r.sl.Srv.Calls())
	b.ResetTimer()
	begin := time.Now()
	threads := make([]string, n)
	for i := range threads {
		threads[i] = r.askIn(r.sl.Channel, "stream 5 50ms")
	}
	r.sl.Srv.Await(fmt.Sprintf("%d answers", n), func() bool {
		for _, th := range threads {
			if _, ok := r.answer(r.sl.Channel, th); !ok {
				return false
			}
		}
		return true
	})
	took := time.Since(begin)
	r.sl.Srv.Await(fmt.Sprintf("%d ✅", n), func() bool {
		for _, th := range threads {
			if !slices.Contains(r.sl.BotReactions(r.sl.Channel, th), brokertest.Done) {
				return false
			}
		}
		return true
	})
	marked := time.Since(begin)
	b.StopTimer()
	cpu1, _, hwm := proc(pid)
	calls := len(r.sl.Srv.Calls()) - calls0
	limited := len(r.sl.Srv.RateLimited())
	b.ReportMetric(took.Seconds(), "s-all-answered")
	b.ReportMetric(marked.Seconds(), "s-all-marked")
	b.ReportMetric((cpu1 - cpu0).Seconds(), "broker-cpu-s")
	b.ReportMetric(float64(hwm)/(1<<20), "broker-peak-MiB")
	b.ReportMetric(float64(calls)/float64(n), "slack-calls/turn")
	b.ReportMetric(float64(limited), "calls-429")
	if limited > 0 {
		b.Errorf("Slack answered %d calls 429: the broker went past its limits", limited)
	}
}
