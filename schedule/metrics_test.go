package schedule

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"acpbroker/config"
	"acpbroker/internal/metricstest"

	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
)

// A schedule at @every 2s whose runs take 3s has, at 6.5s, one run done,
// one skipped and one going on: each counted once, under its outcome;
// once its runs end, none is going on.
func TestMetrics_RunsCountedOnceByOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, r := newMemStore(), &runner{took: 3 * time.Second}
		s := New(r, st, zerolog.Nop())
		ctx, cancel := context.WithCancel(context.Background())
		s.Start(ctx, []config.Schedule{every(t, "often", "@every 2s", "look")})
		time.Sleep(6*time.Second + 500*time.Millisecond)
		synctest.Wait()
		got := metricstest.Scrape(t, s)
		metricstest.Expect(t, got, dto.MetricType_COUNTER, map[string]float64{`acp_broker_schedule_runs_total{outcome="done"}`: 1, `acp_broker_schedule_runs_total{outcome="skipped"}`: 1})
		metricstest.Expect(t, got, dto.MetricType_GAUGE, map[string]float64{"acp_broker_schedule_runs_running": 1})
		cancel()
		r.wg.Wait()
		s.Wait()
		synctest.Wait()
		metricstest.Expect(t, metricstest.Scrape(t, s), dto.MetricType_GAUGE, map[string]float64{"acp_broker_schedule_runs_running": 0})
	})
}
