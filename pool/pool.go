package pool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"acpbroker/acp"
	"acpbroker/acp/host"
	"acpbroker/cgroup"
	"acpbroker/internal/redact"
	"acpbroker/internal/safename"
	"acpbroker/netproxy"

	"github.com/rs/zerolog"
)

// Config configures a Pool.
type Config struct {
	// Launch starts agent processes (default Exec).
	Launch Launcher
	// Profiles are the agent definitions threads' agents are started
	// from, by name; DefaultProfile names the one a thread gets when it
	// asks for none ("": the only profile, if there is one).
	Profiles       map[string]*Profile
	DefaultProfile string
	// Command, Args, Env, MCPServers, WorkDir and PerThreadDir, with
	// StartTimeout and Conn.AuthMethod, make the one profile, named
	// "default", of a Config without Profiles.
	Command string
	Args    []string
	// Env is the agent's complete environment (see BuildEnv).
	Env        []string
	MCPServers []acp.MCPServer
	// WorkDir is where agents run. With PerThreadDir, each thread gets
	// WorkDir/<thread> instead.
	WorkDir      string
	PerThreadDir bool
	// ThreadName, if set, names a thread where its id would be a name:
	// its directory with PerThreadDir, a launcher's {thread}, its agent's
	// control group (default: the id itself). Different threads must
	// get different names.
	ThreadName func(thread string) string
	// MaxSessions bounds agent processes, live, starting and stopping,
	// over every profile.
	MaxSessions int
	// IdleTimeout stops agents idle that long (0: never).
	IdleTimeout time.Duration
	// OneShot, if set, says which threads' agents are stopped once a
	// turn releases them (their session closed and kept for the
	// thread's next, as an idle stop does), instead of holding a slot
	// for IdleTimeout: threads whose prompts come one at a time from a
	// program, so that they never push a person's idle agent out.
	OneShot func(thread string) bool
	// StartTimeout bounds spawn + initialize + session setup, for
	// profiles that set no StartTimeout of their own.
	StartTimeout time.Duration
	// ExitGrace is each step of the stop escalation: after closing stdin,
	// and after SIGTERM.
	ExitGrace time.Duration
	// Conn options for every agent (logger fields are added per agent;
	// AuthMethod is each profile's).
	Conn acp.Options
	// Host options for every agent's files and terminals (the logger and
	// the terminals' hook are each agent's; TerminalGrace is ExitGrace
	// when not set).
	Host host.Options
	// Redact masks secret values in what agents write to stderr.
	Redact *redact.Redactor
	// Sandbox confines each agent to its working directory.
	Sandbox Sandbox
	// RunAs, if set, is the user agents run as (the broker must be root);
	// their working directories are given to that user. In bubblewrap,
	// bubblewrap itself runs as that user: what agents are shown must be
	// reachable by it.
	RunAs *syscall.Credential
	// Cgroups, if set, gives each agent a control group of its own with
	// its profile's MemoryMax and PidsMax: the agent, what it starts and
	// its terminals' commands run there; the group is removed once the
	// agent has stopped, and whatever is left in it killed.
	Cgroups *cgroup.Manager
	// WaitNotice is how long a wait for a slot lasts before Acquire says
	// so (default 1s).
	WaitNotice time.Duration
	// Sessions remembers each thread's agent session for session/load
	// (default: in memory, for the last 4096 threads).
	Sessions SessionBook
	// Proxy is the way out of the agents whose profile's Network is
	// NetworkProxy. NetDir is the directory where each such agent gets a
	// directory of its own with the socket the proxy serves it on: the
	// agents' user must be able to pass through it (and everything above
	// it), and no one else to write in it. Forwarder is the program that
	// relays the sandbox's proxy port to that socket, one that imports
	// netproxy (default: the running program), at a path the agents' user
	// can reach.
	Proxy     *netproxy.Proxy
	NetDir    string
	Forwarder string
	// Registry, if set, records the agent processes alive.
	Registry Registry
	// Remote, if set, starts each agent elsewhere: launch asks it for the
	// process, what serves its files and terminals, and its working
	// directory, instead of starting a process here; the Conn and the
	// session are set up here as for a local one. It calls onWait when no
	// host has room yet, and waits for one until ctx ends: with the
	// caller's wait for a slot, or the pool's close; the host's start of
	// the process is its own to bound. A thread cannot be forked then
	// (ErrRemoteFork).
	Remote func(ctx context.Context, thread string, prof *Profile, onWait func()) (Remote, error)
	// HostLost, if set, is told when a thread's idle agent ends because
	// its agent host was lost (see HostLoser), once the pool has let the
	// agent go. It is called with the pool's lock held: it must not block
	// nor call the pool.
	HostLost func(HostLoss)
	// Placed, if set, is told the agent host a thread's agent runs on,
	// once it is the thread's (started for it, or a warm agent taken):
	// where its workspace is, for its later agents.
	Placed func(thread, where string)
	// PlacedOn, if set, is the host Placed was last told for thread ("":
	// none): a warm agent on another host is not for it.
	PlacedOn func(thread string) string
	// Warm is the Warm of the one profile of a Config without Profiles
	// (see Profile.Warm).
	Warm   int
	Logger zerolog.Logger
}

// exited reports whether a's process has ended.
func exited(a *Agent) bool {
	select {
	case <-a.Proc.Exited():
		return true
	default:
		return false
	}
}

// placed tells Config.Placed where a thread's agent on a host runs.
func (p *Pool) placed(a *Agent) {
	if a.Where != "" && p.cfg.Placed != nil {
		p.cfg.Placed(a.Thread, a.Where)
	}
}

// Sentinel errors.
var (
	ErrClosed = errors.New("broker shutting down")
	ErrBusy   = errors.New("thread's agent is busy")
	// ErrNoFork: the agent does not offer session/fork, so a thread
	// cannot start from another's session.
	ErrNoFork = errors.New("the agent does not offer session/fork, which is still unstable in ACP")
	// ErrCannotResume: the agent offers neither session/resume nor
	// session/load, so it cannot take up another session.
	ErrCannotResume = errors.New("the agent offers neither session/resume nor session/load")
	// ErrCannotList: the agent does not offer session/list.
	ErrCannotList = errors.New("the agent does not offer session/list")
	// ErrLive: a thread to fork into already has an agent.
	ErrLive = errors.New("the thread already has an agent")
	// ErrAgentGone: the agent was stopped while it was being used.
	ErrAgentGone = errors.New("the thread's agent stopped")
)

// Fork is what a thread forked from another starts from (AcquireFork).
type Fork struct {
	// Thread is the thread forked from, and Session its agent session,
	// which the new thread's session starts from.
	Thread, Session string
}

// Agent is one thread's agent process with its ACP connection and session.
// It is handed out by Acquire and returned with Release.
type Agent struct {
	Thread string
	// Profile is what the agent was started from; it keeps it when the
	// pool's profiles change.
	Profile   *Profile
	SessionID string
	// Resumed is set when the session was taken up again, in a new
	// process or by Resume: ResumedWith names the method,
	// session/resume where the agent offers it, else session/load.
	Resumed     bool
	ResumedWith string
	// ForkedFrom is the session this one was forked from (AcquireFork).
	ForkedFrom string
	// Title and ContextUsage are the session's title and context use as
	// the agent told them while it set the session up (in a replayed
	// history, or before answering a resume or a fork), if it did.
	Title        string
	ContextUsage *acp.Usage
	// Lost is the session id the thread had but could not resume (the
	// agent cannot load sessions, or refused this one); SessionID is then
	// a new session.
	Lost string
	Conn *acp.Conn
	// Host serves the agent's files and terminals, on this machine or on
	// the agent host that runs it; the Conn closes it.
	Host    AgentHost
	Proc    Proc
	Started time.Time
	// Dir is its working directory.
	Dir string
	// Where is the name of the agent host that runs it ("": this
	// machine; see Config.Remote).
	Where string
	// LostHost is the agent host the thread's agent ran on before, lost
	// with its workspace (Remote.LostHost); the turn that takes the
	// agent says so once and clears it.
	LostHost string
	// Adopted: an earlier run of the broker started it (see Adopt).
	Adopted bool

	launched string // the name it was started under (see Config.ThreadName)
	hostMCP  bool   // its host's MCP servers, mcp, are its session's (Remote.HostMCP)
	mcp      []acp.MCPServer
	group    *cgroup.Group // nil without Config.Cgroups
	net      *agentNet     // nil unless it goes through the proxy
	busy     bool
	reset    bool // Reset while busy: discard and forget on Release
	lastUsed time.Time
}

// AgentHost serves one agent's files and terminals where its workspace
// is: *host.Host on this machine, or its stand-in for an agent host.
type AgentHost interface {
	acp.Host
	// KillTerminals ends the commands of a session's terminals; their
	// output can still be read.
	KillTerminals(session string)
	// ReleaseTerminals ends and forgets a session's terminals.
	ReleaseTerminals(session string)
	// Output is the last tail bytes of what a terminal printed, and its
	// exit once ended; ok is false for a terminal not known.
	Output(session, terminal string, tail int) (out acp.TerminalOutput, ok bool)
}

var _ AgentHost = (*host.Host)(nil)

// Pool owns every agent process. Close stops them all and returns when every
// process and goroutine is gone.
type Pool struct {
	cfg Config
	log zerolog.Logger

	mu       sync.Mutex
	closed   bool
	profiles profileSet        // what agents are started from
	agents   map[string]*Agent // live, by thread
	bare     bareSet           // bare agents (see Bare), by thread
	starting int               // slots reserved by agents being started
	stopping int               // slots held by agents being stopped
	uses     map[string]use    // slots held, by profile; none holding none
	hurried  bool              // Shutdown's deadline has passed
	stopBy   time.Time         // set by StopBy: every stop fits before it
	hurry    context.Context   // ends when hurried is set
	hurryNow context.CancelFunc
	queue    []*waiter     // Acquire calls waiting for a slot, in order
	changed  chan struct{} // closed and replaced whenever a slot may have freed
	evicted  uint64
	spawned  uint64            // agents that started
	failed   uint64            // agents that failed to start
	adopted  uint64            // agents taken up from an earlier run (Adopt)
	left     uint64            // agents left running for a later run (Leaver)
	stopped  map[string]uint64 // agents stopped, by reason
	killed   uint64            // agents stopped without a grace
	oom      uint64            // agents that ran out of memory
	retiring map[*Agent]bool   // agents being stopped
	retired  acp.Stats         // counters of connections already closed
	// caps are what the last agent of each profile advertised, by
	// profile name: what a thread with no live agent can be offered.
	caps map[string]acp.AgentCapabilities
	// closed counts the sessions closed with session/close before their
	// agents were stopped for idleness.
	closedSessions uint64
	// warm holds the agents started ahead of any thread (see warm.go).
	warm warmSet

	// fwd is the forwarder's program, found (or copied) once.
	fwdOnce sync.Once
	fwd     string
	fwdErr  error

	kick   chan struct{}
	stop   chan struct{}
	ctx    context.Context // cancelled by Close; bounds agent start-up
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
}

// waiter is one Acquire call in line, for an agent of profile. The queue
// tells waiters apart by pointer.
type waiter struct{ thread, profile string }

// New returns a running pool.
func New(cfg Config) *Pool {
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 1
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = time.Minute
	}
	if cfg.ExitGrace <= 0 {
		cfg.ExitGrace = 2 * time.Second
	}
	if cfg.Launch == nil {
		cfg.Launch = Exec
	}
	if cfg.WaitNotice <= 0 {
		cfg.WaitNotice = time.Second
	}
	if cfg.Sessions == nil {
		cfg.Sessions = NewMemoryBook(4096)
	}
	profiles, def := cfg.Profiles, cfg.DefaultProfile
	if profiles == nil {
		profiles, def = legacyProfiles(cfg), DefaultProfileName
	}
	p := &Pool{
		cfg:      cfg,
		log:      cfg.Logger,
		profiles: newProfileSet(profiles, def),
		agents:   map[string]*Agent{},
		uses:     map[string]use{},
		stopped:  map[string]uint64{},
		retiring: map[*Agent]bool{},
		caps:     map[string]acp.AgentCapabilities{},
		warm:     newWarmSet(),
		changed:  make(chan struct{}),
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
	}
	p.ctx, p.cancel = context.WithCancelCause(context.Background())
	p.hurry, p.hurryNow = context.WithCancel(context.Background())
	if cfg.IdleTimeout > 0 {
		p.wg.Go(p.janitor)
	}
	p.mu.Lock()
	p.tellUnwarmedLocked(nil)
	p.mu.Unlock()
	p.wg.Go(p.warmer)
	return p
}

// Acquire returns thread's agent, marked busy, starting a process from
// profile ("" is the default) if the thread has none. A live agent is
// handed out whatever profile is asked for: a thread keeps what its agent
// started with until the agent stops. Starting one for a profile not
// configured fails with ErrUnknownProfile.
//
// When no slot is free, for the pool or for the profile's own
// MaxSessions, it waits in line, calling onWait(WaitSlot) once if the wait
// lasts WaitNotice, until a slot frees or ctx ends (the error is then ctx's
// cause). The line is first come, first served, except that a caller held
// only by its own profile's bound does not hold up callers of other
// profiles. To make room, the first caller held by its profile's bound
// stops that profile's least recently used idle agent; the first held by
// the pool's bound, the least recently used idle agent of any profile.
//
// With Config.Remote, onWait(WaitHost) is called when no agent host has
// room for the agent; that wait too lasts until one has or ctx ends.
func (p *Pool) Acquire(ctx context.Context, thread, profile string, onWait func(Wait)) (*Agent, error) {
	a, err := p.acquire(ctx, thread, profile, onWait, nil)
	if err == nil {
		p.keep(a, true)
	}
	return a, err
}

// AcquireFork is Acquire for a thread that starts from another's
// session: its agent, started from profile, works in a directory made
// from the other thread's (see Profile.ForkWorkspace) and starts its
// session with session/fork from fork.Session. It fails with ErrLive if
// the thread has an agent already, and with ErrNoFork if the agent does
// not offer session/fork (a directory it copied is removed then).
func (p *Pool) AcquireFork(ctx context.Context, thread, profile string, fork Fork, onWait func(Wait)) (*Agent, error) {
	a, err := p.acquire(ctx, thread, profile, onWait, &fork)
	if err == nil {
		p.keep(a, true)
	}
	return a, err
}

func (p *Pool) acquire(ctx context.Context, thread, profile string, onWait func(Wait), fork *Fork) (*Agent, error) {
	var me *waiter
	var notice <-chan time.Time // fires when the wait is long enough to tell
	defer func() {
		if me != nil {
			p.mu.Lock()
			p.leaveQueue(me)
			p.mu.Unlock()
		}
	}()
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		if a := p.agents[thread]; a != nil && !a.busy && a.Where != "" && exited(a) {
			// Its host was lost (or let it go) while it was idle: the
			// thread's message goes to a new agent, not to a dead one.
			delete(p.agents, thread)
			p.retireLocked(a, 0, StopCrashed)
			p.mu.Unlock()
			continue
		}
		if a := p.agents[thread]; a != nil {
			if fork != nil {
				p.mu.Unlock()
				return nil, ErrLive
			}
			if a.busy {
				p.mu.Unlock()
				return nil, ErrBusy
			}
			a.busy = true
			p.mu.Unlock()
			return a, nil
		}
		prof := p.profiles.lookup(profile)
		if prof == nil {
			err := p.profiles.unknown(profile)
			p.mu.Unlock()
			return nil, err
		}
		resume := ""
		if fork == nil {
			resume, _ = p.cfg.Sessions.Session(thread)
			// A warm agent holds its slot already: taking it makes no
			// one wait, so it is taken wherever this call stands in line.
			if a := p.claimWarmLocked(thread, prof, resume); a != nil {
				p.mu.Unlock()
				p.placed(a)
				return a, nil
			}
		}
		pos := len(p.queue) // where this call stands in line
		if me != nil {
			me.profile = prof.Name
			pos = slices.Index(p.queue, me)
		}
		ahead := p.clearAheadLocked(pos)
		capped := p.cappedLocked(prof.Name)
		if ahead && !capped && p.used() < p.cfg.MaxSessions {
			p.starting++
			p.countLocked(prof.Name, 0, 1, 0)
			if me != nil {
				p.leaveQueue(me)
				me = nil
			}
			p.mu.Unlock()
			return p.start(ctx, thread, prof, resume, fork, onWait)
		}
		// A slot already being freed is enough: the first in line takes
		// it when the stop ends. Evicting on every wake-up would stop one
		// idle agent after another for the one waiter. A warm agent goes
		// before anyone's idle agent; one of this profile about to be
		// ready, which this call can take, is waited for.
		switch {
		case fork == nil && p.warmComingLocked(prof, resume):
		case capped:
			if p.firstOfProfileLocked(pos, prof.Name) && p.uses[prof.Name].stopping == 0 && !p.makeRoomWarmLocked(prof.Name) {
				if victim := p.lruIdle(prof.Name); victim != nil {
					p.evictLocked(victim, StopLRU, "making room for another thread of profile "+prof.Name)
				}
			}
		case ahead && p.stopping == 0 && !p.makeRoomWarmLocked(""):
			if victim := p.lruIdle(""); victim != nil {
				p.evictLocked(victim, StopLRU, "making room for another thread")
			}
		}
		if me == nil {
			me = &waiter{thread: thread, profile: prof.Name}
			p.queue = append(p.queue, me)
			if onWait != nil {
				// Making room by stopping an idle agent usually takes
				// milliseconds: only a wait that lasts is worth telling.
				t := time.NewTimer(p.cfg.WaitNotice)
				defer t.Stop()
				notice = t.C
			}
		}
		changed := p.changed
		p.mu.Unlock()
		select {
		case <-changed:
		case <-notice:
			notice = nil
			onWait(WaitSlot)
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// clearAheadLocked reports whether every waiter before position pos in
// line is held only by its own profile's bound, so that pos may go first.
// p.mu must be held.
func (p *Pool) clearAheadLocked(pos int) bool {
	for _, w := range p.queue[:pos] {
		if !p.cappedLocked(w.profile) {
			return false
		}
	}
	return true
}

// firstOfProfileLocked reports whether no waiter before position pos in
// line waits for profile. p.mu must be held.
func (p *Pool) firstOfProfileLocked(pos int, profile string) bool {
	for _, w := range p.queue[:pos] {
		if w.profile == profile {
			return false
		}
	}
	return true
}

func (p *Pool) used() int {
	return len(p.agents) + p.bare.live + p.warm.ready + p.starting + p.stopping
}

func (p *Pool) leaveQueue(w *waiter) {
	for i, q := range p.queue {
		if q == w {
			p.queue = append(p.queue[:i], p.queue[i+1:]...)
			p.signalLocked()
			return
		}
	}
}

// signalLocked wakes every waiter to re-check; p.mu must be held.
func (p *Pool) signalLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// lruIdle is the least recently used idle agent of profile ("": of any
// profile), or nil.
func (p *Pool) lruIdle(profile string) *Agent {
	var victim *Agent
	for _, a := range p.agents {
		if profile != "" && a.Profile.Name != profile {
			continue
		}
		if !a.busy && (victim == nil || a.lastUsed.Before(victim.lastUsed)) {
			victim = a
		}
	}
	return victim
}

// evictLocked removes an idle agent, whose session stays in the book for
// resume, and stops it in the background. p.mu must be held.
func (p *Pool) evictLocked(a *Agent, reason, why string) {
	delete(p.agents, a.Thread)
	p.evicted++
	p.log.Info().Str("thread", a.Thread).Str("profile", a.Profile.Name).Str("session", a.SessionID).Str("cause", why).Msg("stopping idle agent")
	p.retireLocked(a, p.cfg.ExitGrace, reason)
}

// retireLocked stops an agent just removed from p.agents on a goroutine
// the pool owns; its slot stays taken until the process is gone. p.mu
// must be held.
func (p *Pool) retireLocked(a *Agent, grace time.Duration, reason string) {
	p.countLocked(a.Profile.Name, -1, 0, 0)
	p.stopLocked(a, grace, reason)
}

// stopLocked stops an agent that holds no slot as live (or warm) any
// more on a goroutine the pool owns; its slot stays taken, as stopping,
// until the process is gone. p.mu must be held.
func (p *Pool) stopLocked(a *Agent, grace time.Duration, reason string) {
	grace = p.stopGraceLocked(grace)
	p.retiring[a] = true // seen by Shutdown's deadline from now on
	p.stopping++
	p.countLocked(a.Profile.Name, 0, 0, 1)
	p.countStopLocked(reason, grace)
	idle := (reason == StopIdle || reason == StopLRU || reason == StopOneShot) && grace > 0
	p.wg.Go(func() {
		if idle {
			p.closeSession(a, grace)
		}
		p.shutdown(a, grace)
		p.mu.Lock()
		p.stopping--
		p.countLocked(a.Profile.Name, 0, 0, -1)
		p.signalLocked()
		p.mu.Unlock()
	})
}

// closeSession tells an agent stopped for idleness to free its session
// (session/close, when it offers it), within grace: the session stays
// in the book, and the thread's next agent resumes it.
func (p *Pool) closeSession(a *Agent, grace time.Duration) {
	if !a.Conn.Capabilities().Sessions.CanClose() || !a.Proc.Alive() {
		return
	}
	ctx, cancel := context.WithTimeout(p.hurry, grace)
	defer cancel()
	log := p.log.With().Str("thread", a.Thread).Str("session", a.SessionID).Int("pid", a.Proc.PID()).Logger()
	if err := a.Conn.CloseSession(ctx, a.SessionID); err != nil {
		log.Warn().Err(err).Msg("the idle agent's session was not closed; stopping it anyway")
		return
	}
	p.mu.Lock()
	p.closedSessions++
	p.mu.Unlock()
	log.Info().Msg("idle agent's session closed before it stops")
}

// start spawns and sets up an agent of prof in a slot reserved for it.
func (p *Pool) start(ctx context.Context, thread string, prof *Profile, resumeID string, fork *Fork, onWait func(Wait)) (*Agent, error) {
	a, err := p.spawn(ctx, thread, prof, resumeID, fork, onWait)
	if err == nil {
		p.placed(a)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.starting--
	p.countLocked(prof.Name, 0, -1, 0)
	if err == nil && p.closed {
		// Close may already be waiting: stop it here, not on a new goroutine.
		p.retiring[a] = true
		p.mu.Unlock()
		p.shutdown(a, 0)
		p.mu.Lock()
		err = ErrClosed
	}
	if err != nil {
		p.failed++
		p.signalLocked()
		return nil, err
	}
	p.spawned++
	p.warm.cold[prof.Name]++
	a.busy = true
	a.lastUsed = time.Now()
	p.agents[thread] = a
	p.countLocked(prof.Name, 1, 0, 0)
	if a.SessionID != resumeID {
		// Remembered at start, so that even a crash can resume it.
		p.cfg.Sessions.RememberSession(thread, a.SessionID, resumable(a.Conn.Capabilities()))
	}
	return a, nil
}

// resumable reports whether an agent's sessions can be taken up again in
// another of its processes.
func resumable(caps acp.AgentCapabilities) bool {
	return caps.LoadSession || caps.Sessions.CanResume()
}

func (p *Pool) spawn(ctx context.Context, thread string, prof *Profile, resumeID string, fork *Fork, onWait func(Wait)) (*Agent, error) {
	if p.cfg.Remote != nil {
		return p.spawnRemote(ctx, thread, prof, resumeID, fork, onWait)
	}
	timeout := prof.StartTimeout
	if timeout <= 0 {
		timeout = p.cfg.StartTimeout
	}
	ctx, cancel := context.WithTimeoutCause(ctx, timeout,
		fmt.Errorf("agent did not start within %s", timeout))
	defer cancel()
	ctx, closing := context.WithCancelCause(ctx)
	defer closing(nil)
	defer context.AfterFunc(p.ctx, func() { closing(ErrClosed) })()
	var dir string
	var err error
	if fork != nil {
		var copied bool
		dir, copied, err = p.forkDir(ctx, fork.Thread, thread, prof)
		if err != nil {
			return nil, err
		}
		if copied {
			defer func() {
				if err != nil {
					if rerr := os.RemoveAll(dir); rerr != nil {
						p.log.Warn().Err(rerr).Str("dir", dir).Msg("the copy made for a fork that failed was not removed")
					}
				}
			}()
		}
	} else if dir, err = p.workDir(ctx, thread, prof); err != nil {
		return nil, err
	}
	a, err := p.launch(ctx, thread, prof, dir, resumeID, fork)
	return a, err
}

// launch starts an agent of prof in dir and sets up its session: forked
// from fork's, taken up again (resumeID), or new.
func (p *Pool) launch(ctx context.Context, thread string, prof *Profile, dir, resumeID string, fork *Fork) (*Agent, error) {
	a, err := p.startHere(thread, prof, dir)
	if err != nil {
		return nil, err
	}
	return p.setUp(ctx, a, resumeID, fork)
}

// startHere starts thread's agent process of prof in dir on this
// machine, in its control group, sandbox and network, with the
// *host.Host that serves its files and terminals, and records it in the
// Registry. It does not speak ACP to it, nor call its Proc's Monitor.
func (p *Pool) startHere(thread string, prof *Profile, dir string) (*Agent, error) {
	var err error
	log := p.log.With().Str("thread", thread).Str("profile", prof.Name).Logger()
	var group *cgroup.Group
	if m := p.cfg.Cgroups; m != nil {
		if group, err = m.New(p.threadName(thread), cgroup.Limits{MemoryMax: prof.MemoryMax, PidsMax: prof.PidsMax}, p.cfg.RunAs); err != nil {
			return nil, fmt.Errorf("agent's control group: %w", err)
		}
	}
	nw, err := p.openNet(thread, prof)
	if err != nil {
		p.removeGroup(thread, group)
		return nil, fmt.Errorf("agent failed to start: %w", err)
	}
	network := p.cfg.Sandbox.networkOf(prof)
	spec, err := p.cfg.Sandbox.wrap(ProcessSpec{Command: prof.Command, Args: prof.Args, Dir: dir, Env: prof.Env, Logger: log, Redact: p.cfg.Redact, Credential: p.cfg.RunAs}, p.threadName(thread), prof.Name, network, nw, mcpPrograms(prof.MCPServers), prof.SandboxRO, prof.SandboxRW)
	if err != nil {
		nw.close()
		p.removeGroup(thread, group)
		return nil, fmt.Errorf("agent failed to start: %w", err)
	}
	spec.Group = group // around the sandbox: bubblewrap starts in the group
	proc, err := p.cfg.Launch(spec)
	closeFiles(spec.ExtraFiles) // the process has its own copies
	if err != nil {
		nw.close()
		p.removeGroup(thread, group)
		return nil, err
	}
	if r := p.cfg.Registry; r != nil {
		if ticks, err := startTicks(proc.PID()); err == nil {
			r.AgentStarted(proc.PID(), ticks)
		}
	}
	hopts := p.cfg.Host
	hopts.Logger = log.With().Int("pid", proc.PID()).Logger()
	hopts.Terminal = p.terminalCommand(prof, dir, group, network, nw)
	if hopts.TerminalGrace <= 0 {
		hopts.TerminalGrace = p.cfg.ExitGrace
	}
	return &Agent{Thread: thread, Profile: prof, Host: host.New(hopts), Proc: proc, Dir: dir, launched: p.threadName(thread), group: group, net: nw}, nil
}

// setUp speaks ACP to a's process, started here or on an agent host: it
// makes its Conn, on a.Host, and sets up its session in a.Dir.
func (p *Pool) setUp(ctx context.Context, a *Agent, resumeID string, fork *Fork) (*Agent, error) {
	prof, proc, dir := a.Profile, a.Proc, a.Dir
	log, opts := p.connect(a, 0)
	conn := a.Conn

	fail := func(err error) (*Agent, error) {
		p.shutdown(a, 0)
		if exit := proc.ExitErr(); exit != nil && !errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("agent failed to start: %w (%v)", err, exit)
		}
		if t := strings.TrimSpace(proc.StderrTail()); t != "" {
			return nil, fmt.Errorf("agent failed to start: %w; stderr: %s", err, t)
		}
		return nil, fmt.Errorf("agent failed to start: %w", err)
	}
	info, err := conn.Initialize(ctx)
	if err != nil {
		return fail(err)
	}
	caps := info.AgentCapabilities
	p.mu.Lock()
	p.caps[prof.Name] = caps
	p.mu.Unlock()
	servers := acp.UsableMCPServers(caps, a.mcpServers(), opts.Logger)
	if fork != nil {
		if !caps.Sessions.CanFork() {
			return fail(ErrNoFork)
		}
		sid, early, err := conn.ForkSession(ctx, fork.Session, dir, servers)
		if err != nil {
			if ctx.Err() != nil {
				err = context.Cause(ctx)
			}
			return fail(err)
		}
		a.SessionID, a.ForkedFrom = sid, fork.Session
		a.Title, a.ContextUsage = told(early)
		log.Info().Str("session", sid).Str("forked_from", fork.Session).Str("from_thread", fork.Thread).Int("pid", proc.PID()).Msg("agent started, its session forked")
		return a, nil
	}
	if resumeID != "" {
		for _, method := range resumeMethods(caps) {
			early, err := takeUp(ctx, conn, method, resumeID, dir, servers)
			if err == nil {
				a.SessionID, a.Resumed, a.ResumedWith = resumeID, true, method
				a.Title, a.ContextUsage = told(early)
				log.Info().Str("session", resumeID).Str("method", method).Int("pid", proc.PID()).Msg("agent resumed session")
				return a, nil
			}
			if ctx.Err() != nil {
				return fail(context.Cause(ctx))
			}
			log.Warn().Err(err).Str("session", resumeID).Str("method", method).Msg("the session could not be taken up")
		}
		log.Warn().Str("session", resumeID).Msg("starting a new session")
	}
	a.Lost = resumeID
	sid, _, err := conn.NewSession(ctx, dir, servers)
	if err != nil {
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		return fail(err)
	}
	a.SessionID = sid
	log.Info().Str("session", sid).Int("pid", proc.PID()).Msg("agent started")
	return a, nil
}

// mcpServers are the MCP servers a's session is given: its host's, where
// the host defines them, else its profile's.
func (a *Agent) mcpServers() []acp.MCPServer {
	if a.hostMCP {
		return a.mcp
	}
	return a.Profile.MCPServers
}

// connect makes a's Conn, on a.Host, its requests numbered from firstID
// (0: from 1), and has a.Proc watch it. It returns the agent's logger and
// the Conn's options.
func (p *Pool) connect(a *Agent, firstID uint64) (zerolog.Logger, acp.Options) {
	log := p.log.With().Str("thread", a.Thread).Str("profile", a.Profile.Name).Logger()
	if a.Where != "" {
		log = log.With().Str("agent_host", a.Where).Logger()
	}
	opts := p.cfg.Conn
	opts.AuthMethod = a.Profile.AuthMethod
	opts.Logger = log.With().Int("pid", a.Proc.PID()).Logger()
	opts.Redact = p.cfg.Redact
	opts.Host = a.Host
	opts.FirstID = firstID
	conn := acp.NewConn(a.Proc.Stdout(), a.Proc.Stdin(), opts)
	a.Proc.Monitor(conn.Done())
	a.Conn, a.Started = conn, time.Now()
	return log, opts
}

// terminalCommand is how the agent of prof working in dir starts a
// terminal's command: with the agent's environment (the request's
// variables over it, none of the broker's own; in the sandbox, set
// inside it only), as the agent's user, in the agent's sandbox and
// control group (group; nil: none), where it counts toward the agent's
// limits. It is nil, and terminals are not offered, when agents start
// through a launcher: the broker cannot put a command in the same
// confinement.
func (p *Pool) terminalCommand(prof *Profile, dir string, group *cgroup.Group, network string, nw *agentNet) func(host.Command) (host.Command, error) {
	sb := p.cfg.Sandbox
	if len(sb.Launcher) > 0 {
		return nil
	}
	programs := mcpPrograms(prof.MCPServers)
	return func(cmd host.Command) (host.Command, error) {
		cmd.Env = mergeEnv(prof.Env, cmd.Env)
		cmd.Credential = p.cfg.RunAs
		cmd.Group = group
		if sb.Enabled() {
			return sb.wrapTerminal(cmd, prof.Command, dir, network, nw, programs, prof.SandboxRO, prof.SandboxRW)
		}
		return cmd, nil
	}
}

// mcpPrograms are the commands of the stdio MCP servers, which the agent
// starts itself.
func mcpPrograms(servers []acp.MCPServer) []string {
	var out []string
	for _, s := range servers {
		if s.Transport() == acp.MCPStdio && s.Command != "" {
			out = append(out, s.Command)
		}
	}
	return out
}

// workDir is the working directory of thread's agent: the profile's
// Workspace hook's, or its WorkDir (per thread with PerThreadDir), made
// and given to RunAs.
func (p *Pool) workDir(ctx context.Context, thread string, prof *Profile) (string, error) {
	if prof.Workspace != nil {
		dir, err := prof.Workspace(ctx, thread)
		if ctx.Err() != nil {
			return "", fmt.Errorf("agent workspace: %w", context.Cause(ctx))
		}
		if err != nil {
			return "", fmt.Errorf("agent workspace: %w", err)
		}
		return dir, nil
	}
	dir := prof.WorkDir
	if prof.PerThreadDir {
		dir = filepath.Join(dir, safeName(p.threadName(thread)))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("agent working directory: %w", err)
	}
	if c := p.cfg.RunAs; c != nil {
		if err := os.Chown(dir, int(c.Uid), int(c.Gid)); err != nil {
			return "", fmt.Errorf("agent working directory for uid %d: %w", c.Uid, err)
		}
	}
	return dir, nil
}

// threadName is thread's name where its id would be a name (see
// Config.ThreadName).
func (p *Pool) threadName(thread string) string {
	if p.cfg.ThreadName != nil {
		return p.cfg.ThreadName(thread)
	}
	return thread
}

// safeName turns a thread id into a directory name.
func safeName(s string) string { return safename.Of(s, 0, "_") }

// shutdown stops the process with the escalation and closes the Conn.
// grace 0 kills at once.
// The caller has put a in p.retiring, under p.mu.
func (p *Pool) shutdown(a *Agent, grace time.Duration) {
	defer func() {
		p.mu.Lock()
		delete(p.retiring, a)
		p.mu.Unlock()
	}()
	if grace <= 0 {
		a.Proc.Kill()
	} else {
		a.Proc.Stop(grace)
	}
	_ = a.Conn.Close()
	if a.Where == "" { // an agent host looks after its own processes
		if r := p.cfg.Registry; r != nil {
			r.AgentGone(a.Proc.PID())
		}
		if stop := p.cfg.Sandbox.stopCommand(a.launched, a.Dir, a.Profile.Name); stop != nil {
			p.runStop(a, stop)
		}
	}
	// Counted before its group goes, so that whoever sees the group gone
	// sees the count.
	exit, _ := errors.AsType[*ExitError](a.Proc.ExitErr())
	st := a.Conn.Stats().Counters()
	p.mu.Lock()
	p.retired = p.retired.Add(st)
	if exit != nil && exit.OutOfMemory {
		p.oom++
	}
	p.mu.Unlock()
	p.removeGroup(a.Thread, a.group)
	a.net.close() // once the agent and its terminals are gone
}

// groupRemoveWait bounds the wait for a stopped agent's control group to
// empty (its processes killed); past the shutdown deadline it is
// hurriedRemoveWait, time enough for processes just killed to die.
const (
	groupRemoveWait   = 5 * time.Second
	hurriedRemoveWait = 500 * time.Millisecond
)

// removeGroup kills what is left in thread's agent's control group, if it
// has one, and removes it. One it cannot remove is left to the next
// start's clean-up.
func (p *Pool) removeGroup(thread string, g *cgroup.Group) {
	if g == nil {
		return
	}
	ctx, cancel := context.WithTimeout(p.hurry, groupRemoveWait)
	err := g.Remove(ctx)
	cancel()
	if err != nil && p.hurry.Err() != nil {
		ctx, cancel := context.WithTimeout(context.Background(), hurriedRemoveWait)
		err = g.Remove(ctx)
		cancel()
	}
	if err != nil {
		p.log.Warn().Err(err).Str("thread", thread).Str("cgroup", g.Name()).Msg("the agent's control group could not be removed")
	}
}

// launcherStopWait bounds the launcher's stop command (a container
// runtime's stop, a cluster's delete), which may have to wait for the
// remote side; the shutdown deadline cuts it shorter.
const launcherStopWait = 30 * time.Second

// launcherOutputWait is how long the stop command's output is read after
// it exits or is killed: a child it left behind may hold the pipe open.
const launcherOutputWait = time.Second

// runStop runs the launcher's stop command for a stopped agent.
func (p *Pool) runStop(a *Agent, argv []string) {
	ctx, cancel := context.WithTimeout(p.hurry, launcherStopWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = a.Profile.Env
	cmd.WaitDelay = launcherOutputWait
	out, err := cmd.CombinedOutput()
	log := p.log.Info()
	if err != nil {
		log = p.log.Warn().Err(err)
	}
	log.Str("thread", a.Thread).Strs("command", argv).Str("output", p.cfg.Redact.String(strings.TrimSpace(string(out)))).Msg("launcher stop command run")
}

// Release returns an agent after a turn. With discard, the agent is not
// trusted again: it is stopped as any other (stdin closed, then SIGTERM
// and SIGKILL to its group, ExitGrace apart, so it may still save its
// session), and the thread's next Acquire starts a fresh process
// (resuming the session when the agent supports it). The turn does not
// wait for the stop.
func (p *Pool) Release(a *Agent, discard bool) {
	if !discard && !exited(a) {
		p.keep(a, false)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.agents[a.Thread] != a {
		return
	}
	a.busy = false
	a.lastUsed = time.Now()
	if te, ok := a.Proc.(TurnEnder); ok {
		te.TurnEnded()
	}
	reason, grace := StopUntrusted, p.cfg.ExitGrace
	select {
	case <-a.Proc.Exited():
		discard, reason, grace = true, StopCrashed, 0
	default:
		if a.reset {
			discard, reason = true, StopReset
		}
	}
	if !discard && p.cfg.OneShot != nil && p.cfg.OneShot(a.Thread) {
		discard, reason = true, StopOneShot
		p.log.Info().Str("thread", a.Thread).Str("profile", a.Profile.Name).Str("session", a.SessionID).Msg("stopping a one-shot thread's agent after its turn")
	}
	if discard {
		delete(p.agents, a.Thread)
		p.retireLocked(a, grace, reason)
	}
	p.signalLocked()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Discard kills the thread's agent at once, busy or not; its session stays
// in the book for resume. A later Release of it is ignored. It is for an
// agent whose turn is being ended from outside (the watchdog).
func (p *Pool) Discard(thread string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a := p.agents[thread]; a != nil {
		delete(p.agents, thread)
		p.retireLocked(a, 0, StopForced)
	}
}

// Reset stops the thread's agent, if any, and forgets its session: the next
// prompt starts a fresh one. A busy agent is left to its turn and discarded
// when released.
func (p *Pool) Reset(thread string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cfg.Sessions.ForgetSession(thread)
	if a := p.agents[thread]; a != nil && a.busy {
		a.reset = true
	} else if a != nil {
		delete(p.agents, thread)
		p.retireLocked(a, p.cfg.ExitGrace, StopReset)
	}
}

// janitor stops agents idle longer than IdleTimeout.
func (p *Pool) janitor() {
	t := time.NewTimer(p.cfg.IdleTimeout)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-p.kick:
		case <-t.C:
		}
		now := time.Now()
		next := p.cfg.IdleTimeout
		p.mu.Lock()
		for _, a := range p.agents {
			if a.busy {
				continue
			}
			if idle := now.Sub(a.lastUsed); idle >= p.cfg.IdleTimeout {
				p.evictLocked(a, StopIdle, fmt.Sprintf("idle for %s", p.cfg.IdleTimeout))
			} else if left := p.cfg.IdleTimeout - idle; left < next {
				next = left
			}
		}
		next = min(next, p.retireIdleWarmLocked(now))
		p.mu.Unlock()
		t.Reset(next)
	}
}

// Reasons an agent is stopped, as counted in Stats.Stopped.
const (
	StopIdle        = "idle"         // idle for IdleTimeout
	StopOneShot     = "one_shot"     // its turn ended in a thread of Config.OneShot
	StopLRU         = "lru"          // made room for another thread
	StopCrashed     = "crashed"      // it exited during or after a turn
	StopUntrusted   = "untrusted"    // a cancelled prompt went unanswered, or agent.restart_after_cancel
	StopReset       = "reset"        // its session was reset
	StopForced      = "forced"       // its turn was ended from outside
	StopStartFailed = "start_failed" // it could not be set up
	StopShutdown    = "shutdown"     // the pool closed
	StopWarm        = "warm"         // a warm agent made room for a thread, or its profile changed
)

func (p *Pool) countStopLocked(reason string, grace time.Duration) {
	p.stopped[reason]++
	if grace <= 0 {
		p.killed++
	}
}

// Stats is a snapshot of the pool.
type Stats struct {
	Live, Busy, Starting, Stopping, Waiting int
	// MaxSessions is the pool's bound (Config.MaxSessions).
	MaxSessions int
	// Profiles are the same by profile: every one configured, and any
	// other whose agents still run; DefaultProfile names the default.
	Profiles       map[string]ProfileStats
	DefaultProfile string
	Evicted        uint64
	// Spawned and SpawnFailed count agent starts; Stopped counts stops by
	// reason, and Killed those stopped without a grace (SIGKILL at once).
	Spawned, SpawnFailed, Killed uint64
	// Adopted counts the agents taken up from an earlier run (Adopt), Left
	// those left running on their hosts for a later one at Shutdown.
	Adopted, Left uint64
	// SessionsClosed counts the sessions closed with session/close before
	// their agents were stopped for idleness.
	SessionsClosed uint64
	// OutOfMemory counts the agents that ended for running out of memory
	// (killed for their control group's limit); Cgroups counts the
	// agents' control groups made and not yet removed.
	OutOfMemory uint64
	Cgroups     int
	Stopped     map[string]uint64
	// Warm counts the warm agents ready (see Profile.Warm); WarmClaims
	// the threads that took one, and ColdStarts the agents started for
	// a thread, by profile.
	Warm       int
	WarmClaims map[string]uint64
	ColdStarts map[string]uint64
	Conn       acp.Stats
}

// Config returns what the pool was made with. Its Profiles are the first
// ones; Profile gives them as they are now.
func (p *Pool) Config() Config { return p.cfg }

// Stats returns the pool's size and the sum of its connections' counters.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	s := Stats{Live: len(p.agents) + p.bare.live, MaxSessions: p.cfg.MaxSessions, Starting: p.starting, Stopping: p.stopping, Waiting: len(p.queue), Evicted: p.evicted,
		Spawned: p.spawned, SpawnFailed: p.failed, Adopted: p.adopted, Left: p.left, Killed: p.killed, OutOfMemory: p.oom, SessionsClosed: p.closedSessions, Stopped: make(map[string]uint64, len(p.stopped))}
	for k, v := range p.stopped {
		s.Stopped[k] = v
	}
	s.Warm, s.WarmClaims, s.ColdStarts = p.warm.ready, maps.Clone(p.warm.claims), maps.Clone(p.warm.cold)
	p.profileStatsLocked(&s)
	if m := p.cfg.Cgroups; m != nil {
		s.Cgroups = m.Live()
	}
	conns := make([]*acp.Conn, 0, len(p.agents))
	for _, a := range p.agents {
		if a.busy {
			s.Busy++
		}
		conns = append(conns, a.Conn)
	}
	s.Conn = p.retired
	p.mu.Unlock()
	for _, c := range conns {
		s.Conn = s.Conn.Add(c.Stats())
	}
	return s
}

// Lookup returns thread's live agent, or nil.
func (p *Pool) Lookup(thread string) *Agent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.agents[thread]
}

// stopGraceLocked is grace for a stop starting now: none past the
// shutdown's deadline, and once StopBy has set one, at most half the
// time left before it, so that both steps fit. p.mu must be held.
func (p *Pool) stopGraceLocked(grace time.Duration) time.Duration {
	if p.hurried {
		return 0 // past the shutdown deadline: no more graces
	}
	if !p.stopBy.IsZero() {
		grace = min(grace, time.Until(p.stopBy)/2)
	}
	return grace
}

// StopBy makes every stop that starts from now on fit before by: each of
// its two steps (after stdin is closed, after SIGTERM) waits at most half
// the time left until then, and a stop that starts at or after by kills
// at once. A shutdown sets it first, so that the agents its turns give
// back are stopped on the same clock as the idle ones; Shutdown with a
// ctx that ends at by then kills whatever is left. An earlier by than
// one already set wins.
func (p *Pool) StopBy(by time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopBy.IsZero() || by.Before(p.stopBy) {
		p.stopBy = by
	}
}

// Close is Shutdown without a deadline.
func (p *Pool) Close() { p.Shutdown(context.Background()) }

// Shutdown stops every agent, each with its own escalation, in parallel;
// busy agents are killed at once (their turns should have been ended
// first). If ctx ends before they are all gone, the process groups still
// stopping are killed without waiting out their graces. It returns when all
// processes and goroutines are gone. Safe to call twice.
func (p *Pool) Shutdown(ctx context.Context) {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.stop)
		p.cancel(ErrClosed)
		for _, a := range p.agents {
			delete(p.agents, a.Thread)
			p.countLocked(a.Profile.Name, -1, 0, 0)
			grace := p.stopGraceLocked(p.cfg.ExitGrace)
			if a.busy {
				grace = 0
			} else if p.leaveLocked(a) {
				grace = 0 // nothing is left to stop here
			}
			p.countStopLocked(StopShutdown, grace)
			p.retiring[a] = true
			p.wg.Go(func() { p.shutdown(a, grace) })
		}
		p.shutdownBareLocked()
		p.shutdownWarmLocked()
		p.signalLocked()
	}
	for p.starting > 0 {
		changed := p.changed
		p.mu.Unlock()
		<-changed // start() signals when it gives its slot back
		p.mu.Lock()
	}
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	p.mu.Lock()
	p.hurryNow()
	p.hurried = true // agents retired from now on are killed at once
	var hurry []*Agent
	for a := range p.retiring {
		hurry = append(hurry, a)
	}
	p.mu.Unlock()
	for _, a := range hurry {
		p.log.Warn().Str("thread", a.Thread).Int("pid", a.Proc.PID()).Msg("shutdown deadline: killing the agent's process group")
		a.Proc.Kill()
	}
	<-done
}
