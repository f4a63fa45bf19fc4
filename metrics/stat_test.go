package metrics

import (
	"testing"

	"acpbroker/internal/metricstest"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// snap is a package's snapshot, for the test.
type snap struct {
	spawned uint64
	live    int
	stopped map[string]uint64
	waiting map[string]int
}

var snapStats = []Stat[snap]{
	Counter("test_spawns_total", "Spawns.", func(s snap) uint64 { return s.spawned }),
	Gauge("test_live", "Live.", func(s snap) int { return s.live }),
	CounterVec("test_stops_total", "Stops, by reason.", []string{"reason"}, func(s snap, series func(uint64, ...string)) {
		for r, n := range s.stopped {
			series(n, r)
		}
	}),
	GaugeVec("test_waiting", "Waiting, by state.", []string{"state"}, func(s snap, series func(int, ...string)) {
		for st, n := range s.waiting {
			series(n, st)
		}
	}),
}

// snapCollector collects snapStats from the snapshot it points at.
type snapCollector struct{ s *snap }

func (c snapCollector) Describe(ch chan<- *prometheus.Desc) { Describe(ch, snapStats) }
func (c snapCollector) Collect(ch chan<- prometheus.Metric) { Collect(ch, *c.s, snapStats) }

// Each row is described and collected once, named in the namespace, of
// its type, its labels as the row says; a count read again after one
// more event is one more.
func TestStat_RowsAreDescribedAndCollectedAsTheySay(t *testing.T) {
	s := &snap{spawned: 2, live: 1, stopped: map[string]uint64{"idle": 3}, waiting: map[string]int{"queued": 4, "slot": 0}}
	c := snapCollector{s}
	got := metricstest.Scrape(t, c)
	metricstest.Expect(t, got, dto.MetricType_COUNTER, map[string]float64{"acp_broker_test_spawns_total": 2, `acp_broker_test_stops_total{reason="idle"}`: 3})
	metricstest.Expect(t, got, dto.MetricType_GAUGE, map[string]float64{"acp_broker_test_live": 1, `acp_broker_test_waiting{state="queued"}`: 4, `acp_broker_test_waiting{state="slot"}`: 0})
	if len(got) != 5 {
		t.Errorf("%d series, want 5: %v", len(got), got)
	}
	s.spawned++
	s.live = 0
	got = metricstest.Scrape(t, c)
	metricstest.Expect(t, got, dto.MetricType_COUNTER, map[string]float64{"acp_broker_test_spawns_total": 3})
	metricstest.Expect(t, got, dto.MetricType_GAUGE, map[string]float64{"acp_broker_test_live": 0})

	m := New(Sources{})
	m.Register(c)
	for _, d := range m.Descriptions() {
		if d.Name == "acp_broker_test_stops_total" && (d.Help != "Stops, by reason." || len(d.Labels) != 1 || d.Labels[0] != "reason") {
			t.Errorf("described as %+v", d)
		}
	}
	if _, ok := m.Described()["acp_broker_test_waiting"]; !ok {
		t.Error("a row's metric is not described")
	}
}
