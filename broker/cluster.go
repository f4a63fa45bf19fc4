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

// takeUp takes up an agent an earlier run of this broker left running on
// a host (see cluster.Client.Adopt): an idle thread's agent is its
// thread's again, in its session, and its next message goes to it; the
// others (a turn ran, the profile changed, the thread was reset…) are let
// go.
func (b *Broker) takeUp(ad cluster.Adoptee) {
	a, err := b.pool.Adopt(ad.Remote, ad.Kept)
	if err != nil {
		b.log.Info().Err(err).Str("thread", ad.Thread).Str("agent_host", ad.Remote.Where).Msg("agent of an earlier run let go")
		ad.LetGo()
		return
	}
	b.log.Info().Str("thread", a.Thread).Str("agent_host", a.Where).Int("pid", a.Proc.PID()).Msg("agent of an earlier run carries on")
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
