package thread

import (
	"reflect"
	"testing"

	"acpbroker/internal/metricstest"

	dto "github.com/prometheus/client_model/go"
)

// Each of the Server's counters, set apart from the others, is collected
// under its own metric; its gauges are the sizes of what it holds now.
func TestMetrics_EachCounterReachesItsMetric(t *testing.T) {
	s := New(Config{}, nil, nil)
	defer s.cancel()
	want := map[string]float64{}
	names := map[string]string{"RefusedUsers": "acp_broker_chat_refused_messages_total", "RefusedChannels": "acp_broker_chat_refused_channel_messages_total",
		"IgnoredCancels": "acp_broker_chat_ignored_cancel_reactions_total", "RefusedAttachments": "acp_broker_chat_refused_attachments_total",
		"LostAnswers": "acp_broker_chat_lost_answers_total"}
	v := reflect.ValueOf(&s.stats).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Uint64 {
			name := v.Type().Field(i).Name
			if names[name] == "" {
				t.Errorf("Stats.%s is counted, and no metric collects it", name)
				continue
			}
			f.SetUint(uint64(100 + i))
			want[names[name]] = float64(100 + i)
		}
	}
	got := metricstest.Scrape(t, s)
	metricstest.Expect(t, got, dto.MetricType_COUNTER, want)
	metricstest.Expect(t, got, dto.MetricType_GAUGE, map[string]float64{"acp_broker_chat_conversations": 0, "acp_broker_chat_open_permission_requests": 0,
		"acp_broker_chat_open_questions": 0, "acp_broker_chat_retitling_threads": 0})
	s.mu.Lock()
	s.convs["a"], s.convs["b"] = &conversation{}, &conversation{}
	s.mu.Unlock()
	metricstest.Expect(t, metricstest.Scrape(t, s), dto.MetricType_GAUGE, map[string]float64{"acp_broker_chat_conversations": 2})
}
