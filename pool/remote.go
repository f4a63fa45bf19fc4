package pool

import (
	"acpbroker/acp"
	"context"
	"errors"
	"fmt"
	"time"
)

// Remote is an agent started elsewhere (Config.Remote): its process as
// the pool sees it, what serves its files and terminals where its
// workspace is, its working directory there, and the name of the agent
// host that runs it.
type Remote struct {
	Proc  Proc
	Host  AgentHost
	Dir   string
	Where string
	// LostHost, if set, is the agent host the thread's agent ran on
	// before, which was lost with the thread's workspace there.
	LostHost string
	// HostMCP: the host defines the MCP servers the agent's session is
	// given, MCPServers (none when empty), as it defines the rest of the
	// profile; the profile's own are not used.
	HostMCP    bool
	MCPServers []acp.MCPServer
	// Shared: the host pushes the thread's branch to a shared repository
	// after each turn (a worktree profile's shared_repo).
	Shared bool
}

// Wait is what a thread's Acquire waits for when it calls its onWait.
type Wait int

const (
	// WaitSlot: every slot of the pool, or of the profile, is taken.
	WaitSlot Wait = iota
	// WaitHost: no agent host has room for the agent (Config.Remote).
	WaitHost
)

// ErrRemoteFork: a thread cannot be forked from another while agents run
// on agent hosts, where the parent's workspace may not be.
var ErrRemoteFork = errors.New("a thread cannot be forked while agents run on agent hosts")

// spawnRemote starts thread's agent of prof through Config.Remote and sets
// up its session here. The wait for a host, and the host's start of the
// process, end with ctx or the pool's close (a thread waits for a host as
// it waits for a slot); the session's set-up is bounded by the start
// timeout from when the host has started the process.
func (p *Pool) spawnRemote(ctx context.Context, thread string, prof *Profile, resumeID string, fork *Fork, onWait func(Wait)) (*Agent, error) {
	if fork != nil {
		return nil, ErrRemoteFork
	}
	ctx, closing := context.WithCancelCause(ctx)
	defer closing(nil)
	defer context.AfterFunc(p.ctx, func() { closing(ErrClosed) })()
	hostWait := func() {}
	if onWait != nil {
		hostWait = func() { onWait(WaitHost) }
	}
	r, err := p.cfg.Remote(ctx, thread, prof, hostWait)
	if err != nil {
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		return nil, fmt.Errorf("agent failed to start: %w", err)
	}
	if r.Proc == nil || r.Host == nil {
		if r.Proc != nil {
			r.Proc.Monitor(noReader)
			r.Proc.Kill()
		}
		return nil, errors.New("agent failed to start: the agent host gave no process or no host for its files")
	}
	timeout := prof.StartTimeout
	if timeout <= 0 {
		timeout = p.cfg.StartTimeout
	}
	ctx, cancel := context.WithTimeoutCause(ctx, timeout,
		fmt.Errorf("agent did not start within %s", timeout))
	defer cancel()
	a := &Agent{Thread: thread, Profile: prof, Host: r.Host, Proc: r.Proc, Dir: r.Dir, Where: r.Where, LostHost: r.LostHost, Started: time.Now(),
		hostMCP: r.HostMCP, mcp: r.MCPServers}
	a, err = p.setUp(ctx, a, resumeID, fork)
	if err == nil {
		p.watchHostLoss(a, r.Shared)
	}
	return a, err
}
