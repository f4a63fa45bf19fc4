package adapter

import (
	"runtime"
	"testing"
	"time"

	"acpbroker/internal/agenttest"
	"acpbroker/pool"

	"github.com/rs/zerolog"
)

// Ten thousand abandoned turns (half with a permission request open) leave
// nothing behind: no pending requests or permissions, no subscribers, the
// goroutine count and the heap back where they started.
func TestLeak_TenThousandAbandonedTurns(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)
	p := pool.New(pool.Config{Launch: agenttest.InProcess(agenttest.InProcessOptions{}), Command: "fakeagent",
		WorkDir: t.TempDir(), MaxSessions: 2, Logger: log})
	defer p.Close()
	e := New(p, Config{Logger: log, CancelGrace: 5 * time.Second})
	defer e.Close()
	r := &rig{t: t, pool: p, engine: e}

	abandon := func(i int) {
		text := "hang"
		if i%2 == 1 {
			text = "permission"
		}
		rec := r.prompt("t", text)
		if i%2 == 1 {
			<-rec.asked
		} else {
			rec.waitWorking(t)
		}
		e.Cancel("t", CancelledBy("tester"))
		if o := rec.wait(t, 10*time.Second); o.Err == nil && o.StopReason != "cancelled" {
			t.Fatalf("turn %d: outcome %+v", i, o)
		}
	}
	measure := func() (int, uint64) {
		waitThreads(t, e, 0)
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return runtime.NumGoroutine(), m.HeapAlloc
	}
	for i := range 100 { // warm up: the agent, its session, the caches
		abandon(i)
	}
	g0, h0 := measure()
	start := time.Now()
	for i := range 10000 {
		abandon(i)
	}
	took := time.Since(start)
	g1, h1 := measure()
	s := e.Stats()
	if c := s.Pool.Conn; c.PendingRequests != 0 || c.PendingPermissions != 0 || c.Subscribers != 0 {
		t.Fatalf("bookkeeping left after 10,000 abandoned turns: %+v", c)
	}
	if s.Pool.Live != 1 || s.Pool.Spawned != 1 {
		t.Fatalf("pool = %+v, want the one honest agent reused", s.Pool)
	}
	if g1 > g0+2 {
		t.Fatalf("goroutines grew from %d to %d", g0, g1)
	}
	if h1 > h0+4<<20 {
		t.Fatalf("heap grew from %d to %d bytes", h0, h1)
	}
	t.Logf("10,000 abandoned turns in %s: goroutines %d -> %d, heap %.1f MiB -> %.1f MiB", took.Round(time.Millisecond), g0, g1, float64(h0)/(1<<20), float64(h1)/(1<<20))
}
