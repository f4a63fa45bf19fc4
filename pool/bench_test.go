package pool_test

import (
	"os"
	"sort"
	"syscall"
	"testing"
	"time"

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
