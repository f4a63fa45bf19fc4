package pool

import (
	"acpbroker/metrics"

	"github.com/prometheus/client_golang/prometheus"
)

var _ prometheus.Collector = (*Pool)(nil)

// Describe sends the descriptions of the pool's metrics.
func (p *Pool) Describe(ch chan<- *prometheus.Desc) { metrics.Describe(ch, poolStats) }

// Collect sends the pool's metrics as Stats has them now.
func (p *Pool) Collect(ch chan<- prometheus.Metric) { metrics.Collect(ch, p.Stats(), poolStats) }

// byProfile sends a gauge's series for each profile: v's value, for the
// profiles it says have one.
func byProfile(v func(ProfileStats) (int, bool)) func(Stats, func(int, ...string)) {
	return func(s Stats, series func(int, ...string)) {
		for name, ps := range s.Profiles {
			if n, ok := v(ps); ok {
				series(n, name)
			}
		}
	}
}

// byProfileCount sends a counter's series for each profile v has a count
// of.
func byProfileCount(v func(Stats) map[string]uint64) func(Stats, func(uint64, ...string)) {
	return func(s Stats, series func(uint64, ...string)) {
		for name, n := range v(s) {
			series(n, name)
		}
	}
}

// poolStats are the pool's metrics, its agents' and their connections'
// summed: one row each.
var poolStats = []metrics.Stat[Stats]{
	metrics.Gauge("agents_max", "Agent processes at most, of all profiles (pool.max_sessions).", func(s Stats) int { return s.MaxSessions }),
	metrics.GaugeVec("profile_agents_max", "Agent processes at most of a profile with a bound of its own (max_sessions), by agent profile.", []string{"profile"},
		byProfile(func(ps ProfileStats) (int, bool) { return ps.MaxSessions, ps.MaxSessions > 0 })),
	metrics.Gauge("agents_live", "Agent processes running.", func(s Stats) int { return s.Live }),
	metrics.Gauge("agents_busy", "Agent processes running a turn.", func(s Stats) int { return s.Busy }),
	metrics.Gauge("agents_starting", "Agent processes being started.", func(s Stats) int { return s.Starting }),
	metrics.GaugeVec("profile_agents_live", "Agent processes running, by agent profile.", []string{"profile"},
		byProfile(func(ps ProfileStats) (int, bool) { return ps.Live, true })),
	metrics.GaugeVec("profile_agents_busy", "Agent processes running a turn, by agent profile.", []string{"profile"},
		byProfile(func(ps ProfileStats) (int, bool) { return ps.Busy, true })),
	metrics.GaugeVec("profile_agents_warm", "Warm agents ready for a new thread to take, by agent profile.", []string{"profile"},
		byProfile(func(ps ProfileStats) (int, bool) { return ps.Warm, true })),
	metrics.CounterVec("agent_warm_claims_total", "Threads that took a warm agent, by agent profile.", []string{"profile"}, byProfileCount(func(s Stats) map[string]uint64 { return s.WarmClaims })),
	metrics.CounterVec("agent_cold_starts_total", "Agents started for a thread that took no warm agent, by agent profile.", []string{"profile"}, byProfileCount(func(s Stats) map[string]uint64 { return s.ColdStarts })),
	metrics.Counter("agent_spawns_total", "Agent processes started.", func(s Stats) uint64 { return s.Spawned }),
	metrics.Counter("agent_spawn_failures_total", "Agent processes that could not be started.", func(s Stats) uint64 { return s.SpawnFailed }),
	metrics.Counter("agent_adoptions_total", "Agents an earlier run of the broker started on agent hosts, taken up by this one.", func(s Stats) uint64 { return s.Adopted }),
	metrics.Counter("agents_left_total", "Idle agents on agent hosts left running when the broker stopped, for its next run to take up.", func(s Stats) uint64 { return s.Left }),
	metrics.CounterVec("agent_stops_total", "Agent processes stopped, by reason.", []string{"reason"}, func(s Stats, series func(uint64, ...string)) {
		for reason, n := range s.Stopped {
			series(n, reason)
		}
	}),
	metrics.Counter("agent_kills_total", "Agent process groups killed without a grace.", func(s Stats) uint64 { return s.Killed }),
	metrics.Counter("agent_oom_kills_total", "Agent processes that ran out of memory: killed by the kernel for their memory limit (memory_max).", func(s Stats) uint64 { return s.OutOfMemory }),
	metrics.Counter("agent_sessions_closed_total", "Agent sessions closed with session/close before their agents were stopped for idleness.", func(s Stats) uint64 { return s.SessionsClosed }),
	metrics.Gauge("agent_cgroups", "Agents' control groups made and not yet removed.", func(s Stats) int { return s.Cgroups }),

	metrics.Gauge("acp_pending_requests", "JSON-RPC requests to agents awaiting an answer.", func(s Stats) int { return s.Conn.PendingRequests }),
	metrics.Gauge("acp_pending_permission_requests", "Agent permission requests not yet answered.", func(s Stats) int { return s.Conn.PendingPermissions }),
	metrics.Gauge("acp_pending_elicitations", "The agent's questions not yet answered.", func(s Stats) int { return s.Conn.PendingElicitations }),
	metrics.Gauge("acp_agent_requests_in_flight", "Agent requests (permission, files) being served.", func(s Stats) int { return s.Conn.AgentRequests }),
	metrics.Gauge("terminals_open", "Terminals agents have open (created and not yet released), running or ended.", func(s Stats) int { return s.Conn.TerminalsOpen }),
	metrics.Counter("acp_stale_responses_total", "Agent responses dropped because no live request had their id.", func(s Stats) uint64 { return s.Conn.StaleResponses }),
	metrics.Counter("acp_junk_lines_total", "Agent output lines skipped because they were not JSON-RPC.", func(s Stats) uint64 { return s.Conn.JunkLines }),
	metrics.Counter("acp_oversize_lines_total", "Agent output lines skipped for exceeding the size cap.", func(s Stats) uint64 { return s.Conn.OversizeLines }),
	metrics.Counter("acp_late_updates_total", "Session updates that arrived with no turn listening.", func(s Stats) uint64 { return s.Conn.LateUpdates }),
	metrics.Counter("acp_early_updates_dropped_total", "Session updates for sessions not known dropped: none was being created, or past the bounds of what is kept until one is.",
		func(s Stats) uint64 { return s.Conn.EarlyDropped }),
	metrics.Counter("acp_dropped_updates_total", "Session updates dropped because a turn's queue was full.", func(s Stats) uint64 { return s.Conn.DroppedUpdates }),
	metrics.Counter("acp_bad_messages_total", "Agent messages with unusable parameters.", func(s Stats) uint64 { return s.Conn.BadMessages }),
	metrics.Counter("acp_agent_requests_refused_total", "Agent requests refused for being past agent.max_requests.", func(s Stats) uint64 { return s.Conn.RefusedRequests }),
	metrics.Counter("acp_invalid_requests_total", "Agent requests answered -32600: batches, unreadable ids.", func(s Stats) uint64 { return s.Conn.InvalidRequests }),
	metrics.Counter("acp_agent_answers_unsent_total", "Answers to refused, unknown or invalid agent requests not sent: the agent read nothing while they waited.",
		func(s Stats) uint64 { return s.Conn.UnsentAnswers }),
	metrics.Counter("acp_unknown_config_options_total", "Session configuration options skipped for a type the broker does not know, or unusable fields.",
		func(s Stats) uint64 { return s.Conn.UnknownConfigOptions }),
	metrics.CounterVec("acp_unknown_total", "Session updates of unknown kinds, and content items of unknown types, ignored.", []string{"what"},
		func(s Stats, series func(uint64, ...string)) {
			series(s.Conn.UnknownUpdates, "update")
			series(s.Conn.UnknownContent, "content")
		}),
}
