// Package metricstest scrapes a package's Prometheus collector as
// /metrics would, for its tests.
package metricstest

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// A Sample is one series scraped: its family's type and its value (a
// histogram's sample count).
type Sample struct {
	Type  dto.MetricType
	Value float64
}

// Scrape gathers c from a pedantic registry of its own (every metric
// collected must be one c describes, as described) and returns each
// series by its name and labels, as `name{a="x",b="y"}` with the labels
// sorted, or `name` without labels.
func Scrape(t testing.TB, c prometheus.Collector) map[string]Sample {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Sample{}
	for _, f := range families {
		for _, m := range f.Metric {
			labels := make([]string, 0, len(m.Label))
			for _, l := range m.Label {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			name := f.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			s := Sample{Type: f.GetType()}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				s.Value = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				s.Value = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				s.Value = float64(m.GetHistogram().GetSampleCount())
			default:
				s.Value = m.GetUntyped().GetValue()
			}
			out[name] = s
		}
	}
	return out
}

// Expect fails t for each series of want not scraped with that value, or
// not of that type.
func Expect(t testing.TB, got map[string]Sample, typ dto.MetricType, want map[string]float64) {
	t.Helper()
	for name, v := range want {
		s, ok := got[name]
		switch {
		case !ok:
			t.Errorf("%s not scraped", name)
		case s.Type != typ:
			t.Errorf("%s is a %s, want a %s", name, s.Type, typ)
		case s.Value != v:
			t.Errorf("%s = %v, want %v", name, s.Value, v)
		}
	}
}
