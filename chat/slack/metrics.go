package slack

import (
	"acpbroker/chat/thread"

	"github.com/prometheus/client_golang/prometheus"
)

var _ prometheus.Collector = (*Client)(nil)

// Slack's own chat metrics, beside package thread's.
var (
	dThrottled = prometheus.NewDesc("acp_broker_chat_throttled_total",
		"REST calls held back because they would have gone past the chat platform's rate limits (they wait; nothing is lost), by platform.", nil, nil)
	dDeduplicated = prometheus.NewDesc("acp_broker_chat_deduplicated_events_total",
		"Events the chat platform sent again (a retry of one acknowledged late, a replay) and that were taken once, by platform.", nil, nil)
	dRefusedRequests = prometheus.NewDesc("acp_broker_chat_refused_requests_total",
		"HTTP requests said to come from the chat platform that were refused: a bad or missing signature, a stale timestamp, a replay (Slack's http mode), by platform.", nil, nil)
)

// Describe sends the descriptions of the client's metrics: its calls to
// Slack, its connections and requests, and its conversations'. They
// name no platform; the broker labels them with Slack's.
func (c *Client) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{thread.MetricRESTCalls, thread.MetricRateLimited, thread.MetricReconnects, dThrottled, dDeduplicated, dRefusedRequests} {
		ch <- d
	}
	c.srv.Describe(ch)
}

// Collect sends the client's metrics as they are now.
func (c *Client) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	s := c.stats
	c.mu.Unlock()
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	counter(thread.MetricRESTCalls, s.APICalls)
	counter(thread.MetricRateLimited, s.RateLimited)
	counter(thread.MetricReconnects, s.SocketReconnects)
	counter(dThrottled, s.Throttled)
	counter(dDeduplicated, s.Deduplicated)
	counter(dRefusedRequests, s.RefusedRequests)
	c.srv.Collect(ch)
}
