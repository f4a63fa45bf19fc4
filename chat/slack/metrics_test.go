package slack

import (
	"testing"

	"acpbroker/internal/metricstest"

	dto "github.com/prometheus/client_model/go"
)

// Each of Slack's own counters, set apart from the others, is collected
// under its own metric, beside its conversations' metrics: what
// broker.Platform labels with Slack's name.
func TestMetrics_EachSlackCounterReachesItsMetric(t *testing.T) {
	c := fuzzClient(t)
	c.mu.Lock()
	c.stats.APICalls, c.stats.RateLimited, c.stats.Throttled = 101, 102, 103
	c.stats.SocketReconnects, c.stats.Deduplicated, c.stats.RefusedRequests = 104, 105, 106
	c.mu.Unlock()
	got := metricstest.Scrape(t, c)
	metricstest.Expect(t, got, dto.MetricType_COUNTER, map[string]float64{
		"acp_broker_chat_rest_calls_total": 101, "acp_broker_chat_rate_limited_total": 102, "acp_broker_chat_throttled_total": 103,
		"acp_broker_chat_reconnects_total": 104, "acp_broker_chat_deduplicated_events_total": 105, "acp_broker_chat_refused_requests_total": 106,
		"acp_broker_chat_refused_messages_total": 0,
	})
	metricstest.Expect(t, got, dto.MetricType_GAUGE, map[string]float64{"acp_broker_chat_conversations": 0})
}
