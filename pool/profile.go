package pool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"acpbroker/acp"
	"acpbroker/netproxy"
	"acpbroker/policy"
)

// Profile is one agent definition: the program a thread's agent runs and
// how it is set up. A pool serves several; each thread's agent is started
// from one of them.
type Profile struct {
	// Name is the profile's key in Config.Profiles (SetProfiles sets it).
	Name    string
	Command string
	Args    []string
	// Env is the agent's complete environment (see BuildEnv).
	Env []string
	// MCPServers are given to every session/new and session/load, those
	// the agent can use (see acp.UsableMCPServers). A sandboxed agent is
	// shown the stdio servers' programs.
	MCPServers []acp.MCPServer
	// WorkDir is where agents run. With PerThreadDir, each thread gets
	// WorkDir/<thread> instead. Both are unused when Workspace is set.
	WorkDir      string
	PerThreadDir bool
	// Workspace, if set, returns the absolute working directory of
	// thread's agent. It is called before every start of the agent, with
	// a context that ends at the start timeout or when the pool closes,
	// and must return promptly once it ends. The pool neither creates the
	// directory it returns nor gives it to Config.RunAs.
	Workspace func(ctx context.Context, thread string) (dir string, err error)
	// AfterTurn, if set, is what an agent host does after each turn of a
	// thread of the profile (a worktree's branch pushed to the shared
	// repository); see BareAgent.AfterTurn.
	AfterTurn func(ctx context.Context, thread string) error
	// AuthMethod is the method id sent with authenticate when the agent
	// asks for it ("" : never authenticate).
	AuthMethod string
	// StartTimeout bounds spawn + initialize + session setup (0: the
	// pool's StartTimeout).
	StartTimeout time.Duration
	// RestartAfterCancel asks the turn that abandons a prompt to discard
	// the agent even when it answered the cancel: for agents whose
	// session goes wrong after a cancel.
	RestartAfterCancel bool
	// SandboxRO and SandboxRW are more paths a sandboxed agent of this
	// profile may read, and write, at the same place (its own
	// configuration or tool cache; a worktree profile: the repository's
	// git directory, which its worktrees' commits go to). Agents of other
	// profiles do not see them.
	SandboxRO, SandboxRW []string
	// Network is the network its sandboxed agents (their terminals and
	// what they start too) have: NetworkProxy, NetworkNone or
	// NetworkHost ("": NetworkNone with Sandbox.NoNetwork, else
	// NetworkHost). Behind the proxy they reach what Allow permits;
	// AllowKey is its configuration key, for what refusals say.
	Network  string
	Allow    netproxy.Allow
	AllowKey string
	// MaxSessions bounds this profile's agents, live, starting and
	// stopping, within the pool's MaxSessions (0: only the pool's bound).
	MaxSessions int
	// MemoryMax and PidsMax are what the kernel holds each of its agents
	// to, with Config.Cgroups: bytes of memory, and processes and threads,
	// of the agent and everything it starts together (0: no limit).
	MemoryMax, PidsMax int64
	// Permissions are the rules its agents' permission requests are
	// decided by before anyone is asked (see package policy); nil leaves
	// them to the engine. An agent keeps the rules of the Profile it
	// started from, whatever SetProfiles does while it runs.
	Permissions []policy.Rule
	// Busy is what a message from someone who may act on a thread does
	// while the thread's turn runs: "queue" it, or "interrupt" the turn
	// ("": as the engine's configuration says).
	Busy string
	// ForkWorkspace, if set, makes the working directory of a thread
	// forked from another (see AcquireFork), as Workspace does for any
	// other thread: a worktree profile's new worktree from the parent's
	// branch. Without it a forked thread of a profile with Workspace gets
	// Workspace's, and one of a profile with PerThreadDir a copy of the
	// parent's directory of at most ForkMaxBytes.
	ForkWorkspace func(ctx context.Context, parent, child string) (dir string, err error)
	ForkMaxBytes  int64
	// Warm is how many of its agents the pool keeps started, initialized
	// and with a session made, for new threads to take (0: none). Only
	// a profile whose agents all work in one directory can have them
	// (see WarmRefusal). They count against MaxSessions and the pool's.
	Warm int
}

// DefaultProfileName is the one profile of a Config without Profiles,
// made of its single-agent fields.
const DefaultProfileName = "default"

// ErrUnknownProfile: an agent has to be started for a profile that is not
// configured. Acquire wraps it with the profile's name.
var ErrUnknownProfile = errors.New("no such agent profile")

// profileSet is the pool's profiles with its default, replaced whole by
// SetProfiles.
type profileSet struct {
	byName map[string]*Profile
	def    string
}

// newProfileSet copies profiles, each under its key as its Name. An empty
// def names the only profile, if there is one.
func newProfileSet(profiles map[string]*Profile, def string) profileSet {
	s := profileSet{byName: make(map[string]*Profile, len(profiles)), def: def}
	for name, prof := range profiles {
		if prof == nil {
			continue
		}
		c := *prof
		c.Name = name
		s.byName[name] = &c
		if def == "" && len(profiles) == 1 {
			s.def = name
		}
	}
	return s
}

// legacyProfiles is the one profile made of cfg's single-agent fields.
func legacyProfiles(cfg Config) map[string]*Profile {
	return map[string]*Profile{DefaultProfileName: {
		Command: cfg.Command, Args: cfg.Args, Env: cfg.Env, MCPServers: cfg.MCPServers,
		WorkDir: cfg.WorkDir, PerThreadDir: cfg.PerThreadDir,
		AuthMethod: cfg.Conn.AuthMethod, StartTimeout: cfg.StartTimeout, Warm: cfg.Warm,
	}}
}

// lookup returns the profile name stands for ("" is the default), or nil.
func (s profileSet) lookup(name string) *Profile {
	if name == "" {
		name = s.def
	}
	return s.byName[name]
}

// unknown is the error for a profile lookup found no profile for.
func (s profileSet) unknown(name string) error {
	if name == "" {
		if s.def == "" {
			return fmt.Errorf("%w: no default profile is configured", ErrUnknownProfile)
		}
		name = s.def
	}
	return fmt.Errorf("%w: %q", ErrUnknownProfile, name)
}

// use is one profile's share of the pool's slots.
type use struct{ live, starting, stopping, warm int }

func (u use) held() int { return u.live + u.starting + u.stopping + u.warm }

// countLocked adds to profile name's share of the slots, and forgets a
// profile that holds none. p.mu must be held.
func (p *Pool) countLocked(name string, live, starting, stopping int) {
	u := p.uses[name]
	u.live += live
	u.starting += starting
	u.stopping += stopping
	if u == (use{}) {
		delete(p.uses, name)
	} else {
		p.uses[name] = u
	}
}

// cappedLocked reports whether profile name may not start another agent
// because of its own MaxSessions. A profile no longer configured counts
// as capped: its waiters leave at their next look and hold up nobody.
// p.mu must be held.
func (p *Pool) cappedLocked(name string) bool {
	prof := p.profiles.byName[name]
	return prof == nil || (prof.MaxSessions > 0 && p.uses[name].held() >= prof.MaxSessions)
}

// Profile returns the profile name stands for ("" is the default) as
// agents are started from now on, or nil if there is none. It must not be
// modified.
func (p *Pool) Profile(name string) *Profile {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.profiles.lookup(name)
}

// SetProfiles replaces the profiles agents are started from, and the
// default one ("" : the only profile, if there is one). Each Profile is
// copied, with its key as its Name. Live agents keep the Profile they
// started with; waiting Acquire calls look again, and those whose profile
// is gone fail with ErrUnknownProfile.
func (p *Pool) SetProfiles(profiles map[string]*Profile, def string) {
	set := newProfileSet(profiles, def)
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.profiles
	p.profiles = set
	p.retireChangedWarmLocked()
	p.signalLocked()
	p.tellUnwarmedLocked(old.byName)
}

// ProfileStats is one profile's share of the pool.
type ProfileStats struct {
	// Live and Busy count its running agents, and those of them running a
	// turn; Starting and Stopping those being started and stopped.
	Live, Busy, Starting, Stopping int
	// Waiting counts Acquire calls waiting for a slot for it.
	Waiting int
	// Warm counts its warm agents ready for a thread to take.
	Warm int
	// MaxSessions is its own bound (0: only the pool's).
	MaxSessions int
	// Removed: it is no longer configured; its agents run until they stop.
	Removed bool
}

// profileStatsLocked fills s.Profiles: every configured profile, and any
// other that still holds a slot. p.mu must be held.
func (p *Pool) profileStatsLocked(s *Stats) {
	s.DefaultProfile = p.profiles.def
	s.Profiles = make(map[string]ProfileStats, len(p.profiles.byName))
	for name, prof := range p.profiles.byName {
		s.Profiles[name] = ProfileStats{MaxSessions: prof.MaxSessions}
	}
	entry := func(name string) ProfileStats {
		ps, ok := s.Profiles[name]
		if !ok {
			ps.Removed = true
		}
		return ps
	}
	for name, u := range p.uses {
		ps := entry(name)
		ps.Live, ps.Starting, ps.Stopping, ps.Warm = u.live, u.starting, u.stopping, u.warm
		s.Profiles[name] = ps
	}
	for _, a := range p.agents {
		if a.busy {
			ps := entry(a.Profile.Name)
			ps.Busy++
			s.Profiles[a.Profile.Name] = ps
		}
	}
	for _, w := range p.queue {
		ps := entry(w.profile)
		ps.Waiting++
		s.Profiles[w.profile] = ps
	}
}
