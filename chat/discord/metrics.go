package discord

import (
	"acpbroker/chat/thread"

	"github.com/prometheus/client_golang/prometheus"
)

var _ prometheus.Collector = (*Client)(nil)

// Describe sends the descriptions of the client's metrics: its calls to
// Discord and its gateway's, and its conversations'. They name no
// platform; the broker labels them with Discord's.
func (c *Client) Describe(ch chan<- *prometheus.Desc) {
	ch <- thread.MetricRESTCalls
	ch <- thread.MetricRateLimited
	ch <- thread.MetricReconnects
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
	counter(thread.MetricRESTCalls, s.RESTCalls)
	counter(thread.MetricRateLimited, s.RateLimited)
	counter(thread.MetricReconnects, s.GatewayReconnects)
	c.srv.Collect(ch)
}
