package pool_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/internal/metricstest"
	"acpbroker/pool"

	dto "github.com/prometheus/client_model/go"
)

// Each agent started is counted once; what its connection holds (a
// prompt awaiting an answer) is a gauge while it runs, back to zero once
// the pool is shut down, and the counters stay.
func TestMetrics_GaugesReturnToZeroAtShutdownAndCountersStay(t *testing.T) {
	p := newPool(t, pool.Config{})
	a := acquire(t, p, "a")
	b := acquire(t, p, "b")
	p.Release(b, false)
	if _, err := a.Conn.Prompt(context.Background(), a.SessionID, []acp.ContentBlock{acp.TextBlock("hang")}); err != nil {
		t.Fatal(err)
	}
	got := metricstest.Scrape(t, p)
	metricstest.Expect(t, got, dto.MetricType_GAUGE, map[string]float64{
		"acp_broker_agents_live": 2, "acp_broker_agents_max": 4, `acp_broker_profile_agents_live{profile="default"}`: 2,
		"acp_broker_acp_pending_requests": 1,
	})
	metricstest.Expect(t, got, dto.MetricType_COUNTER, map[string]float64{"acp_broker_agent_spawns_total": 2, "acp_broker_agent_spawn_failures_total": 0})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.Shutdown(ctx)
	got = metricstest.Scrape(t, p)
	metricstest.Expect(t, got, dto.MetricType_GAUGE, map[string]float64{
		"acp_broker_agents_live": 0, "acp_broker_agents_busy": 0, "acp_broker_agents_starting": 0, `acp_broker_profile_agents_live{profile="default"}`: 0,
		"acp_broker_acp_pending_requests": 0, "acp_broker_acp_pending_permission_requests": 0, "acp_broker_acp_agent_requests_in_flight": 0,
		"acp_broker_terminals_open": 0,
	})
	metricstest.Expect(t, got, dto.MetricType_COUNTER, map[string]float64{"acp_broker_agent_spawns_total": 2})
	stops := 0.0
	for name, s := range got {
		if strings.HasPrefix(name, "acp_broker_agent_stops_total{") {
			stops += s.Value
		}
	}
	if stops != 2 {
		t.Errorf("%v agents counted stopped, want 2: %v", stops, got)
	}
}

// An agent stopped leaves the pool its counts and nothing it held: a
// turn's subscription still open when it stops is no longer counted.
func TestStats_AStoppedAgentLeavesItsCountsAndNothingItHeld(t *testing.T) {
	p := newPool(t, pool.Config{})
	a := acquire(t, p, "a")
	prompt(t, a, "junk")
	if _, err := a.Conn.Subscribe(a.SessionID, nil); err != nil {
		t.Fatal(err)
	}
	before := p.Stats().Conn
	if before.Subscribers != 1 || before.JunkLines == 0 {
		t.Fatalf("before the stop: %d subscribers, %d junk lines; want 1 and some", before.Subscribers, before.JunkLines)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.Shutdown(ctx)
	if after := p.Stats().Conn; after.Subscribers != 0 || after.JunkLines != before.JunkLines {
		t.Errorf("after the stop: %d subscribers, %d junk lines; want 0 and %d", after.Subscribers, after.JunkLines, before.JunkLines)
	}
}

// Each profile's agents are counted under its name, and its bound only
// when it has one of its own.
func TestMetrics_ProfilesCountedUnderTheirNames(t *testing.T) {
	p := profilePool(t, 4, "claude", map[string]*pool.Profile{"claude": {MaxSessions: 2}, "codex": {}})
	a := acquireProfile(t, p, "a", "claude")
	defer p.Release(a, false)
	got := metricstest.Scrape(t, p)
	metricstest.Expect(t, got, dto.MetricType_GAUGE, map[string]float64{
		`acp_broker_profile_agents_live{profile="claude"}`: 1, `acp_broker_profile_agents_live{profile="codex"}`: 0,
		`acp_broker_profile_agents_max{profile="claude"}`: 2, "acp_broker_agents_max": 4,
	})
	if _, ok := got[`acp_broker_profile_agents_max{profile="codex"}`]; ok {
		t.Error("a profile without a bound of its own exports one")
	}
}

// An agent host's bare agents show in its metrics as live agents, their
// starts and their stops.
func TestMetrics_BareAgentsAreCounted(t *testing.T) {
	p := newPool(t, pool.Config{})
	b := bare(t, p, "a")
	metricstest.Expect(t, metricstest.Scrape(t, p), dto.MetricType_GAUGE, map[string]float64{
		"acp_broker_agents_live": 1, `acp_broker_profile_agents_live{profile="default"}`: 1,
	})
	p.ReleaseBare(b)
	got := metricstest.Scrape(t, p)
	metricstest.Expect(t, got, dto.MetricType_GAUGE, map[string]float64{"acp_broker_agents_live": 0})
	metricstest.Expect(t, got, dto.MetricType_COUNTER, map[string]float64{
		"acp_broker_agent_spawns_total": 1, `acp_broker_agent_stops_total{reason="released"}`: 1,
	})
}
