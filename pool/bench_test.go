package pool_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"syscall"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/internal/eventually"
	"acpbroker/netproxy"
	"acpbroker/pool"

	"github.com/rs/zerolog"
)

// BenchmarkProcess_DeathNoticed measures how long after an agent dies
// (SIGKILL from outside, as the OOM killer would) its Exited channel
// closes: the latency with which a turn learns its agent is gone.
func BenchmarkProcess_DeathNoticed(b *testing.B) {
	var lat []time.Duration
	for range b.N {
		p, err := pool.StartProcess(pool.ProcessSpec{Command: "/bin/sleep", Args: []string{"60"}, Env: []string{"PATH=" + os.Getenv("PATH")}, Logger: zerolog.Nop()})
		if err != nil {
			b.Fatal(err)
		}
		done := make(chan struct{})
		close(done) // nothing reads its stdout
		p.Monitor(done)
		start := time.Now()
		syscall.Kill(p.PID(), syscall.SIGKILL)
		<-p.Exited()
		lat = append(lat, time.Since(start))
		p.Stdout().Close()
		p.Stop(0)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkStart_Network measures what an agent's network costs its
// start, sandboxed: spawn, initialize and session/new of the fake agent
// with the host's network, a namespace of its own, and a namespace
// behind the proxy (the forwarder started before the agent).
func BenchmarkStart_Network(b *testing.B) {
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil {
		b.Skip("bubblewrap is not installed")
	}
	for _, network := range []string{pool.NetworkHost, pool.NetworkNone, pool.NetworkProxy} {
		b.Run(network, func(b *testing.B) {
			proxy := netproxy.New(netproxy.Options{Logger: zerolog.Nop()})
			defer proxy.Close()
			p := pool.New(pool.Config{
				Profiles: map[string]*pool.Profile{"p": {Command: fakeAgent, Env: []string{"PATH=/usr/bin:/bin"}, WorkDir: b.TempDir(), PerThreadDir: true, Network: network}},
				Sandbox:  pool.Sandbox{Bwrap: "bwrap"}, Proxy: proxy, NetDir: b.TempDir(),
				MaxSessions: 1, ExitGrace: 500 * time.Millisecond, Logger: zerolog.Nop(),
			})
			defer p.Close()
			var lat []time.Duration
			for i := range b.N {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				start := time.Now()
				a, err := p.Acquire(ctx, fmt.Sprint("t", i), "", nil)
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
				p.Release(a, true)
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// BenchmarkFirstChunk_Warm measures a new thread's mention to first
// answer (Acquire, then a prompt until its first chunk) with an agent
// that takes 220ms to initialize and 1s to make a session, as
// claude-agent-acp does: started cold for the thread, and taken warm
// (warm = 2; each thread comes once the replacement is ready). Run with
// -benchtime=24x or more for the p99.
func BenchmarkFirstChunk_Warm(b *testing.B) {
	for _, warm := range []int{0, 2} {
		b.Run(fmt.Sprint("warm=", warm), func(b *testing.B) {
			p := pool.New(pool.Config{
				Profiles: map[string]*pool.Profile{"slow": {Command: fakeAgent, Args: []string{"-init-delay", "220ms", "-new-delay", "1s"},
					Env: []string{"PATH=/usr/bin:/bin"}, WorkDir: b.TempDir(), Warm: warm}},
				MaxSessions: 4, ExitGrace: 500 * time.Millisecond, Logger: zerolog.Nop(),
			})
			defer p.Close()
			var lat []time.Duration
			for i := range b.N {
				if !eventually.Wait(30*time.Second, func() bool { return p.Stats().Warm == warm }) {
					b.Fatal("the warm agents were not ready within 30s")
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				start := time.Now()
				a, err := p.Acquire(ctx, fmt.Sprint("t", i), "", nil)
				if err != nil {
					b.Fatal(err)
				}
				sub, err := a.Conn.Subscribe(a.SessionID, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := a.Conn.Prompt(ctx, a.SessionID, []acp.ContentBlock{acp.TextBlock("hello")}); err != nil {
					b.Fatal(err)
				}
				for chunk := false; !chunk; {
					select {
					case u := <-sub.Updates():
						chunk = u.Kind == acp.UpdateMessageChunk
					case <-ctx.Done():
						b.Fatal("no answer within 30s")
					}
				}
				lat = append(lat, time.Since(start))
				sub.Close()
				cancel()
				p.Release(a, true)
			}
			s := p.Stats()
			b.ReportMetric(float64(s.WarmClaims["slow"]), "claims")
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
