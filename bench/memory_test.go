package bench

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/pool"

	"github.com/rs/zerolog"
)

// waitSink waits for a turn's outcome.
type waitSink struct{ done chan adapter.Outcome }

func (s waitSink) Status(adapter.Status) {}
func (s waitSink) Update(acp.Update)     {}
func (s waitSink) Ask(ctx context.Context, _ *acp.PermissionRequest) adapter.Answer {
	return adapter.Answer{}
}
func (s waitSink) Notice(adapter.Notice)  {}
func (s waitSink) Done(o adapter.Outcome) { s.done <- o }

// retained is the memory the process holds after a collection: heap in use
// and goroutine stacks.
func retained() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// BenchmarkIdleThreadMemory measures what the broker keeps for each idle
// conversation: its agent process's connection, session and bookkeeping,
// after one turn, with the agent waiting for the next message. Agents'
// own memory is theirs, not the broker's.
func BenchmarkIdleThreadMemory(b *testing.B) {
	for _, n := range []int{100, 500} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			for range b.N {
				idleMemory(b, n)
			}
		})
	}
}

func idleMemory(b *testing.B, n int) {
	log := zerolog.Nop()
	p := pool.New(pool.Config{Command: bins.Agent, WorkDir: b.TempDir(), PerThreadDir: true, MaxSessions: n, Logger: log})
	defer p.Close()
	e := adapter.New(p, adapter.Config{Logger: log})
	defer e.Close()
	base := retained()
	sinks := make([]waitSink, n)
	for i := range sinks {
		sinks[i] = waitSink{done: make(chan adapter.Outcome, 1)}
		if err := e.Submit(fmt.Sprintf("thread-%d", i), &adapter.Prompt{Blocks: []acp.ContentBlock{acp.TextBlock("hello")}, Sink: sinks[i]}); err != nil {
			b.Fatal(err)
		}
	}
	for i, s := range sinks {
		select {
		case o := <-s.done:
			if o.Err != nil {
				b.Fatalf("thread %d: %v", i, o.Err)
			}
		case <-time.After(2 * time.Minute):
			b.Fatalf("thread %d not answered", i)
		}
	}
	if live := p.Stats().Live; live != n {
		b.Fatalf("%d agents live, want %d", live, n)
	}
	per := float64(retained()-base) / float64(n) / 1024
	b.ReportMetric(per, "KiB/idle-thread")
	b.ReportMetric(float64(runtime.NumGoroutine())/float64(n), "goroutines/idle-thread")
}
