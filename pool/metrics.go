package pool

import "github.com/prometheus/client_golang/prometheus"

var _ prometheus.Collector = (*Pool)(nil)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("acp_broker_"+name, help, labels, nil)
}

// The pool's metrics: its agents', and their connections' summed.
var (
	dAgentsMax       = desc("agents_max", "Agent processes at most, of all profiles (pool.max_sessions).")
	dProfileMax      = desc("profile_agents_max", "Agent processes at most of a profile with a bound of its own (max_sessions), by agent profile.", "profile")
	dAgentsLive      = desc("agents_live", "Agent processes running.")
	dAgentsBusy      = desc("agents_busy", "Agent processes running a turn.")
	dAgentsStarting  = desc("agents_starting", "Agent processes being started.")
	dProfileLive     = desc("profile_agents_live", "Agent processes running, by agent profile.", "profile")
	dProfileBusy     = desc("profile_agents_busy", "Agent processes running a turn, by agent profile.", "profile")
	dSpawns          = desc("agent_spawns_total", "Agent processes started.")
	dSpawnFailures   = desc("agent_spawn_failures_total", "Agent processes that could not be started.")
	dStops           = desc("agent_stops_total", "Agent processes stopped, by reason.", "reason")
	dKills           = desc("agent_kills_total", "Agent process groups killed without a grace.")
	dOutOfMemory     = desc("agent_oom_kills_total", "Agent processes that ran out of memory: killed by the kernel for their memory limit (memory_max).")
	dSessionsClosed  = desc("agent_sessions_closed_total", "Agent sessions closed with session/close before their agents were stopped for idleness.")
	dCgroups         = desc("agent_cgroups", "Agents' control groups made and not yet removed.")
	dPendingRequests = desc("acp_pending_requests", "JSON-RPC requests to agents awaiting an answer.")
	dPendingPerms    = desc("acp_pending_permission_requests", "Agent permission requests not yet answered.")
	dPendingElicits  = desc("acp_pending_elicitations", "The agent's questions not yet answered.")
	dStale           = desc("acp_stale_responses_total", "Agent responses dropped because no live request had their id.")
	dJunk            = desc("acp_junk_lines_total", "Agent output lines skipped because they were not JSON-RPC.")
	dOversize        = desc("acp_oversize_lines_total", "Agent output lines skipped for exceeding the size cap.")
	dLateUpdates     = desc("acp_late_updates_total", "Session updates that arrived with no turn listening.")
	dEarlyDropped    = desc("acp_early_updates_dropped_total", "Session updates for sessions not known dropped: none was being created, or past the bounds of what is kept until one is.")
	dDroppedUpdates  = desc("acp_dropped_updates_total", "Session updates dropped because a turn's queue was full.")
	dBadMessages     = desc("acp_bad_messages_total", "Agent messages with unusable parameters.")
	dAgentRequests   = desc("acp_agent_requests_in_flight", "Agent requests (permission, files) being served.")
	dRefusedRequests = desc("acp_agent_requests_refused_total", "Agent requests refused for being past agent.max_requests.")
	dInvalidRequests = desc("acp_invalid_requests_total", "Agent requests answered -32600: batches, unreadable ids.")
	dUnsentAnswers   = desc("acp_agent_answers_unsent_total", "Answers to refused, unknown or invalid agent requests not sent: the agent read nothing while they waited.")
	dUnknownOptions  = desc("acp_unknown_config_options_total", "Session configuration options skipped for a type the broker does not know, or unusable fields.")
	dTerminalsOpen   = desc("terminals_open", "Terminals agents have open (created and not yet released), running or ended.")
	dUnknown         = desc("acp_unknown_total", "Session updates of unknown kinds, and content items of unknown types, ignored.", "what")
)

// Describe sends the descriptions of the pool's metrics.
func (p *Pool) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dAgentsMax, dProfileMax, dAgentsLive, dAgentsBusy, dAgentsStarting, dProfileLive, dProfileBusy,
		dSpawns, dSpawnFailures, dStops, dKills, dOutOfMemory, dSessionsClosed, dCgroups,
		dPendingRequests, dPendingPerms, dPendingElicits, dStale, dJunk, dOversize, dLateUpdates, dEarlyDropped, dDroppedUpdates, dBadMessages,
		dAgentRequests, dRefusedRequests, dInvalidRequests, dUnsentAnswers, dUnknownOptions, dTerminalsOpen, dUnknown} {
		ch <- d
	}
}

// Collect sends the pool's metrics as Stats has them now.
func (p *Pool) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	s := p.Stats()
	gauge(dAgentsMax, s.MaxSessions)
	gauge(dAgentsLive, s.Live)
	gauge(dAgentsBusy, s.Busy)
	gauge(dAgentsStarting, s.Starting)
	for name, ps := range s.Profiles {
		gauge(dProfileLive, ps.Live, name)
		gauge(dProfileBusy, ps.Busy, name)
		if ps.MaxSessions > 0 {
			gauge(dProfileMax, ps.MaxSessions, name)
		}
	}
	counter(dSpawns, s.Spawned)
	counter(dSpawnFailures, s.SpawnFailed)
	for reason, n := range s.Stopped {
		counter(dStops, n, reason)
	}
	counter(dKills, s.Killed)
	counter(dOutOfMemory, s.OutOfMemory)
	counter(dSessionsClosed, s.SessionsClosed)
	gauge(dCgroups, s.Cgroups)

	c := s.Conn
	gauge(dPendingRequests, c.PendingRequests)
	gauge(dPendingPerms, c.PendingPermissions)
	gauge(dPendingElicits, c.PendingElicitations)
	gauge(dAgentRequests, c.AgentRequests)
	gauge(dTerminalsOpen, c.TerminalsOpen)
	counter(dStale, c.StaleResponses)
	counter(dJunk, c.JunkLines)
	counter(dOversize, c.OversizeLines)
	counter(dLateUpdates, c.LateUpdates)
	counter(dEarlyDropped, c.EarlyDropped)
	counter(dDroppedUpdates, c.DroppedUpdates)
	counter(dBadMessages, c.BadMessages)
	counter(dRefusedRequests, c.RefusedRequests)
	counter(dInvalidRequests, c.InvalidRequests)
	counter(dUnsentAnswers, c.UnsentAnswers)
	counter(dUnknownOptions, c.UnknownConfigOptions)
	counter(dUnknown, c.UnknownUpdates, "update")
	counter(dUnknown, c.UnknownContent, "content")
}
