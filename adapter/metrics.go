package adapter

import (
	"acpbroker/metrics"
	"acpbroker/pool"

	"github.com/prometheus/client_golang/prometheus"
)

var _ prometheus.Collector = (*Engine)(nil)

// Describe sends the descriptions of the engine's metrics. Its pool's
// are the pool's own collector's.
func (e *Engine) Describe(ch chan<- *prometheus.Desc) { metrics.Describe(ch, engineStats) }

// Collect sends the engine's metrics as Stats has them now.
func (e *Engine) Collect(ch chan<- prometheus.Metric) { metrics.Collect(ch, e.Stats(), engineStats) }

// engineStats are the engine's metrics, one row each: with the prompts
// waiting for a slot of the pool, and the agents it stopped for idleness
// among the watchdog's actions.
var engineStats = []metrics.Stat[Stats]{
	metrics.Gauge("turns_running", "Turns running.", func(s Stats) int { return s.Running }),
	metrics.GaugeVec("prompts_waiting", "Prompts not yet running, by state: queued behind a thread's turn, or waiting for an agent slot.", []string{"state"},
		func(s Stats, series func(int, ...string)) {
			series(s.Queued, "queued")
			series(s.Pool.Waiting, "waiting_for_slot")
		}),
	metrics.CounterVec("turns_total", "Turns ended, by outcome (done, stopped, or the failure's cause).", []string{"outcome"}, func(s Stats, series func(uint64, ...string)) {
		for class, n := range s.Outcomes {
			series(n, class)
		}
	}),
	metrics.CounterVec("permission_decisions_total", "Agent permission requests answered, by outcome (allowed, rejected, cancelled) and by whom (user, rule, mode, timeout, cancelled, unanswered).",
		[]string{"outcome", "by"}, decisions(func(s Stats) map[DecisionClass]uint64 { return s.Permissions })),
	metrics.CounterVec("elicitations_total", "The agent's questions answered, by action (accept, decline, cancel) and by whom (user, timeout, cancelled, unanswered).",
		[]string{"action", "by"}, decisions(func(s Stats) map[DecisionClass]uint64 { return s.Elicitations })),
	metrics.Gauge("thread_option_states", "Threads whose agents' options, modes and commands the engine keeps.", func(s Stats) int { return s.OptionThreads }),
	metrics.Gauge("threads_with_usage", "Threads whose agent's last token usage is kept for /status.", func(s Stats) int { return s.UsageThreads }),
	metrics.CounterVec("watchdog_actions_total", "Watchdog actions, by action.", []string{"action"}, func(s Stats, series func(uint64, ...string)) {
		series(s.ToolStuck, "cancel_stuck_tool")
		series(s.ForceEnded, "force_end")
		series(s.Pool.Stopped[pool.StopIdle], "stop_idle_agent")
	}),
}

// decisions sends the counts of decisions by their outcome and by whom.
func decisions(of func(Stats) map[DecisionClass]uint64) func(Stats, func(uint64, ...string)) {
	return func(s Stats, series func(uint64, ...string)) {
		for class, n := range of(s) {
			series(n, class.Outcome, class.Via)
		}
	}
}
