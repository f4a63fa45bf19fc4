package discord

import (
	"acpbroker/chat/thread"
	"acpbroker/metrics"

	"github.com/prometheus/client_golang/prometheus"
)

var _ prometheus.Collector = (*Client)(nil)

// Describe sends the descriptions of the client's metrics: its calls to
// Discord and its gateway's, and its conversations'. They name no
// platform; the broker labels them with Discord's.
func (c *Client) Describe(ch chan<- *prometheus.Desc) {
	metrics.Describe(ch, thread.CallsMetrics)
	c.srv.Describe(ch)
}

// Collect sends the client's metrics as they are now.
func (c *Client) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	calls := thread.Calls{REST: c.stats.RESTCalls, RateLimited: c.stats.RateLimited, Reconnects: c.stats.GatewayReconnects}
	c.mu.Unlock()
	metrics.Collect(ch, calls, thread.CallsMetrics)
	c.srv.Collect(ch)
}
