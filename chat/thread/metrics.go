package thread

import (
	"acpbroker/metrics"

	"github.com/prometheus/client_golang/prometheus"
)

var _ prometheus.Collector = (*Server)(nil)

// The chat metrics name no platform: the broker labels each platform's
// collector with its name (prometheus.WrapCollectorWith), so that one
// description serves every platform. A Server collects its
// conversations' (StatsMetrics), a platform's client its Calls.

// Describe sends the descriptions of the metrics of the Server's
// conversations.
func (s *Server) Describe(ch chan<- *prometheus.Desc) { metrics.Describe(ch, StatsMetrics) }

// Collect sends the metrics of the Server's conversations as Stats has
// them now.
func (s *Server) Collect(ch chan<- prometheus.Metric) { metrics.Collect(ch, s.Stats(), StatsMetrics) }

// StatsMetrics are the metrics of a Server's Stats, one row each. A
// platform without a Server may collect them from a Stats of its own.
var StatsMetrics = []metrics.Stat[Stats]{
	metrics.Gauge("chat_open_permission_requests", "Permission requests shown, waiting for an answer, by platform.", func(s Stats) int { return s.OpenPermissions }),
	metrics.Gauge("chat_open_questions", "The agent's questions shown in a thread, waiting for an answer, by platform.", func(s Stats) int { return s.OpenQuestions }),
	metrics.Gauge("chat_conversations", "Conversation threads held in memory (idle ones are forgotten after a day), by platform.", func(s Stats) int { return s.Conversations }),
	metrics.Counter("chat_refused_messages_total", "Messages refused because their author is not allowed, by platform.", func(s Stats) uint64 { return s.RefusedUsers }),
	metrics.Counter("chat_refused_channel_messages_total", "Messages refused because their thread's channel is no longer allowed, by platform.",
		func(s Stats) uint64 { return s.RefusedChannels }),
	metrics.Counter("chat_lost_answers_total", "Answers whose final view could not be shown in full, by platform.", func(s Stats) uint64 { return s.LostAnswers }),
	metrics.Counter("chat_ignored_cancel_reactions_total", "🛑 reactions ignored because their author may not cancel the thread's turn, by platform.",
		func(s Stats) uint64 { return s.IgnoredCancels }),
	metrics.Counter("chat_refused_attachments_total", "Messages refused because of an attachment, by platform.", func(s Stats) uint64 { return s.RefusedAttachments }),
	metrics.Gauge("chat_retitling_threads", "Threads renamed after their agent's title within the last interval, whose rename state is kept, by platform.",
		func(s Stats) int { return s.Retitling }),
}

// Calls are a platform client's counts of its calls to the platform.
type Calls struct {
	// REST counts the calls made; RateLimited those the platform
	// answered 429; Reconnects the connections to it (a gateway, a
	// socket) lost or refreshed and made again.
	REST, RateLimited, Reconnects uint64
}

// CallsMetrics are the metrics of Calls, one row each.
var CallsMetrics = []metrics.Stat[Calls]{
	metrics.Counter("chat_rest_calls_total", "REST calls made to the chat platform, by platform.", func(c Calls) uint64 { return c.REST }),
	metrics.Counter("chat_rate_limited_total", "REST calls the chat platform answered 429, by platform.", func(c Calls) uint64 { return c.RateLimited }),
	metrics.Counter("chat_reconnects_total", "Connections to the chat platform (Discord's gateway, Slack's Socket Mode) lost or refreshed and re-established, by platform.",
		func(c Calls) uint64 { return c.Reconnects }),
}
