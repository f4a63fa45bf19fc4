package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"acpbroker/pool"
)

// A broker restarted finds the agents its earlier run started still
// running on their hosts, and takes them over: a host hears the new run's
// beat and keeps the earlier run's agents for OwnerTimeout, the new run
// asks each host for them (Client.Adopt), and the host hands each over:
// its stdout from the first chunk the earlier run had not consumed, its
// stdin from the chunk its host expects next. What the earlier run kept
// beside an agent (ctlKeep: the pool's note of its session) comes back
// with it, for the pool to take it up without a new initialize.

// keep stores what a's broker keeps beside it, if it is not too big.
// One too big clears what was kept: an older note would say what is no
// longer so (that no turn runs, say).
func (s *Server) keep(a *hostAgent, data []byte) {
	if len(data) > maxKept {
		s.log.Warn().Str("agent", a.id).Int("bytes", len(data)).Int("max", maxKept).Msg("cluster: what the broker keeps beside an agent is too big; nothing is kept")
		data = nil
	}
	s.mu.Lock()
	a.kept = append([]byte(nil), data...)
	s.mu.Unlock()
}

// onAdopt hands the agents this host runs for an earlier run of a broker
// over to the run that asks.
func (s *Server) onAdopt(m *nats.Msg) {
	var req adoptRequest
	if err := json.Unmarshal(m.Data, &req); err != nil || req.Broker == "" || req.BrokerInstance == "" {
		return
	}
	var rep adoptReply
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = m.Respond(mustJSON(rep))
		return
	}
	s.brokers[req.Broker] = brokerSeen{instance: req.BrokerInstance, last: time.Now()}
	for _, a := range s.agents {
		if a.owner != req.Broker || a.ownerInstance == req.BrokerInstance || !a.endedAt.IsZero() || isClosed(a.abandoned) {
			continue
		}
		a.ownerInstance, a.orphaned = req.BrokerInstance, time.Time{}
		rep.Agents = append(rep.Agents, adoptedAgent{ID: a.id, Thread: a.thread, Profile: a.profile, Dir: a.st.Dir,
			PID: a.st.Proc.PID(), Terminals: a.st.Host.Terminals(), Shared: a.st.AfterTurn != nil, Out: a.out.rebase(), In: a.in.expected()})
	}
	s.mu.Unlock()
	for _, a := range rep.Agents {
		s.log.Info().Str("agent", a.ID).Str("thread", a.Thread).Str("broker", req.Broker).Msg("cluster: agent handed over to its broker's new run")
	}
	_ = m.Respond(mustJSON(rep))
	s.beat()
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// rebase has the stream read afresh by a new receiver: every chunk not
// consumed is sent again, from the first, whose number it returns.
func (s *sender) rebase() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	first := s.next
	if len(s.queue) > 0 {
		first = s.queue[0].seq
	}
	s.recv = first - 1
	s.progress = time.Time{} // resent at the next tick
	return first
}

// expected is the number of the chunk the receiver takes next.
func (r *receiver) expected() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.next
}

// Adoptee is an agent an earlier run of this broker started on a host,
// now this run's: Remote is it, as Start gives one; Kept what the earlier
// run kept beside it (nil: nothing). Thread and Profile are what it was
// started for. LetGo stops it on its host when it is not taken up.
type Adoptee struct {
	Thread, Profile string
	Remote          pool.Remote
	Kept            []byte
}

// LetGo has the host stop the agent and forget it; it does not wait.
func (a Adoptee) LetGo() {
	if r, ok := a.Remote.Proc.(*remoteProc); ok {
		r.release()
		r.end(errors.New("not taken over"), "", false)
		r.discard()
	}
}

// Adopt has the Client take over the agents an earlier run of this broker
// (of the same name) left on the hosts, from every host heard now or
// later (a host reconnecting after the broker's restart is heard late),
// and give each to take, which must take it up or LetGo it. Each host is
// asked once per run of its own, on a goroutine of the Client's, within
// CallTimeout; a host that does not answer stops those agents once it has
// waited OwnerTimeout for this run.
func (c *Client) Adopt(take func(Adoptee)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.take != nil {
		return
	}
	c.take = take
	for name, h := range c.hosts {
		c.askLocked(name, h)
	}
}

// askLocked asks host h for the agents it runs for an earlier run of this
// broker, unless it was asked or Adopt was not called. c.mu must be held.
func (c *Client) askLocked(name string, h *hostState) {
	if c.take == nil || h.asked || h.lost || c.closed {
		return
	}
	h.asked, h.adopting = true, true
	instance, take := h.beat.Instance, c.take
	c.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.o.CallTimeout)
		defer cancel()
		go func() {
			select {
			case <-c.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		ads := c.adoptFrom(ctx, name, instance)
		for _, ad := range ads {
			take(ad)
		}
		c.mu.Lock()
		h.adopting = false
		c.mu.Unlock()
	})
}

// adoptFrom takes over the agents one host runs for an earlier run.
func (c *Client) adoptFrom(ctx context.Context, host, instance string) []Adoptee {
	msg, err := c.nc.RequestWithContext(ctx, hostAdoptSubject(instance), mustJSON(adoptRequest{Broker: c.o.Broker, BrokerInstance: c.instance}))
	if err != nil {
		c.log.Warn().Err(err).Str("host", host).Msg("cluster: agent host did not hand over the agents of this broker's earlier run")
		return nil
	}
	var rep adoptReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		c.log.Warn().Err(err).Str("host", host).Msg("cluster: an unreadable answer to a hand-over")
		return nil
	}
	var out []Adoptee
	for _, ag := range rep.Agents {
		a, err := c.newRemoteAt(ag.ID, host, instance, ag.Thread, ag.Out, ag.In)
		if err != nil {
			c.log.Warn().Err(err).Str("host", host).Str("agent", ag.ID).Msg("cluster: an agent handed over could not be taken")
			msg := nats.NewMsg(agentSubject(ag.ID, "ctl"))
			msg.Header.Set(hMethod, ctlRelease)
			_ = c.nc.PublishMsg(msg)
			continue
		}
		a.pid, a.terminals = ag.PID, ag.Terminals
		ad := Adoptee{Thread: ag.Thread, Profile: ag.Profile, Remote: pool.Remote{Proc: a, Host: &remoteHost{a: a}, Dir: ag.Dir, Where: host, Shared: ag.Shared}}
		var kept keptResult
		if err := a.call(ctx, ctlKept, nil, &kept); err != nil {
			c.log.Warn().Err(err).Str("host", host).Str("agent", ag.ID).Msg("cluster: what was kept beside an agent could not be read")
		} else {
			if len(kept.Note) > 0 && string(kept.Note) != "null" {
				ad.Kept = kept.Note
			}
			ad.Remote.HostMCP, ad.Remote.MCPServers = kept.MCPServers != nil, kept.MCPServers
		}
		c.log.Info().Str("thread", ag.Thread).Str("host", host).Str("agent", ag.ID).Int("pid", ag.PID).Msg("cluster: agent of an earlier run taken over")
		out = append(out, ad)
	}
	return out
}

// Keep has the host keep note beside the agent, for a later run of this
// broker to take it over with (see Adopt); it does not wait. A note too
// big clears the one kept.
func (a *remoteProc) Keep(note []byte) {
	if len(note) > maxKept {
		// The note kept before would say what is no longer so: nothing
		// is kept, and the agent is not taken over.
		a.c.log.Warn().Str("agent", a.id).Int("bytes", len(note)).Msg("cluster: a note too big to keep beside an agent; its earlier one is cleared")
		note = nil
	}
	msg := nats.NewMsg(agentSubject(a.id, "ctl"))
	msg.Header.Set(hMethod, ctlKeep)
	msg.Data = note
	_ = a.c.nc.PublishMsg(msg)
}

var (
	_ pool.Keeper = (*remoteProc)(nil)
	_ pool.Leaver = (*remoteProc)(nil)
)

// maxLeft bounds the agents a Client remembers having left (see Leave):
// as many as a broker runs.
const maxLeft = 1 << 16

// errLeft ends an agent left to its host here.
var errLeft = errors.New("left running on its agent host")

// Leave lets the agent run on without this run of the broker: its host,
// told so, keeps it for the next run (see Adopt) for OwnerTimeout, then
// stops it. Its stdin stays open and its terminals run. Here it ends
// (Exited closes).
func (a *remoteProc) Leave() {
	a.c.mu.Lock()
	if len(a.c.left) < maxLeft {
		a.c.left[a.id] = true
	}
	a.c.mu.Unlock()
	a.notify(ctlLeft, struct{}{})
	a.stdin.fail(errLeft)
	a.releaseOnce.Do(func() {}) // a Close of the Client must not release it
	a.end(errLeft, "", false)
	a.discard()
}
