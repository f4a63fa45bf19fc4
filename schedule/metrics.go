package schedule

import (
	"acpbroker/metrics"

	"github.com/prometheus/client_golang/prometheus"
)

var _ prometheus.Collector = (*Scheduler)(nil)

// runStats are the runs since the start by outcome, and those going on:
// what Stats says.
type runStats struct {
	runs    map[string]uint64
	running int
}

// Describe sends the descriptions of the schedules' metrics.
func (s *Scheduler) Describe(ch chan<- *prometheus.Desc) { metrics.Describe(ch, scheduleMetrics) }

// Collect sends the schedules' metrics as Stats has them now.
func (s *Scheduler) Collect(ch chan<- prometheus.Metric) {
	runs, running := s.Stats()
	metrics.Collect(ch, runStats{runs, running}, scheduleMetrics)
}

// scheduleMetrics are the schedules' metrics, one row each.
var scheduleMetrics = []metrics.Stat[runStats]{
	metrics.CounterVec("schedule_runs_total", "Schedule runs since the start, by outcome (skipped: due while the last run went on).", []string{"outcome"},
		func(s runStats, series func(uint64, ...string)) {
			for outcome, n := range s.runs {
				series(n, outcome)
			}
		}),
	metrics.Gauge("schedule_runs_running", "Schedule runs going on.", func(s runStats) int { return s.running }),
}
