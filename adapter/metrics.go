package adapter

import (
	"acpbroker/pool"

	"github.com/prometheus/client_golang/prometheus"
)

var _ prometheus.Collector = (*Engine)(nil)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("acp_broker_"+name, help, labels, nil)
}

// The engine's metrics. Its pool's are the pool's own collector's.
var (
	dTurnsRunning   = desc("turns_running", "Turns running.")
	dPromptsWaiting = desc("prompts_waiting", "Prompts not yet running, by state: queued behind a thread's turn, or waiting for an agent slot.", "state")
	dTurns          = desc("turns_total", "Turns ended, by outcome (done, stopped, or the failure's cause).", "outcome")
	dPermissions    = desc("permission_decisions_total", "Agent permission requests answered, by outcome (allowed, rejected, cancelled) and by whom (user, rule, mode, timeout, cancelled, unanswered).", "outcome", "by")
	dElicitations   = desc("elicitations_total", "The agent's questions answered, by action (accept, decline, cancel) and by whom (user, timeout, cancelled, unanswered).", "action", "by")
	dOptionThreads  = desc("thread_option_states", "Threads whose agents' options, modes and commands the engine keeps.")
	dUsageThreads   = desc("threads_with_usage", "Threads whose agent's last token usage is kept for /status.")
	dWatchdog       = desc("watchdog_actions_total", "Watchdog actions, by action.", "action")
)

// Describe sends the descriptions of the engine's metrics.
func (e *Engine) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dTurnsRunning, dPromptsWaiting, dTurns, dPermissions, dElicitations, dOptionThreads, dUsageThreads, dWatchdog} {
		ch <- d
	}
}

// Collect sends the engine's metrics as Stats has them now: with the
// prompts waiting for a slot of the pool, and the agents it stopped for
// idleness among the watchdog's actions.
func (e *Engine) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	s := e.Stats()
	gauge(dTurnsRunning, s.Running)
	gauge(dPromptsWaiting, s.Queued, "queued")
	gauge(dPromptsWaiting, s.Pool.Waiting, "waiting_for_slot")
	for class, n := range s.Outcomes {
		counter(dTurns, n, class)
	}
	for class, n := range s.Permissions {
		counter(dPermissions, n, class.Outcome, class.Via)
	}
	for class, n := range s.Elicitations {
		counter(dElicitations, n, class.Outcome, class.Via)
	}
	gauge(dOptionThreads, s.OptionThreads)
	gauge(dUsageThreads, s.UsageThreads)
	counter(dWatchdog, s.ToolStuck, "cancel_stuck_tool")
	counter(dWatchdog, s.ForceEnded, "force_end")
	counter(dWatchdog, s.Pool.Stopped[pool.StopIdle], "stop_idle_agent")
}
