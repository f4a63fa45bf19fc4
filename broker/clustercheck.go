package broker

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"acpbroker/config"
	"acpbroker/netproxy"
	"acpbroker/pool"
)

// checkCluster refuses, with [cluster], the agents that could reach the
// cluster's NATS: there, an agent could speak for its host or another
// thread's agent. Agents must run in the bubblewrap sandbox on a network
// of their own (proxy or none), and no profile's allow_hosts may name a
// NATS address of the cluster.
func checkCluster(cfg *config.Config) []error {
	if !cfg.Cluster.Enabled() {
		return nil
	}
	var problems []error
	if cfg.Agent.Sandbox != "bwrap" {
		problems = append(problems, fmt.Errorf("agent.sandbox = %q: with [cluster], agents run in the bubblewrap sandbox, since unconfined they could reach the cluster's NATS", cfg.Agent.Sandbox))
	}
	addrs := natsAddrs(cfg)
	for _, name := range sortedKeys(cfg.Profiles) {
		p := cfg.Profiles[name]
		if p.Network == pool.NetworkHost {
			problems = append(problems, fmt.Errorf("%s = %q: with [cluster], agents have a network of their own (proxy or none), since on the host's they could reach the cluster's NATS", networkKey(cfg, p), p.Network))
			continue
		}
		allow, err := netproxy.ParseAllow(p.AllowHosts)
		if err != nil {
			continue // said where the keys are read
		}
		for _, a := range addrs {
			host, port, _ := net.SplitHostPort(a)
			n, _ := strconv.Atoi(port)
			if allow.Permits(host, n) {
				problems = append(problems, fmt.Errorf("%s lets its agents reach %s, the cluster's NATS: take it out", allowKey(cfg, p), a))
			}
		}
	}
	return problems
}

// networkKey is the key that set p's network.
func networkKey(cfg *config.Config, p *config.Profile) string {
	if k := "agents." + p.Name + ".network"; cfg.Written(k) {
		return k
	}
	return "agent.network"
}

// natsAddrs are the host:port addresses of the cluster's NATS: those of
// cluster.url, and the embedded server's.
func natsAddrs(cfg *config.Config) []string {
	var out []string
	for _, u := range strings.Split(cfg.Cluster.URL, ",") {
		p, err := url.Parse(strings.TrimSpace(u))
		if err != nil || p.Host == "" {
			continue
		}
		host, port := p.Hostname(), p.Port()
		if port == "" {
			port = "4222"
		}
		out = append(out, net.JoinHostPort(host, port))
	}
	if cfg.Cluster.Embedded && cfg.Cluster.Listen != "" {
		out = append(out, cfg.Cluster.Listen)
	}
	return out
}
