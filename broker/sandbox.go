package broker

import (
	"time"

	"acpbroker/cgroup"
	"acpbroker/config"
	"acpbroker/pool"

	"github.com/rs/zerolog"
)

// openCgroups readies the control groups agents run in, under the
// broker's own; where it cannot, it says so and agents run without
// resource limits. Agents started through a launcher get none: their
// limits are the container's or the pod's.
func openCgroups(cfg *config.Config, log zerolog.Logger) *cgroup.Manager {
	if cfg.Agent.Sandbox == "launcher" {
		log.Info().Msg("agents started through a launcher get no resource limits from the broker (memory_max, pids_max): the container's or pod's own apply")
		return nil
	}
	m, err := cgroup.Open(cgroup.Options{Name: cgroup.NameFor(cfg.State.Dir), Logger: log})
	if err != nil {
		ev := log.Info()
		if cfg.Limited() {
			ev = log.Warn()
		}
		ev.Err(err).Msg("agents run without resource limits (memory_max, pids_max)")
		return nil
	}
	log.Info().Str("cgroups", m.String()).Strs("dirs", m.Dirs()).Msg("each agent runs in a control group of its own")
	return m
}

// sandboxCheckTimeout bounds the trial run of the sandbox at start.
const sandboxCheckTimeout = 10 * time.Second

// sandboxFor is the agents' sandbox as configured. What the broker keeps
// out of the agents' sight wherever a path shown to them holds it: its
// state, its configuration and token files and the directories they are
// in (config.CheckSandbox refuses what hiding cannot keep).
func sandboxFor(cfg *config.Config) pool.Sandbox {
	switch cfg.Agent.Sandbox {
	case "launcher":
		return pool.Sandbox{Launcher: cfg.Agent.Launcher, LauncherStop: cfg.Agent.LauncherStop}
	case "bwrap":
	default:
		return pool.Sandbox{}
	}
	return pool.Sandbox{Bwrap: "bwrap",
		NoNetwork: !cfg.Agent.SandboxNetwork, Hide: cfg.Hidden()}
}
