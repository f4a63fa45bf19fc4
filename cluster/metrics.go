package cluster

import "github.com/prometheus/client_golang/prometheus"

var (
	dHosts       = prometheus.NewDesc("acp_broker_cluster_hosts", "Agent hosts heard within the host timeout.", nil, nil)
	dHostsLost   = prometheus.NewDesc("acp_broker_cluster_hosts_lost_total", "Agent hosts lost for not being heard within the host timeout.", nil, nil)
	dAgents      = prometheus.NewDesc("acp_broker_cluster_agents", "Agents this broker runs on each agent host.", []string{"host"}, nil)
	dBytes       = prometheus.NewDesc("acp_broker_cluster_relayed_bytes_total", "Bytes of agents' streams relayed, by direction (sent or received), counted once each.", []string{"direction"}, nil)
	dMessages    = prometheus.NewDesc("acp_broker_cluster_relayed_messages_total", "Chunks of agents' streams relayed, by direction (sent or received), counted once each.", []string{"direction"}, nil)
	dRetransmits = prometheus.NewDesc("acp_broker_cluster_retransmits_total", "Chunks of agents' stdin sent again for want of an acknowledgement.", nil, nil)
	dDropped     = prometheus.NewDesc("acp_broker_cluster_dropped_total", "Chunks of agents' stdout dropped as late or duplicate.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *Client) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dHosts, dHostsLost, dAgents, dBytes, dMessages, dRetransmits, dDropped} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Client) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	alive := 0
	per := make(map[string]int, len(c.hosts))
	for name, h := range c.hosts {
		if !h.lost {
			alive++
			per[name] = 0
		}
	}
	for _, a := range c.agents {
		per[a.host]++
	}
	lost := c.lostTotal
	c.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(dHosts, prometheus.GaugeValue, float64(alive))
	ch <- prometheus.MustNewConstMetric(dHostsLost, prometheus.CounterValue, float64(lost))
	for host, n := range per {
		ch <- prometheus.MustNewConstMetric(dAgents, prometheus.GaugeValue, float64(n), host)
	}
	s := &c.stats
	ch <- prometheus.MustNewConstMetric(dBytes, prometheus.CounterValue, float64(s.bytesSent.Load()), "sent")
	ch <- prometheus.MustNewConstMetric(dBytes, prometheus.CounterValue, float64(s.bytesRecv.Load()), "received")
	ch <- prometheus.MustNewConstMetric(dMessages, prometheus.CounterValue, float64(s.msgsSent.Load()), "sent")
	ch <- prometheus.MustNewConstMetric(dMessages, prometheus.CounterValue, float64(s.msgsRecv.Load()), "received")
	ch <- prometheus.MustNewConstMetric(dRetransmits, prometheus.CounterValue, float64(s.retransmits.Load()))
	ch <- prometheus.MustNewConstMetric(dDropped, prometheus.CounterValue, float64(s.dropped.Load()))
}

var _ prometheus.Collector = (*Client)(nil)
