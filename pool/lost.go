package pool

// HostLoser is a Proc on an agent host that tells when its end was the
// host's loss (it stopped answering), not the agent's own.
type HostLoser interface {
	// HostLost is closed, before Exited, when the process ended because
	// its host was lost.
	HostLost() <-chan struct{}
}

// HostLoss is a thread's idle agent ended by the loss of the agent host
// that ran it (see Config.HostLost).
type HostLoss struct {
	Thread string
	// Host is the agent host lost.
	Host string
	// Shared: the host pushed the thread's branch to a shared repository
	// after each turn, so that its committed work follows the thread.
	Shared bool
}

// watchHostLoss waits, on a goroutine the pool owns, for a's process to
// end. If its host was lost while a was its thread's idle agent, a is
// let go at once (its slot freed, not held until the thread's next
// message) and Config.HostLost is told, once, before the thread's next
// Acquire can start another agent. shared is Remote.Shared.
// The goroutine ends with the process, or with the pool's close.
func (p *Pool) watchHostLoss(a *Agent, shared bool) {
	hl, ok := a.Proc.(HostLoser)
	if !ok || p.cfg.HostLost == nil {
		return
	}
	p.wg.Go(func() {
		select {
		case <-a.Proc.Exited():
		case <-p.ctx.Done():
			return
		}
		select {
		case <-hl.HostLost():
		default:
			return // it ended otherwise: stopped, or crashed
		}
		p.mu.Lock()
		if p.closed || p.agents[a.Thread] != a || a.busy {
			// Not the thread's, or its turn is told by the turn itself.
			p.mu.Unlock()
			return
		}
		delete(p.agents, a.Thread)
		p.retireLocked(a, 0, StopCrashed)
		p.signalLocked()
		p.log.Warn().Str("thread", a.Thread).Str("agent_host", a.Where).Msg("the idle agent's host was lost")
		// Told before the thread's next Acquire can start another agent.
		p.cfg.HostLost(HostLoss{Thread: a.Thread, Host: a.Where, Shared: shared})
		p.mu.Unlock()
	})
}
