package adapter

import (
	"testing"
	"time"

	"acpbroker/internal/metricstest"
	"acpbroker/pool"

	dto "github.com/prometheus/client_model/go"
)

// A running turn and one queued behind it are gauges until they end; each
// turn ended is counted once, under its outcome.
func TestMetrics_TurnsCountedOnceAndGaugesBackToZero(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{})
	first := r.prompt("t", "hang")
	first.waitWorking(t)
	second := r.prompt("t", "stream 1")
	got := metricstest.Scrape(t, r.engine)
	metricstest.Expect(t, got, dto.MetricType_GAUGE, map[string]float64{
		"acp_broker_turns_running": 1, `acp_broker_prompts_waiting{state="queued"}`: 1, `acp_broker_prompts_waiting{state="waiting_for_slot"}`: 0,
	})
	r.engine.Cancel("t", CancelledBy("tester"))
	o1 := first.wait(t, 20*time.Second)
	o2 := second.wait(t, 20*time.Second)
	got = metricstest.Scrape(t, r.engine)
	metricstest.Expect(t, got, dto.MetricType_GAUGE, map[string]float64{"acp_broker_turns_running": 0, `acp_broker_prompts_waiting{state="queued"}`: 0})
	want := map[string]float64{`acp_broker_turns_total{outcome="` + o1.Class() + `"}`: 1, `acp_broker_turns_total{outcome="` + o2.Class() + `"}`: 1}
	if o1.Class() == o2.Class() {
		t.Fatalf("both turns ended %s", o1.Class())
	}
	metricstest.Expect(t, got, dto.MetricType_COUNTER, want)
	metricstest.Expect(t, got, dto.MetricType_COUNTER, map[string]float64{
		`acp_broker_watchdog_actions_total{action="force_end"}`: 0, `acp_broker_watchdog_actions_total{action="stop_idle_agent"}`: 0,
	})
}

// Each turn ended is observed once in the turns' durations, under its
// outcome; an answer's first text once in the time to the first chunk.
func TestMetrics_TimingsObservedOncePerTurn(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{})
	for _, text := range []string{"stream 2", "stream 1"} {
		if o := r.prompt("t", text).wait(t, 20*time.Second); o.Err != nil {
			t.Fatalf("%s: %v", text, o.Err)
		}
	}
	got := metricstest.Scrape(t, r.engine)
	metricstest.Expect(t, got, dto.MetricType_HISTOGRAM, map[string]float64{
		`acp_broker_turn_duration_seconds{outcome="done"}`: 2, "acp_broker_turn_first_chunk_seconds": 2,
	})
}
