package netproxy

import "github.com/prometheus/client_golang/prometheus"

var _ prometheus.Collector = (*Proxy)(nil)

var (
	dConnections = prometheus.NewDesc("acp_broker_network_connections_total",
		"Connections agents made through their network proxy that were allowed, by profile.", []string{"profile"}, nil)
	dRefused = prometheus.NewDesc("acp_broker_network_refused_total",
		"Connections agents made through their network proxy that were refused (a host or address not allowed, too many open), by profile.", []string{"profile"}, nil)
	dOpen = prometheus.NewDesc("acp_broker_network_open_connections",
		"Tunnels and requests open through the agents' network proxies now.", nil, nil)
)

// Describe sends the descriptions of the proxy's metrics.
func (p *Proxy) Describe(ch chan<- *prometheus.Desc) {
	ch <- dConnections
	ch <- dRefused
	ch <- dOpen
}

// Collect sends the proxy's metrics as they are now.
func (p *Proxy) Collect(ch chan<- prometheus.Metric) {
	p.mu.Lock()
	type row struct {
		profile          string
		allowed, refused uint64
	}
	rows := make([]row, 0, len(p.profiles))
	for name, c := range p.profiles {
		rows = append(rows, row{name, c.allowed.Load(), c.refused.Load()})
	}
	p.mu.Unlock()
	for _, r := range rows {
		ch <- prometheus.MustNewConstMetric(dConnections, prometheus.CounterValue, float64(r.allowed), r.profile)
		ch <- prometheus.MustNewConstMetric(dRefused, prometheus.CounterValue, float64(r.refused), r.profile)
	}
	ch <- prometheus.MustNewConstMetric(dOpen, prometheus.GaugeValue, float64(p.open.Load()))
}
