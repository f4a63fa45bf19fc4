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
	thread.DescribeCalls(ch)
	ch <- dThrottled
	ch <- dDeduplicated
	ch <- dRefusedRequests
	c.srv.Describe(ch)
}

// Collect sends the client's metrics as they are now.
func (c *Client) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	s := c.stats
	c.mu.Unlock()
	thread.Calls{REST: s.APICalls, RateLimited: s.RateLimited, Reconnects: s.SocketReconnects}.Collect(ch)
	for _, m := range []struct {
		d *prometheus.Desc
		n uint64
	}{{dThrottled, s.Throttled}, {dDeduplicated, s.Deduplicated}, {dRefusedRequests, s.RefusedRequests}} {
		ch <- prometheus.MustNewConstMetric(m.d, prometheus.CounterValue, float64(m.n))
	}
	c.srv.Collect(ch)
}
