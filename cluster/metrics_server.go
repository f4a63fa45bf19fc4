package cluster

import "github.com/prometheus/client_golang/prometheus"

var (
	dHostAgents      = prometheus.NewDesc("acp_broker_host_agents", "Agents this agent host runs for brokers.", nil, nil)
	dHostCapacity    = prometheus.NewDesc("acp_broker_host_capacity", "Agents this agent host may run.", nil, nil)
	dHostBytes       = prometheus.NewDesc("acp_broker_host_relayed_bytes_total", "Bytes of agents' streams relayed by this host, by direction (sent or received), counted once each.", []string{"direction"}, nil)
	dHostRetransmits = prometheus.NewDesc("acp_broker_host_retransmits_total", "Chunks of agents' stdout sent again for want of an acknowledgement.", nil, nil)
	dHostDropped     = prometheus.NewDesc("acp_broker_host_dropped_total", "Chunks of agents' stdin dropped as late or duplicate.", nil, nil)
)

// Describe implements prometheus.Collector.
func (s *Server) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dHostAgents, dHostCapacity, dHostBytes, dHostRetransmits, dHostDropped} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (s *Server) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	running := s.runningLocked()
	s.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(dHostAgents, prometheus.GaugeValue, float64(running))
	ch <- prometheus.MustNewConstMetric(dHostCapacity, prometheus.GaugeValue, float64(s.o.Capacity))
	ch <- prometheus.MustNewConstMetric(dHostBytes, prometheus.CounterValue, float64(s.stats.bytesSent.Load()), "sent")
	ch <- prometheus.MustNewConstMetric(dHostBytes, prometheus.CounterValue, float64(s.stats.bytesRecv.Load()), "received")
	ch <- prometheus.MustNewConstMetric(dHostRetransmits, prometheus.CounterValue, float64(s.stats.retransmits.Load()))
	ch <- prometheus.MustNewConstMetric(dHostDropped, prometheus.CounterValue, float64(s.stats.dropped.Load()))
}

var _ prometheus.Collector = (*Server)(nil)
