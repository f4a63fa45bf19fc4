package broker

import (
	"context"
	"fmt"
	"time"

	"acpbroker/cluster"
	"acpbroker/config"
	"acpbroker/pool"
)

// joinTimeout bounds joining the cluster at a start: NATS answering.
const joinTimeout = 30 * time.Second

// clustered reports whether cfg runs agents on agent hosts.
func clustered(cfg *config.Config) bool { return cfg.Cluster.URL != "" || cfg.Cluster.Embedded }

// joinCluster starts the embedded NATS server if cfg asks for one, joins
// the cluster and has the pool start every agent on a host.
func (b *Broker) joinCluster(ctx context.Context, pc *pool.Config) error {
	cfg := b.cfg
	opts := clusterOptions(cfg, b.log)
	if cfg.Cluster.Embedded {
		// With a certificate, the server speaks TLS with it (and checks the
		// members' against tls_ca): the broker is a member too.
		e, err := cluster.StartEmbedded(cluster.EmbeddedOptions{Listen: cfg.Cluster.Listen, User: cfg.Cluster.User, Password: cfg.Cluster.Password,
			TLSCert: cfg.Cluster.TLSCert, TLSKey: cfg.Cluster.TLSKey, TLSCA: cfg.Cluster.TLSCA,
			Logger: b.log.With().Str("part", "nats").Logger()})
		if err != nil {
			return fmt.Errorf("cluster.embedded: %w", err)
		}
		b.embedded = e
		if opts.URL == "" {
			opts.URL = e.URL()
		}
		b.log.Info().Str("url", e.URL()).Msg("serving the cluster's NATS")
	}
	nc, err := cluster.Connect(ctx, opts)
	if err != nil {
		return err
	}
	b.nc = nc
	b.cluster = cluster.NewClient(nc, cluster.ClientOptions{HostTimeout: cfg.Cluster.HostTimeout, Broker: opts.Name,
		Logger: b.log.With().Str("part", "cluster").Logger()})
	pc.Remote = b.remoteAgent
	pc.Placed, pc.PlacedOn = b.store.SetThreadHost, b.store.ThreadHost
	return nil
}

// remoteAgent starts thread's agent of prof on a host whose labels match
// the profile's hosts, as the configuration says now.
func (b *Broker) remoteAgent(ctx context.Context, thread string, prof *pool.Profile, onWait func()) (pool.Remote, error) {
	var selector []string
	if p := b.live.Load().Profiles[prof.Name]; p != nil {
		selector = p.Hosts
	}
	was := b.store.ThreadHost(thread)
	r, err := b.cluster.StartPreferring(ctx, thread, prof.Name, selector, was, onWait)
	if err != nil {
		return r, err
	}
	if was != "" && was != r.Where {
		r.LostHost = was
	}
	return r, nil
}

// leaveCluster closes the broker's side of the cluster, after its agents
// have stopped.
func (b *Broker) leaveCluster() {
	if b.cluster != nil {
		b.cluster.Close()
	}
	if b.nc != nil {
		b.nc.Close()
	}
	if b.embedded != nil {
		b.embedded.Shutdown()
	}
}
