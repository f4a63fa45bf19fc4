package pool_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"acpbroker/internal/eventually"
	"acpbroker/pool"
)

// lostProc is an agent's process on a fake host that can be lost: lose
// closes HostLost, then kills the process, as a broker's side of an
// agent ends when its host stops answering.
type lostProc struct {
	pool.Proc
	lost chan struct{}
}

func (l *lostProc) HostLost() <-chan struct{} { return l.lost }

func (l *lostProc) lose() {
	close(l.lost)
	l.Proc.Kill()
}

// An idle agent whose host is lost is let go at once, its slot freed,
// and Config.HostLost is told once, with the thread, the host and
// whether its work is shared; a busy one is left to its turn, and no
// one is told.
func TestHostLost_AnIdleAgentsLossIsToldAtOnceAndABusyOnesIsNot(t *testing.T) {
	fh := newFakeHost(t)
	var mu sync.Mutex
	var told []pool.HostLoss
	procs := map[string]*lostProc{}
	start := func(ctx context.Context, thread string, prof *pool.Profile, onWait func()) (pool.Remote, error) {
		r, err := fh.start(ctx, thread, prof, onWait)
		if err == nil {
			lp := &lostProc{Proc: r.Proc, lost: make(chan struct{})}
			mu.Lock()
			procs[thread] = lp
			mu.Unlock()
			r.Proc, r.Shared = lp, thread == "idle"
		}
		return r, err
	}
	p := newPool(t, pool.Config{Remote: start, HostLost: func(l pool.HostLoss) {
		mu.Lock()
		told = append(told, l)
		mu.Unlock()
	}})
	idle := acquire(t, p, "idle")
	p.Release(idle, false)
	busy := acquire(t, p, "busy")

	procs["idle"].lose()
	eventually.Within(t, 10*time.Second, "the idle agent let go", func() bool { return p.Lookup("idle") == nil && p.Stats().Live == 1 })
	procs["busy"].lose()
	<-busy.Proc.Exited()
	if p.Lookup("busy") != busy {
		t.Errorf("the busy agent was let go under its turn")
	}
	p.Release(busy, false) // as its turn ends
	if p.Lookup("busy") != nil || p.Stats().Live != 0 {
		t.Errorf("the busy agent whose host was lost is still the thread's after its turn")
	}
	mu.Lock()
	defer mu.Unlock()
	if want := (pool.HostLoss{Thread: "idle", Host: "host-1", Shared: true}); len(told) != 1 || told[0] != want {
		t.Errorf("HostLost was told %+v, want once %+v", told, want)
	}
}
