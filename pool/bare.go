package pool

import (
	"acpbroker/acp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"acpbroker/acp/host"
	"acpbroker/cgroup"
)

// BareAgent is a thread's agent process started by Bare: in its
// workspace, control group, network and sandbox, with the *host.Host that
// serves its files and terminals, and nothing spoken to it yet. Whoever
// asked for it speaks ACP to it over Proc's Stdin and Stdout, and calls
// Proc.Monitor once it reads Stdout; a stop calls it if no one has.
type BareAgent struct {
	Proc Proc
	Host *host.Host
	Dir  string
	// MCPServers are the MCP servers of its profile, as this machine
	// defines it: those its session is to be given (see
	// Remote.MCPServers).
	MCPServers []acp.MCPServer

	monitor *monitorOnce // Proc
	thread  string
	prof    *Profile
	group   *cgroup.Group // nil without Config.Cgroups
	net     *agentNet     // nil unless it goes through the proxy
}

// monitorOnce is a Proc whose Monitor runs only the first time it is
// called, so that a stop can make sure the reaper runs.
type monitorOnce struct {
	Proc
	once sync.Once
}

func (m *monitorOnce) Monitor(readerDone <-chan struct{}) {
	m.once.Do(func() { m.Proc.Monitor(readerDone) })
}

// noReader is the readerDone of a Monitor called by a stop: no one reads.
var noReader = func() <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// bareSet is the pool's bare agents, by thread: nil while one is being
// started. live counts those started.
type bareSet struct {
	byThread map[string]*BareAgent
	live     int
}

// StopReleased is the reason a bare agent is stopped by ReleaseBare, as
// counted in Stats.Stopped.
const StopReleased = "released"

// Bare starts thread's agent process of profile here ("" is the default),
// with its sandbox, control group, network and workspace, and what serves
// its files and terminals, without speaking ACP to it: what an agent host
// runs for a broker. It takes a slot of the pool and of the profile as
// Acquire does, waiting in the same line until one frees or ctx ends (the
// error is then ctx's cause); it does not stop idle agents to make room.
// It fails with ErrLive if thread has an agent here already, and with
// ErrUnknownProfile for a profile not configured. The slot is held until
// ReleaseBare; the agent counts in Stats as a live one.
func (p *Pool) Bare(ctx context.Context, thread, profile string) (*BareAgent, error) {
	prof, err := p.bareSlot(ctx, thread, profile)
	if err != nil {
		return nil, err
	}
	b, err := p.startBare(ctx, thread, prof)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.starting--
	p.countLocked(prof.Name, 0, -1, 0)
	if err == nil && p.closed {
		p.mu.Unlock()
		p.stopBare(b, 0)
		p.mu.Lock()
		err = ErrClosed
	}
	if err != nil {
		delete(p.bare.byThread, thread)
		p.failed++
		p.signalLocked()
		return nil, err
	}
	p.spawned++
	p.bare.byThread[thread] = b
	p.bare.live++
	p.countLocked(prof.Name, 1, 0, 0)
	return b, nil
}

// bareSlot waits in Acquire's line for a slot for thread's bare agent of
// profile, and reserves it (as starting).
func (p *Pool) bareSlot(ctx context.Context, thread, profile string) (*Profile, error) {
	var me *waiter
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
		if _, ok := p.bare.byThread[thread]; ok || p.agents[thread] != nil {
			p.mu.Unlock()
			return nil, ErrLive
		}
		prof := p.profiles.lookup(profile)
		if prof == nil {
			err := p.profiles.unknown(profile)
			p.mu.Unlock()
			return nil, err
		}
		pos := len(p.queue)
		if me != nil {
			me.profile = prof.Name
			pos = slices.Index(p.queue, me)
		}
		if p.clearAheadLocked(pos) && !p.cappedLocked(prof.Name) && p.used() < p.cfg.MaxSessions {
			p.starting++
			p.countLocked(prof.Name, 0, 1, 0)
			if p.bare.byThread == nil {
				p.bare.byThread = map[string]*BareAgent{}
			}
			p.bare.byThread[thread] = nil // being started
			if me != nil {
				p.leaveQueue(me)
				me = nil
			}
			p.mu.Unlock()
			return prof, nil
		}
		if me == nil {
			me = &waiter{thread: thread, profile: prof.Name}
			p.queue = append(p.queue, me)
		}
		changed := p.changed
		p.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// startBare makes thread's working directory and starts its agent
// process there, within the profile's start timeout.
func (p *Pool) startBare(ctx context.Context, thread string, prof *Profile) (*BareAgent, error) {
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
	dir, err := p.workDir(ctx, thread, prof)
	if err != nil {
		return nil, err
	}
	a, err := p.startHere(thread, prof, dir)
	if err != nil {
		return nil, err
	}
	m := &monitorOnce{Proc: a.Proc}
	return &BareAgent{Proc: m, Host: a.Host.(*host.Host), Dir: dir, MCPServers: prof.MCPServers, monitor: m, thread: thread, prof: prof, group: a.group, net: a.net}, nil
}

// ReleaseBare stops a bare agent with the stop escalation (ExitGrace, or
// less as StopBy says), ends its terminals, removes its control group
// and network, and frees its slot. It returns once the agent is gone.
// Safe to call twice; one the pool's Shutdown has taken is left to it.
func (p *Pool) ReleaseBare(b *BareAgent) {
	p.mu.Lock()
	if b == nil || p.bare.byThread[b.thread] != b {
		p.mu.Unlock()
		return
	}
	delete(p.bare.byThread, b.thread)
	p.bare.live--
	p.stopping++
	p.countLocked(b.prof.Name, -1, 0, 1)
	grace := p.stopGraceLocked(p.cfg.ExitGrace)
	p.countStopLocked(StopReleased, grace)
	p.mu.Unlock()
	p.stopBare(b, grace)
	p.mu.Lock()
	p.stopping--
	p.countLocked(b.prof.Name, 0, 0, -1)
	p.signalLocked()
	p.mu.Unlock()
}

// shutdownBareLocked takes every bare agent for Shutdown, which waits for
// their stops. p.mu must be held.
func (p *Pool) shutdownBareLocked() {
	for thread, b := range p.bare.byThread {
		if b == nil {
			continue // being started: Bare stops it once it sees the pool closed
		}
		delete(p.bare.byThread, thread)
		p.bare.live--
		p.countLocked(b.prof.Name, -1, 0, 0)
		grace := p.stopGraceLocked(p.cfg.ExitGrace)
		p.countStopLocked(StopShutdown, grace)
		p.wg.Go(func() { p.stopBare(b, grace) })
	}
}

// stopBare stops a bare agent's process (at once past the shutdown's
// deadline), ends what serves its files and terminals, and removes its
// control group and network.
func (p *Pool) stopBare(b *BareAgent, grace time.Duration) {
	b.monitor.Monitor(noReader)
	hurry := context.AfterFunc(p.hurry, b.Proc.Kill)
	if grace <= 0 {
		b.Proc.Kill()
	} else {
		b.Proc.Stop(grace)
	}
	hurry()
	_ = b.Host.Close()
	if r := p.cfg.Registry; r != nil {
		r.AgentGone(b.Proc.PID())
	}
	if stop := p.cfg.Sandbox.stopCommand(p.threadName(b.thread), b.Dir, b.prof.Name); stop != nil {
		p.runStop(&Agent{Thread: b.thread, Profile: b.prof}, stop)
	}
	exit, _ := errors.AsType[*ExitError](b.Proc.ExitErr())
	p.mu.Lock()
	if exit != nil && exit.OutOfMemory {
		p.oom++
	}
	p.mu.Unlock()
	p.removeGroup(b.thread, b.group)
	b.net.close()
}

// Usage is what the bare agent uses: its control group's memory and CPU,
// or its process tree's without one (see Usages).
func (b *BareAgent) Usage() (Usage, error) {
	a := &Agent{Proc: b.Proc, group: b.group}
	return a.usage(&procTable{root: "/proc"})
}

// HasAfterTurn reports whether the agent's profile does anything after
// each turn of its thread (see AfterTurn).
func (b *BareAgent) HasAfterTurn() bool { return b.prof.AfterTurn != nil }

// AfterTurn does what the agent's profile does after each turn of its
// thread (Profile.AfterTurn), if anything.
func (b *BareAgent) AfterTurn(ctx context.Context) error {
	if b.prof.AfterTurn == nil {
		return nil
	}
	return b.prof.AfterTurn(ctx, b.thread)
}
