package thread

import "github.com/prometheus/client_golang/prometheus"

var _ prometheus.Collector = (*Server)(nil)

// The chat metrics. They name no platform: the broker labels each
// platform's collector with its name (prometheus.WrapCollectorWith), so
// that one description serves every platform. A Server collects those of
// its conversations, a platform's client its Calls; a platform without a
// Server may count with the others.
var (
	dRESTCalls   = desc("chat_rest_calls_total", "REST calls made to the chat platform, by platform.")
	dRateLimited = desc("chat_rate_limited_total", "REST calls the chat platform answered 429, by platform.")
	dReconnects  = desc("chat_reconnects_total", "Connections to the chat platform (Discord's gateway, Slack's Socket Mode) lost or refreshed and re-established, by platform.")

	MetricOpenPermissions    = desc("chat_open_permission_requests", "Permission requests shown, waiting for an answer, by platform.")
	MetricOpenQuestions      = desc("chat_open_questions", "The agent's questions shown in a thread, waiting for an answer, by platform.")
	MetricConversations      = desc("chat_conversations", "Conversation threads held in memory (idle ones are forgotten after a day), by platform.")
	MetricRefusedUsers       = desc("chat_refused_messages_total", "Messages refused because their author is not allowed, by platform.")
	MetricRefusedChannels    = desc("chat_refused_channel_messages_total", "Messages refused because their thread's channel is no longer allowed, by platform.")
	MetricLostAnswers        = desc("chat_lost_answers_total", "Answers whose final view could not be shown in full, by platform.")
	MetricIgnoredCancels     = desc("chat_ignored_cancel_reactions_total", "🛑 reactions ignored because their author may not cancel the thread's turn, by platform.")
	MetricRefusedAttachments = desc("chat_refused_attachments_total", "Messages refused because of an attachment, by platform.")
	MetricRetitling          = desc("chat_retitling_threads", "Threads renamed after their agent's title within the last interval, whose rename state is kept, by platform.")
)

func desc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("acp_broker_"+name, help, nil, nil)
}

// Describe sends the descriptions of the metrics of the Server's
// conversations.
func (s *Server) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{MetricOpenPermissions, MetricOpenQuestions, MetricConversations, MetricRefusedUsers, MetricRefusedChannels, MetricLostAnswers, MetricIgnoredCancels, MetricRefusedAttachments, MetricRetitling} {
		ch <- d
	}
}

// Collect sends the metrics of the Server's conversations as Stats has
// them now.
func (s *Server) Collect(ch chan<- prometheus.Metric) {
	st := s.Stats()
	gauge := func(d *prometheus.Desc, v int) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge(MetricOpenPermissions, st.OpenPermissions)
	gauge(MetricOpenQuestions, st.OpenQuestions)
	gauge(MetricConversations, st.Conversations)
	gauge(MetricRetitling, st.Retitling)
	counter(MetricRefusedUsers, st.RefusedUsers)
	counter(MetricRefusedChannels, st.RefusedChannels)
	counter(MetricLostAnswers, st.LostAnswers)
	counter(MetricIgnoredCancels, st.IgnoredCancels)
	counter(MetricRefusedAttachments, st.RefusedAttachments)
}

// Calls are a platform client's counts of its calls to the platform.
type Calls struct {
	// REST counts the calls made; RateLimited those the platform
	// answered 429; Reconnects the connections to it (a gateway, a
	// socket) lost or refreshed and made again.
	REST, RateLimited, Reconnects uint64
}

// DescribeCalls sends the descriptions of the metrics of Calls.
func DescribeCalls(ch chan<- *prometheus.Desc) {
	ch <- dRESTCalls
	ch <- dRateLimited
	ch <- dReconnects
}

// Collect sends the metrics of c.
func (c Calls) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(dRESTCalls, prometheus.CounterValue, float64(c.REST))
	ch <- prometheus.MustNewConstMetric(dRateLimited, prometheus.CounterValue, float64(c.RateLimited))
	ch <- prometheus.MustNewConstMetric(dReconnects, prometheus.CounterValue, float64(c.Reconnects))
}
