package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// APIStats are the HTTP API's counters.
type APIStats struct {
	// Requests counts the requests answered, by status code.
	Requests map[int]uint64
	// Prompts is the number of the API's prompts not yet ended.
	Prompts int
	// Connections are the connections the API's listener holds open and
	// Streams its event streams open; Evicted counts the idle connections
	// closed to make room for new ones, Refused the new ones closed at
	// once (api.max_connections).
	Connections, Streams int
	Evicted, Refused     uint64
}

// ScheduleStats are the schedules' counters.
type ScheduleStats struct {
	// Runs counts the runs since the start, by outcome (done, failed,
	// cancelled, interrupted, refused, skipped).
	Runs map[string]uint64
	// Running is the number of runs going on.
	Running int
}

var (
	dAPIRequests   = desc("api_requests_total", "HTTP API requests answered, by status code.", "code")
	dAPIPrompts    = desc("api_prompts_running", "HTTP API prompts not yet ended.")
	dAPIConns      = desc("api_connections", "Connections the HTTP API's listener holds open (at most api.max_connections).")
	dAPIStreams    = desc("api_event_streams", "HTTP API event streams open.")
	dAPIConnClosed = desc("api_connections_closed_total", "Connections the HTTP API closed past api.max_connections: evicted (idle, to make room) or refused (every one busy).", "reason")
	dScheduleRuns  = desc("schedule_runs_total", "Schedule runs since the start, by outcome (skipped: due while the last run went on).", "outcome")
	dScheduleGoing = desc("schedule_runs_running", "Schedule runs going on.")
)

// sideCollector reads the API's and the schedules' counters, when the
// broker has them.
type sideCollector struct{ src Sources }

func (c *sideCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dAPIRequests, dAPIPrompts, dAPIConns, dAPIStreams, dAPIConnClosed, dScheduleRuns, dScheduleGoing} {
		ch <- d
	}
}

func (c *sideCollector) Collect(ch chan<- prometheus.Metric) {
	if c.src.API != nil {
		s := c.src.API()
		for code, n := range s.Requests {
			ch <- prometheus.MustNewConstMetric(dAPIRequests, prometheus.CounterValue, float64(n), strconv.Itoa(code))
		}
		ch <- prometheus.MustNewConstMetric(dAPIPrompts, prometheus.GaugeValue, float64(s.Prompts))
		ch <- prometheus.MustNewConstMetric(dAPIConns, prometheus.GaugeValue, float64(s.Connections))
		ch <- prometheus.MustNewConstMetric(dAPIStreams, prometheus.GaugeValue, float64(s.Streams))
		ch <- prometheus.MustNewConstMetric(dAPIConnClosed, prometheus.CounterValue, float64(s.Evicted), "evicted")
		ch <- prometheus.MustNewConstMetric(dAPIConnClosed, prometheus.CounterValue, float64(s.Refused), "refused")
	}
	if c.src.Schedules != nil {
		s := c.src.Schedules()
		for outcome, n := range s.Runs {
			ch <- prometheus.MustNewConstMetric(dScheduleRuns, prometheus.CounterValue, float64(n), outcome)
		}
		ch <- prometheus.MustNewConstMetric(dScheduleGoing, prometheus.GaugeValue, float64(s.Running))
	}
}
