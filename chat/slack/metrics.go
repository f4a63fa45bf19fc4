package slack

import (
	"acpbroker/chat/thread"
	"acpbroker/metrics"

	"github.com/prometheus/client_golang/prometheus"
)

var _ prometheus.Collector = (*Client)(nil)

// Describe sends the descriptions of the client's metrics: its calls to
// Slack, its connections and requests, and its conversations'. They
// name no platform; the broker labels them with Slack's.
func (c *Client) Describe(ch chan<- *prometheus.Desc) {
	metrics.Describe(ch, thread.CallsMetrics)
	metrics.Describe(ch, slackMetrics)
	c.srv.Describe(ch)
}

// Collect sends the client's metrics as they are now.
func (c *Client) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	s := c.stats
	c.mu.Unlock()
	metrics.Collect(ch, thread.Calls{REST: s.APICalls, RateLimited: s.RateLimited, Reconnects: s.SocketReconnects}, thread.CallsMetrics)
	metrics.Collect(ch, s, slackMetrics)
	c.srv.Collect(ch)
}

// slackMetrics are Slack's own, beside package thread's: one row each.
var slackMetrics = []metrics.Stat[Stats]{
	metrics.Counter("chat_throttled_total", "REST calls held back because they would have gone past the chat platform's rate limits (they wait; nothing is lost), by platform.",
		func(s Stats) uint64 { return s.Throttled }),
	metrics.Counter("chat_deduplicated_events_total", "Events the chat platform sent again (a retry of one acknowledged late, a replay) and that were taken once, by platform.",
		func(s Stats) uint64 { return s.Deduplicated }),
	metrics.Counter("chat_refused_requests_total", "HTTP requests said to come from the chat platform that were refused: a bad or missing signature, a stale timestamp, a replay (Slack's http mode), by platform.",
		func(s Stats) uint64 { return s.RefusedRequests }),
}
