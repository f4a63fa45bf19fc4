package store

import (
	"testing"
	"time"

	"acpbroker/internal/metricstest"

	dto "github.com/prometheus/client_model/go"
)

// A turn queued is an active turn until it ends; then it is a finished
// one, and the active gauge is back to zero.
func TestMetrics_ActiveTurnsReturnToZeroWhenTheyEnd(t *testing.T) {
	s := open(t, t.TempDir(), Options{FlushInterval: time.Hour})
	id := s.TurnQueued("t", "m", "", "")
	s.TurnStarted(id)
	got := metricstest.Scrape(t, s)
	metricstest.Expect(t, got, dto.MetricType_GAUGE, map[string]float64{"acp_broker_store_active_turns": 1, "acp_broker_store_finished_turns": 0})
	metricstest.Expect(t, got, dto.MetricType_COUNTER, map[string]float64{"acp_broker_store_write_errors_total": 0})
	if got["acp_broker_store_file_bytes"].Value <= 0 {
		t.Errorf("store_file_bytes = %v for a database on disk", got["acp_broker_store_file_bytes"].Value)
	}
	s.TurnEnded(id, string(Done), "")
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	metricstest.Expect(t, metricstest.Scrape(t, s), dto.MetricType_GAUGE, map[string]float64{"acp_broker_store_active_turns": 0, "acp_broker_store_finished_turns": 1})
}
