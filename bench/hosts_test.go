package bench

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
)

// The cluster's credentials in these benchmarks.
const (
	clusterUser     = "acp"
	clusterPassword = "bench-cluster-password"
)

// clustered starts a broker as start does, serving the cluster's NATS
// itself (cluster.embedded) on a free loopback port with a password, so
// that every agent runs on an agent host. It returns the NATS URL.
func clustered(tb testing.TB, maxSessions int, conf brokertest.Settings) (*rig, string) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	r := start(tb, maxSessions, brokertest.Settings{
		"cluster.embedded": true,
		"cluster.listen":   addr,
		"cluster.user":     clusterUser,
		"cluster.password": clusterPassword,
	}.With(conf))
	return r, "nats://" + addr
}

// host starts agent host name (the broker binary's `broker host`) on
// the cluster at url, with the rig's agent settings and conf over them.
func (r *rig) host(tb testing.TB, name, url string, conf brokertest.Settings) *brokertest.Broker {
	tb.Helper()
	return brokertest.MustGet(tb, time.Minute, func(ctx context.Context) (*brokertest.Broker, error) {
		return r.StartHost(ctx, name, brokertest.Settings{
			"log.level":        "info", // its readiness is a line at info
			"cluster.url":      url,
			"cluster.user":     clusterUser,
			"cluster.password": clusterPassword,
		}.With(conf))
	})
}

// turnTimes runs one "stamp 3 20ms" turn in a thread of its own and
// returns the agent's first chunk to the first message call showing it,
// and the mention to the edit that shows the finished answer.
func (r *rig) turnTimes(tb testing.TB) (first, whole time.Duration) {
	begin := time.Now()
	thread := r.ask("stamp 3 20ms")
	r.Srv.Await("finished", func() bool { return r.finished(thread) })
	a, _ := r.lastAnswer(thread)
	revs := r.Srv.Revisions(thread, a.Msgs[len(a.Msgs)-1].ID)
	sent := stamps(revs[len(revs)-1].Content)
	if len(sent) != 3 {
		tb.Fatalf("answer %q", revs[len(revs)-1].Content)
	}
	for _, rev := range revs {
		if first == 0 && len(stamps(rev.Content)) > 0 {
			first = rev.At.Sub(sent[0])
		}
		if strings.Contains(rev.Content, "-# ✅") {
			whole = rev.At.Sub(begin)
			break
		}
	}
	return first, whole
}

// BenchmarkHostTurnOverhead measures what running the agent on an agent
// host adds to a turn: the same "stamp 3 20ms" prompt, each in a thread
// of its own, alternately to a broker that runs its agents itself and to
// one whose agents run on an agent host over NATS on loopback (both
// brokers and the host real processes, side by side). For each it
// reports the agent's first chunk to the first message call showing it
// on Discord, and the mention to the edit that shows the finished
// answer (the agent's start included), p50 and p99, and how many turns
// took over a second. With 4 agent slots each, from the fifth turn on
// each new thread's agent takes the slot of an idle one, stopped for it;
// with room, every thread's agent stays. One op is one turn on each.
func BenchmarkHostTurnOverhead(b *testing.B) {
	b.Run("slots=4", func(b *testing.B) { hostTurnOverhead(b, 4) })
	b.Run("slots=room", func(b *testing.B) { hostTurnOverhead(b, b.N+4) })
}

func hostTurnOverhead(b *testing.B, slots int) {
	local := start(b, slots, nil)
	remote, url := clustered(b, slots, nil)
	remote.host(b, "a", url, brokertest.Settings{"host.capacity": slots})
	var firstL, firstR, wholeL, wholeR []time.Duration
	b.ResetTimer()
	for range b.N {
		f, w := local.turnTimes(b)
		firstL, wholeL = append(firstL, f), append(wholeL, w)
		f, w = remote.turnTimes(b)
		firstR, wholeR = append(firstR, f), append(wholeR, w)
	}
	b.StopTimer()
	b.ReportMetric(ms(percentile(firstL, 50)), "local-first-p50-ms")
	b.ReportMetric(ms(percentile(firstL, 99)), "local-first-p99-ms")
	b.ReportMetric(ms(percentile(firstR, 50)), "host-first-p50-ms")
	b.ReportMetric(ms(percentile(firstR, 99)), "host-first-p99-ms")
	b.ReportMetric(ms(percentile(wholeL, 50)), "local-turn-p50-ms")
	b.ReportMetric(ms(percentile(wholeL, 99)), "local-turn-p99-ms")
	b.ReportMetric(ms(percentile(wholeR, 50)), "host-turn-p50-ms")
	b.ReportMetric(ms(percentile(wholeR, 99)), "host-turn-p99-ms")
	b.ReportMetric(float64(over(wholeL, time.Second)), "local-turns-over-1s")
	b.ReportMetric(float64(over(wholeR, time.Second)), "host-turns-over-1s")
}

// over counts the durations longer than limit.
func over(ds []time.Duration, limit time.Duration) int {
	n := 0
	for _, d := range ds {
		if d > limit {
			n++
		}
	}
	return n
}

// BenchmarkHostScale starts 500 conversations at once against a broker
// whose agents run on three agent hosts (each may run 200), every agent
// streaming 5 chunks 50 ms apart: every answer must arrive. It reports
// the time until the last did, the broker's and each host's CPU time
// and peak RSS, and how many threads each host ran. Run with -benchtime 1x.
func BenchmarkHostScale(b *testing.B) {
	const n = 500
	names := []string{"a", "b", "c"}
	for range b.N {
		r, url := clustered(b, n, brokertest.Settings{"turn.queue_size": 8})
		hosts := map[string]*brokertest.Broker{}
		for _, name := range names {
			hosts[name] = r.host(b, name, url, brokertest.Settings{"host.capacity": 200})
		}
		time.Sleep(time.Second) // let the broker and hosts settle
		cpu0, _, _ := proc(r.broker.PID())
		hostCPU0 := map[string]time.Duration{}
		for name, h := range hosts {
			hostCPU0[name], _, _ = proc(h.PID())
		}
		b.ResetTimer()
		_, took := r.askAll(n, "stream 5 50ms")
		b.StopTimer()
		cpu1, _, hwm := proc(r.broker.PID())
		b.ReportMetric(took.Seconds(), "s-all-answered")
		b.ReportMetric((cpu1 - cpu0).Seconds(), "broker-cpu-s")
		b.ReportMetric(float64(hwm)/(1<<20), "broker-peak-MiB")
		total := 0.0
		for _, name := range names {
			h := hosts[name]
			hcpu, _, hhwm := proc(h.PID())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			m, err := h.Metrics(ctx)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			agents := m["acp_broker_agents_live"]
			total += agents
			b.ReportMetric(float64(hhwm)/(1<<20), "host-"+name+"-peak-MiB")
			b.ReportMetric((hcpu - hostCPU0[name]).Seconds(), "host-"+name+"-cpu-s")
			b.ReportMetric(agents, "host-"+name+"-threads")
		}
		if total != n {
			b.Errorf("the hosts run %v agents, want one for each of the %d threads", total, n)
		}
	}
}

// BenchmarkHostLoss measures how long a thread takes to be told, in
// words, that its agent host was lost: a host killed with SIGKILL while
// the thread's agent is mid-turn, at the default cluster.host_timeout.
// One op is one kill, of a host started for it.
func BenchmarkHostLoss(b *testing.B) {
	r, url := clustered(b, 4, nil)
	var told []time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		h := r.host(b, fmt.Sprintf("h%d", i), url, nil)
		thread := r.ask("hang")
		r.Srv.Await("working", func() bool { return r.shows(thread, "working…") })
		b.StartTimer()
		killed := time.Now()
		h.Kill()
		r.Srv.Await("told", func() bool { return r.shows(thread, "stopped answering") })
		told = append(told, time.Since(killed))
	}
	b.StopTimer()
	sort.Slice(told, func(i, j int) bool { return told[i] < told[j] })
	b.ReportMetric(ms(told[0]), "told-min-ms")
	b.ReportMetric(ms(percentile(told, 50)), "told-p50-ms")
	b.ReportMetric(ms(told[len(told)-1]), "told-max-ms")
}

// shows reports whether one of the bot's messages in thread contains
// text.
func (r *rig) shows(thread, text string) bool {
	for _, m := range r.Discord.BotMessages(thread) {
		if strings.Contains(m.Content, text) {
			return true
		}
	}
	return false
}
