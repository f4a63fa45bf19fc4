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
}

var (
	dAPIRequests = desc("api_requests_total", "HTTP API requests answered, by status code.", "code")
	dAPIPrompts  = desc("api_prompts_running", "HTTP API prompts not yet ended.")
)

// sideCollector reads the API's counters, when the broker has them.
type sideCollector struct{ src Sources }

func (c *sideCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dAPIRequests, dAPIPrompts} {
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
	}
}
