package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"

	"acpbroker/config"

	"github.com/rs/zerolog"
)

// Check asks the machine what a broker's start needs of it, with the
// broker's environment: each profile's environment can be built (no
// broker secret in it), state.dir can be written, and, where the broker
// runs its agents itself (without [cluster]), the programs they start
// and the user they run as are found, each profile's cwd can be written,
// a worktree profile's repository and base are what git says they must
// be, what agents are shown keeps the broker's own files from them and
// their user reaches it, and the sandbox runs. A clustered broker runs no
// agent: those are its hosts' (CheckHost). Each problem
// names its key; Open does not check. What the machine says of a valid
// configuration is added to its warnings (see machineWarnings).
func Check(ctx context.Context, cfg *config.Config, environ []string) error {
	return check(ctx, cfg, environ, !clustered(cfg))
}

// CheckHost is Check for an agent host, which runs agents: everything
// Check asks where agents run.
func CheckHost(ctx context.Context, cfg *config.Config, environ []string) error {
	return check(ctx, cfg, environ, true)
}

// check is Check, with the checks of what runs agents where agentsHere.
func check(ctx context.Context, cfg *config.Config, environ []string, agentsHere bool) error {
	if err := complete(cfg, environ, agentsHere); err != nil {
		return err
	}
	if _, err := buildProfiles(cfg, environ, nil, nil, zerolog.Nop()); err != nil {
		return err
	}
	var problems []error
	if err := checkWritable("state.dir", cfg.State.Dir); err != nil {
		problems = append(problems, err)
	}
	if agentsHere {
		problems = append(problems, checkProfiles(ctx, cfg, gitConfiner(cfg))...)
	}
	problems = append(problems, checkCluster(cfg)...)
	cfg.Warnings = append(cfg.Warnings, machineWarnings(cfg)...)
	if agentsHere {
		problems = append(problems, checkSandbox(cfg)...)
		if err := sandboxFor(cfg).Check(sandboxCheckTimeout, cfg.Agent.RunAs); err != nil {
			problems = append(problems, fmt.Errorf("agent.sandbox = %q: %w", cfg.Agent.Sandbox, err))
		}
	}
	return errors.Join(problems...)
}

// RunsAgents reports whether a broker of cfg runs its agents itself:
// without [cluster]. A clustered broker's agents, and what they need of
// a machine, are its hosts'.
func RunsAgents(cfg *config.Config) bool { return !clustered(cfg) }

// complete finds on the machine what the configuration names for the
// agents it runs, into cfg: the programs they start (findCommands) and
// the user they run as (findUser). Unless agentsHere it finds nothing:
// those are left as written, for the hosts that run the agents. Calling
// it again does nothing more.
func complete(cfg *config.Config, environ []string, agentsHere bool) error {
	if !agentsHere {
		return nil
	}
	return errors.Join(findCommands(cfg, environ), findUser(cfg))
}

// findUser finds agent.run_as_user, by name or uid, with its primary
// group, into cfg.Agent.RunAs; a broker that is not root cannot run
// agents as another user.
func findUser(cfg *config.Config) error {
	name := cfg.Agent.RunAsUser
	if name == "" || cfg.Agent.RunAs != nil {
		return nil
	}
	cred, err := lookupUser(name)
	switch {
	case err != nil:
		return fmt.Errorf("agent.run_as_user = %q: %w", name, err)
	case os.Getuid() != 0:
		return fmt.Errorf("agent.run_as_user = %q needs the broker to run as root (it runs as uid %d)", name, os.Getuid())
	}
	cfg.Agent.RunAs = cred
	return nil
}

// lookupUser finds a user by name or number, with its primary group.
func lookupUser(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return nil, fmt.Errorf("no such user")
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("user %s has ids %s:%s", name, u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// machineWarnings say what a valid configuration leaves open to others
// on the machine: a file a secret is read from that every user may
// read, and agents run as "nobody", a user other services share.
func machineWarnings(cfg *config.Config) []string {
	var out []string
	for _, b := range brokerPaths(cfg) {
		if b.near || b.what == "state.dir" || b.what == "the configuration file" {
			continue
		}
		if fi, err := os.Stat(b.path); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o004 != 0 {
			out = append(out, fmt.Sprintf("%s = %q is readable by every user of the machine (mode %04o): make it the broker's alone (chmod 0600, or 0640 for its group)",
				b.what, b.path, fi.Mode().Perm()))
		}
	}
	if cfg.Agent.RunAs != nil && sharedUser(cfg.Agent.RunAsUser, cfg.Agent.RunAs.Uid) {
		out = append(out, fmt.Sprintf("agent.run_as_user = %q is a user other services run as too: any of them can read its agents' /proc/PID/environ (their API keys) and signal them; "+
			"make a user for the agents alone (useradd --system --no-create-home --shell /usr/sbin/nologin acp-agent) and name it", cfg.Agent.RunAsUser))
	}
	return out
}

// sharedUser reports whether the user named name (uid) is nobody,
// which the system gives to whatever needs no user of its own.
func sharedUser(name string, uid uint32) bool {
	if name == "nobody" {
		return true
	}
	u, err := user.Lookup("nobody")
	return err == nil && u.Uid == strconv.FormatUint(uint64(uid), 10)
}
