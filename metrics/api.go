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

var (
	dAPIRequests   = desc("api_requests_total", "HTTP API requests answered, by status code.", "code")
	dAPIPrompts    = desc("api_prompts_running", "HTTP API prompts not yet ended.")
	dAPIConns      = desc("api_connections", "Connections the HTTP API's listener holds open (at most api.max_connections).")
	dAPIStreams    = desc("api_event_streams", "HTTP API event streams open.")
	dAPIConnClosed = desc("api_connections_closed_total", "Connections the HTTP API closed past api.max_connections: evicted (idle, to make room) or refused (every one busy).", "reason")
)

// sideCollector reads the API's counters, when the broker has them.
type sideCollector struct{ src Sources }

func (c *sideCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dAPIRequests, dAPIPrompts, dAPIConns, dAPIStreams, dAPIConnClosed} {
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
}
