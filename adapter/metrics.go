package adapter

import (
	"acpbroker/metrics"
	"acpbroker/pool"

	"github.com/prometheus/client_golang/prometheus"
)

var _ prometheus.Collector = (*Engine)(nil)

// Describe sends the descriptions of the engine's metrics. Its pool's
// are the pool's own collector's.
func (e *Engine) Describe(ch chan<- *prometheus.Desc) {
	metrics.Describe(ch, engineStats)
	e.timings.turn.Describe(ch)
	e.timings.firstChunk.Describe(ch)
}

// Collect sends the engine's metrics as Stats and its histograms have
// them now.
func (e *Engine) Collect(ch chan<- prometheus.Metric) {
	metrics.Collect(ch, e.Stats(), engineStats)
	e.timings.turn.Collect(ch)
	e.timings.firstChunk.Collect(ch)
}

// timings are the turns' histograms.
type timings struct {
	// turn observes how long each turn took, by outcome (Outcome.Class);
	// firstChunk the time from a prompt to its answer's first text.
	turn       *prometheus.HistogramVec
	firstChunk prometheus.Histogram
}

func newTimings() timings {
	return timings{
		turn: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "acp_broker_turn_duration_seconds",
			Help:    "How long turns took, from leaving the queue to their outcome, by outcome.",
			Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600},
		}, []string{"outcome"}),
		firstChunk: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "acp_broker_turn_first_chunk_seconds",
			Help:    "Time from sending a prompt to the answer's first text.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120},
		}),
	}
}

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
