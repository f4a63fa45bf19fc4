package store

import "github.com/prometheus/client_golang/prometheus"

var _ prometheus.Collector = (*Store)(nil)

var (
	dActive    = prometheus.NewDesc("acp_broker_store_active_turns", "Turns queued or running in the state store.", nil, nil)
	dFinished  = prometheus.NewDesc("acp_broker_store_finished_turns", "Finished turns kept in the state store.", nil, nil)
	dFileBytes = prometheus.NewDesc("acp_broker_store_file_bytes", "Size of the state database file.", nil, nil)
	dWorktrees = prometheus.NewDesc("acp_broker_store_worktrees", "Threads' git worktrees recorded in the state store and not yet removed.", nil, nil)
	dErrors    = prometheus.NewDesc("acp_broker_store_write_errors_total", "Failed writes of the state store.", nil, nil)
)

// Describe sends the descriptions of the store's metrics.
func (s *Store) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dActive, dFinished, dFileBytes, dWorktrees, dErrors} {
		ch <- d
	}
}

// Collect sends the store's metrics as Stats has them now.
func (s *Store) Collect(ch chan<- prometheus.Metric) {
	st := s.Stats()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	gauge(dActive, float64(st.ActiveTurns))
	gauge(dFinished, float64(st.FinishedTurns))
	gauge(dFileBytes, float64(st.FileBytes))
	gauge(dWorktrees, float64(st.Worktrees))
	ch <- prometheus.MustNewConstMetric(dErrors, prometheus.CounterValue, float64(st.WriteErrors))
}
