package broker

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"acpbroker/cgroup"
	"acpbroker/config"
	"acpbroker/netproxy"
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
// in (checkSandbox refuses what hiding cannot keep).
func sandboxFor(cfg *config.Config) pool.Sandbox {
	switch cfg.Agent.Sandbox {
	case "launcher":
		return pool.Sandbox{Launcher: cfg.Agent.Launcher, LauncherStop: cfg.Agent.LauncherStop}
	case "bwrap":
	default:
		return pool.Sandbox{}
	}
	return pool.Sandbox{Bwrap: "bwrap", NoNetwork: ownNetwork(cfg), Hide: hidden(cfg)}
}

// ownNetwork reports whether some profile's agents get a network of
// their own (agent.network "proxy" or "none"): the sandbox's trial run
// then tries one too.
func ownNetwork(cfg *config.Config) bool {
	for _, p := range cfg.Profiles {
		if p.Network != pool.NetworkHost {
			return true
		}
	}
	return false
}

// openProxy starts the proxy that is the only way out of the sandboxed
// agents of every profile with agent.network = "proxy", with the
// directory their sockets go in (see netDir): nil when no profile's
// agents go through it.
func openProxy(cfg *config.Config, log zerolog.Logger) (*netproxy.Proxy, error) {
	used := false
	for _, p := range cfg.Profiles {
		used = used || p.Network == pool.NetworkProxy
	}
	if !used || cfg.Agent.Sandbox == "launcher" {
		return nil, nil
	}
	if err := makeNetDir(netDir(cfg)); err != nil {
		return nil, fmt.Errorf("agent network: %w", err)
	}
	return netproxy.New(netproxy.Options{Logger: log.With().Str("part", "proxy").Logger()}), nil
}

// netDir is where each agent behind the proxy gets a directory with the
// socket the proxy serves it on. Bubblewrap, as the agents' user, must
// reach it, so it cannot be in the state directory: it is in the
// temporary directory (the service's own, under systemd's PrivateTmp),
// named after the state directory, so that an earlier broker's is found
// and emptied.
func netDir(cfg *config.Config) string {
	state, err := filepath.Abs(cfg.State.Dir)
	if err != nil {
		state = cfg.State.Dir
	}
	sum := sha256.Sum256([]byte(state))
	return filepath.Join(os.TempDir(), "acp-broker-net-"+hex.EncodeToString(sum[:6]))
}

// makeNetDir makes dir anew, empty, the broker's own: others may pass
// through it (to their agent's directory) but not list it. One that is
// not the broker's own directory (another user's, a link) is refused.
func makeNetDir(dir string) error {
	if fi, err := os.Lstat(dir); err == nil {
		st, _ := fi.Sys().(*syscall.Stat_t)
		if !fi.IsDir() || st == nil || int(st.Uid) != os.Geteuid() {
			return fmt.Errorf("%s is there and is not a directory of the broker's own user: remove it", dir)
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o711); err != nil {
		return err
	}
	return os.Chmod(dir, 0o711) // whatever the umask
}
