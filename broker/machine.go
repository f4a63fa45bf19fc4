package broker

import (
	"fmt"

	"acpbroker/acp"
	"acpbroker/acp/host"
	"acpbroker/cgroup"
	"acpbroker/config"
	"acpbroker/internal/redact"
	"acpbroker/netproxy"
	"acpbroker/pool"
	"acpbroker/store"
	"acpbroker/workspace"
)

// machine is what runs agents on this machine, for a broker and an agent
// host alike: the state store, the profiles as the pool takes them, the
// secret values masked, the control groups, the network proxy and the
// sandbox.
type machine struct {
	store      *store.Store
	profiles   map[string]*pool.Profile
	redact     *redact.Redactor
	cgroups    *cgroup.Manager
	proxy      *netproxy.Proxy
	sandbox    pool.Sandbox
	gitConfine workspace.Confiner
}

// openMachine opens the state store, ends the agent processes an earlier
// run left (their pids are in the store), and makes the rest from cfg;
// the programs agents start are found where agentsHere (see complete).
// On error what it returns holds what was opened, for the caller to close.
func openMachine(cfg *config.Config, opts Options, agentsHere bool) (*machine, error) {
	log := opts.Logger
	m := &machine{}
	var err error
	m.store, err = store.Open(store.Options{Dir: cfg.State.Dir, Retention: cfg.State.Retention, Logger: log, RenameThread: legacyThread})
	if err != nil {
		return m, err
	}
	if left, err := m.store.Leftovers(); err != nil {
		log.Warn().Err(err).Msg("could not read the agents an earlier run left")
	} else if len(left) > 0 {
		list := make([]pool.Leftover, len(left))
		for i, a := range left {
			list[i] = pool.Leftover{PID: a.PID, StartTicks: a.StartTicks}
		}
		pool.KillLeftovers(list, log)
	}
	if err := complete(cfg, opts.Environ, agentsHere); err != nil {
		return m, fmt.Errorf("config: %w", err)
	}
	m.gitConfine = gitConfiner(cfg)
	agents, err := buildProfiles(cfg, opts.Environ, m.store.WorktreeMade, m.gitConfine, log)
	if err != nil {
		return m, fmt.Errorf("config: %w", err)
	}
	m.profiles = agents.profiles
	m.redact = redact.New(append(agents.secrets, cfg.Secrets()...)...)
	m.cgroups = openCgroups(cfg, log)
	if m.proxy, err = openProxy(cfg, log); err != nil {
		return m, err
	}
	m.sandbox = sandboxFor(cfg)
	return m, nil
}

// poolConfig is the configuration of the pool of agents this machine
// runs, as cfg and opts say.
func (m *machine) poolConfig(cfg *config.Config, opts Options) pool.Config {
	return pool.Config{
		Sandbox:        m.sandbox,
		Proxy:          m.proxy,
		NetDir:         netDir(cfg),
		RunAs:          cfg.Agent.RunAs,
		Cgroups:        m.cgroups,
		Redact:         m.redact,
		Profiles:       m.profiles,
		DefaultProfile: cfg.DefaultProfile,
		MaxSessions:    cfg.Pool.MaxSessions,
		IdleTimeout:    cfg.Pool.IdleTimeout,
		OneShot:        apiOwnThread,
		ExitGrace:      cfg.Agent.ExitGrace,
		ThreadName:     threadName,
		Sessions:       m.store,
		Registry:       m.store,
		Conn: acp.Options{
			MaxLineBytes:     cfg.Agent.MaxLineBytes,
			MaxAgentRequests: cfg.Agent.MaxRequests,
			UpdateQueue:      cfg.Turn.UpdateQueue,
			ClientInfo:       acp.Implementation{Name: "acp-broker", Version: opts.Version},
		},
		Host: host.Options{
			MaxReadBytes:     cfg.Agent.MaxReadBytes,
			MaxWriteBytes:    cfg.Agent.MaxWriteBytes,
			MaxTerminals:     cfg.Agent.MaxTerminals,
			MaxTerminalBytes: cfg.Agent.MaxTerminalBytes,
		},
		Logger: opts.Logger,
	}
}
