package metrics

import "github.com/prometheus/client_golang/prometheus"

// A Stat is one metric read from a snapshot S of a package's counters:
// its description, its type and how to read its series from S. A
// package lists its Stats once, a row each, and its collector's Describe
// and Collect hand them to Describe and Collect.
type Stat[S any] struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
	read func(s S, series func(v float64, labels ...string))
}

// Counter is a counter without labels, v its value in a snapshot. Its
// name is given without the broker's namespace: "agent_spawns_total"
// is exported as acp_broker_agent_spawns_total.
func Counter[S any](name, help string, v func(S) uint64) Stat[S] {
	return Stat[S]{desc(name, help), prometheus.CounterValue, func(s S, series func(float64, ...string)) { series(float64(v(s))) }}
}

// Gauge is a gauge without labels.
func Gauge[S any](name, help string, v func(S) int) Stat[S] {
	return Stat[S]{desc(name, help), prometheus.GaugeValue, func(s S, series func(float64, ...string)) { series(float64(v(s))) }}
}

// CounterVec is a counter with labels: each sends its series, each value
// with its labels' values in the order of labels.
func CounterVec[S any](name, help string, labels []string, each func(s S, series func(v uint64, labels ...string))) Stat[S] {
	return Stat[S]{desc(name, help, labels...), prometheus.CounterValue, func(s S, series func(float64, ...string)) {
		each(s, func(v uint64, labels ...string) { series(float64(v), labels...) })
	}}
}

// GaugeVec is a gauge with labels.
func GaugeVec[S any](name, help string, labels []string, each func(s S, series func(v int, labels ...string))) Stat[S] {
	return Stat[S]{desc(name, help, labels...), prometheus.GaugeValue, func(s S, series func(float64, ...string)) {
		each(s, func(v int, labels ...string) { series(float64(v), labels...) })
	}}
}

// Describe sends the descriptions of stats.
func Describe[S any](ch chan<- *prometheus.Desc, stats []Stat[S]) {
	for _, st := range stats {
		ch <- st.desc
	}
}

// Collect sends the series of stats, read from s.
func Collect[S any](ch chan<- prometheus.Metric, s S, stats []Stat[S]) {
	for _, st := range stats {
		st.read(s, func(v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(st.desc, st.typ, v, labels...)
		})
	}
}
