package discord

import (
	"testing"

	"acpbroker/internal/fakediscord"
	"acpbroker/internal/metricstest"

	dto "github.com/prometheus/client_model/go"
)

// Each of Discord's own counters, set apart from the others, is
// collected under its own metric, beside its conversations' metrics:
// what broker.Platform labels with Discord's name.
func TestMetrics_EachDiscordCounterReachesItsMetric(t *testing.T) {
	c := newBareClient(t, fakediscord.New(t, fakediscord.Options{}), "t")
	c.mu.Lock()
	c.stats.RESTCalls, c.stats.RateLimited, c.stats.GatewayReconnects = 101, 102, 103
	c.mu.Unlock()
	got := metricstest.Scrape(t, c)
	metricstest.Expect(t, got, dto.MetricType_COUNTER, map[string]float64{
		"acp_broker_chat_rest_calls_total": 101, "acp_broker_chat_rate_limited_total": 102, "acp_broker_chat_reconnects_total": 103,
		"acp_broker_chat_lost_answers_total": 0,
	})
	metricstest.Expect(t, got, dto.MetricType_GAUGE, map[string]float64{"acp_broker_chat_conversations": 0, "acp_broker_chat_open_questions": 0})
	if _, ok := got["acp_broker_chat_throttled_total"]; ok {
		t.Error("Discord exports Slack's throttled calls")
	}
}
