package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"acpbroker/cluster"
	"acpbroker/config"
	"acpbroker/internal/redact"
	"acpbroker/metrics"
	"acpbroker/pool"
	"acpbroker/workspace"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// Host is an agent host: it runs the agents the brokers of its NATS
// system place on it, each exactly as a broker runs its own (the
// profiles, the sandbox, the network proxy, the control groups and the
// workspaces of its own configuration), and serves their files and
// terminals from its own disk. OpenHost makes it, Serve runs it, Stop
// ends it.
type Host struct {
	cfg     *config.Config
	log     zerolog.Logger
	notify  *notifier
	m       *machine
	pool    *pool.Pool
	nc      *nats.Conn
	server  *cluster.Server
	metrics *metrics.Metrics
	http    *metrics.Server
}

// OpenHost opens what runs agents on this machine and joins the cluster
// of cfg's [cluster], where it offers them. On error what was started is
// stopped again.
func OpenHost(ctx context.Context, cfg *config.Config, opts Options) (h *Host, err error) {
	if cfg.Cluster.URL == "" {
		return nil, errors.New("config: cluster.url: an agent host needs the cluster to join")
	}
	h = &Host{cfg: cfg, log: opts.Logger, notify: newNotifier(envLookup(opts.Environ), os.Getpid())}
	defer func() {
		if err != nil {
			h.Stop(context.Background())
			h = nil
		}
	}()
	h.m, err = openMachine(cfg, opts, true)
	if err != nil {
		return h, err
	}
	pc := h.m.poolConfig(cfg, opts)
	pc.MaxSessions = hostCapacity(cfg)
	pc.OneShot = nil // a host's agents are stopped when their broker lets them go
	for _, p := range pc.Profiles {
		// A host's agents are started for a broker, which keeps the warm
		// ones (placed on its hosts): the host's own would speak ACP to
		// no one and hold its slots.
		p.Warm = 0
	}
	if opts.Pool != nil {
		opts.Pool(&pc)
	}
	h.pool = pool.New(pc)
	h.nc, err = cluster.Connect(ctx, clusterOptions(cfg, opts.Logger))
	if err != nil {
		return h, err
	}
	h.server, err = cluster.Serve(h.nc, hostStarter{h.pool, h.m.redact}, cluster.ServerOptions{
		Name:     clusterName(cfg),
		Labels:   cfg.Host.Labels,
		Capacity: pc.MaxSessions,
		Profiles: sortedKeys(cfg.Profiles),
		Logger:   opts.Logger.With().Str("part", "cluster").Logger(),
	})
	if err != nil {
		return h, err
	}
	h.metrics = metrics.New(metrics.Sources{Version: opts.Version})
	h.metrics.Register(h.pool)
	h.metrics.Register(h.server)
	if h.m.proxy != nil {
		h.metrics.Register(h.m.proxy)
	}
	if cfg.HTTP.Listen != "" {
		if h.http, err = metrics.Listen(cfg.HTTP.Listen, h.metrics, nil, nil, opts.Logger); err != nil {
			return h, err
		}
		opts.Logger.Info().Str("addr", h.http.Addr()).Msg("serving /metrics, /healthz and /readyz")
	}
	return h, nil
}

// Serve tells systemd the host is ready and runs until ctx ends.
func (h *Host) Serve(ctx context.Context) error {
	h.log.Info().Str("name", clusterName(h.cfg)).Strs("labels", h.cfg.Host.Labels).Int("capacity", h.pool.Config().MaxSessions).
		Str("cluster", h.nc.ConnectedUrlRedacted()).Msg("agent host started")
	if err := h.notify.notify("READY=1", "STATUS=running agents"); err != nil {
		h.log.Warn().Err(err).Msg("systemd notification failed")
	}
	<-ctx.Done()
	return nil
}

// Stop stops every agent the host runs, each within ctx's deadline, then
// leaves the cluster and closes the rest.
func (h *Host) Stop(ctx context.Context) {
	if err := h.notify.notify("STOPPING=1"); err != nil {
		h.log.Warn().Err(err).Msg("systemd notification failed")
	}
	if h.server != nil {
		h.server.Close(ctx)
	}
	if h.pool != nil {
		h.pool.Shutdown(ctx)
	}
	if h.nc != nil {
		h.nc.Close()
	}
	var wg sync.WaitGroup
	if h.http != nil {
		wg.Go(func() { h.http.Close(ctx) })
	}
	wg.Wait()
	if m := h.m; m != nil {
		if m.proxy != nil {
			m.proxy.Close()
		}
		if m.cgroups != nil {
			m.cgroups.Close()
		}
		if m.store != nil {
			m.store.Close()
		}
	}
}

// Kill stops every agent at once: for a host about to exit without a
// shutdown (a second signal).
func (h *Host) Kill() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h.pool.Shutdown(ctx)
}

// Pool is the host's pool of agents.
func (h *Host) Pool() *pool.Pool { return h.pool }

// hostStarter starts a broker's agents in the host's pool; redact
// masks the secrets of the host's configuration in what it tells.
type hostStarter struct {
	pool   *pool.Pool
	redact *redact.Redactor
}

// afterTurnError is a failure after a thread's turn, said with the
// host's secrets masked (msg), of the kind its broker is told once.
type afterTurnError struct {
	err error
	msg string
}

var _ cluster.FailureKinder = afterTurnError{}

func (e afterTurnError) Error() string { return e.msg }
func (e afterTurnError) Unwrap() error { return e.err }

// FailureKind is the workspace's kind of the failure (a push refused,
// the shared repository unusable), else its words.
func (e afterTurnError) FailureKind() string {
	for _, kind := range []error{workspace.ErrPushRejected, workspace.ErrSharedRepo} {
		if errors.Is(e.err, kind) {
			return kind.Error()
		}
	}
	return e.msg
}

func (s hostStarter) Start(ctx context.Context, thread, profile string) (cluster.Started, error) {
	a, err := s.pool.Bare(ctx, thread, profile)
	if err != nil {
		return cluster.Started{}, err
	}
	st := cluster.Started{Proc: a.Proc, Host: a.Host, Dir: a.Dir, Release: func() { s.pool.ReleaseBare(a) }, Usage: a.Usage, MCPServers: a.MCPServers}
	if a.HasAfterTurn() {
		// Its broker is told that the thread's branch is pushed, and
		// why a push failed, without the shared repository's token.
		st.AfterTurn = func(ctx context.Context) error {
			if err := a.AfterTurn(ctx); err != nil {
				return afterTurnError{err, s.redact.String(err.Error())}
			}
			return nil
		}
	}
	return st, nil
}

// hostCapacity is how many agents a host runs at most: host.capacity,
// else pool.max_sessions.
func hostCapacity(cfg *config.Config) int {
	if cfg.Host.Capacity > 0 {
		return cfg.Host.Capacity
	}
	return cfg.Pool.MaxSessions
}

// clusterName is this member's name in the cluster: cluster.name, else
// the machine's.
func clusterName(cfg *config.Config) string {
	if cfg.Cluster.Name != "" {
		return cfg.Cluster.Name
	}
	name, err := os.Hostname()
	if err != nil {
		return fmt.Sprintf("pid-%d", os.Getpid())
	}
	return name
}

// clusterOptions are how a broker or a host joins cfg's cluster.
func clusterOptions(cfg *config.Config, log zerolog.Logger) cluster.Options {
	c := cfg.Cluster
	return cluster.Options{URL: c.URL, Name: clusterName(cfg), User: c.User, Password: c.Password, NKeySeedFile: c.NKeySeedFile,
		TLSCA: c.TLSCA, TLSCert: c.TLSCert, TLSKey: c.TLSKey, StaleAfter: c.HostTimeout, Logger: log.With().Str("part", "cluster").Logger()}
}
