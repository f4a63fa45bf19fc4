package broker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"acpbroker/chat"
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
		AfterTurnFailed: b.branchNotPushed, Logger: b.log.With().Str("part", "cluster").Logger()})
	pc.Remote = b.remoteAgent
	pc.Placed, pc.PlacedOn = b.store.SetThreadHost, b.store.ThreadHost
	pc.HostLost = b.idleHostLost
	return nil
}

// idleHostLost tells a thread at once that the host of its idle agent
// was lost, and notes it told, so that its next agent's start does not
// say it again (see remoteAgent). It does not block: the pool calls it
// with its lock held.
func (b *Broker) idleHostLost(l pool.HostLoss) {
	if b.tell(l.Thread, chat.IdleHostLostText(l.Host, l.Shared)) {
		b.lostTold.told(l.Thread, l.Host)
	}
}

// branchNotPushed tells a thread that its host could not push its
// branch to the shared repository after a turn, and why (the host tells
// each failure once). It does not block.
func (b *Broker) branchNotPushed(thread, host, why string) {
	b.log.Warn().Str("thread", thread).Str("agent_host", host).Str("cause", why).Msg("the thread's branch was not pushed to the shared repository")
	b.tell(thread, chat.PushFailedText(host, why))
}

// tell posts text in thread, a ThreadID, without waiting, and reports
// whether it did: a thread of the API has no chat to tell (its next
// prompt's events say where its agent runs).
func (b *Broker) tell(thread, text string) bool {
	platform, th, _ := SplitThreadID(thread)
	srv := b.threads(platform)
	if srv == nil {
		return false
	}
	srv.Tell(th, "⚠️ "+text)
	return true
}

// maxLostTold bounds the threads remembered as told of their host's
// loss; past it, a thread is told again when its next agent starts.
const maxLostTold = 4096

// lostBook is the threads told that the agent host of their idle agent
// was lost, with that host, until their next agent starts.
type lostBook struct {
	mu       sync.Mutex
	byThread map[string]string
}

// told notes that thread was told host was lost.
func (l *lostBook) told(thread, host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byThread == nil {
		l.byThread = map[string]string{}
	}
	if len(l.byThread) < maxLostTold {
		l.byThread[thread] = host
	}
}

// take forgets thread and reports whether it was told host was lost.
func (l *lostBook) take(thread, host string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	was, ok := l.byThread[thread]
	delete(l.byThread, thread)
	return ok && was == host
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
	// A thread told of its host's loss when it happened is not told again.
	if told := b.lostTold.take(thread, was); was != "" && was != r.Where && !told {
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
