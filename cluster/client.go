package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"

	"acpbroker/pool"
)

// ClientOptions configure a broker's side.
type ClientOptions struct {
	// Broker is this broker's name (cluster.name). A host stops the agents
	// of an earlier instance of the same name once a new one is heard.
	Broker string
	// Instance identifies this run of the broker; a new random id when
	// empty.
	Instance string
	// HostTimeout is cluster.host_timeout: a host not heard this long is
	// lost, and its agents end. 10 s when zero.
	HostTimeout time.Duration
	// BeatInterval is how often the broker announces itself; 2 s when zero.
	BeatInterval time.Duration
	// StartTimeout bounds a host's answer to a start; 2 min when zero.
	StartTimeout time.Duration
	// CallTimeout bounds the requests that have no ctx of their own
	// (Alive, Stop, Kill, Output, KillTerminals, Close…); HostTimeout when
	// zero.
	CallTimeout time.Duration
	// Window bounds the bytes of an agent's stdin not yet consumed by its
	// host (4 MiB when zero); Resend is how long without an
	// acknowledgement before chunks are sent again (500 ms when zero).
	Window int
	Resend time.Duration
	// AskWindow is how long Start waits, after NewClient, for the hosts to
	// answer the first roll call before it tells a thread to wait; 300 ms
	// when zero.
	AskWindow time.Duration
	// AfterTurnFailed, if set, is told when a host says that what it does
	// after a thread's turns failed (its branch not pushed to the shared
	// repository), with the thread, the host and why (at most 1 KiB):
	// the host tells each kind of failure once, until one succeeds. It
	// must not block.
	AfterTurnFailed func(thread, host, why string)
	Logger          zerolog.Logger
}

// HostInfo is a host as the broker knows it.
type HostInfo struct {
	Name     string
	Instance string
	Labels   map[string]string
	Profiles []string
	// Capacity is the agents it may run; Running those it runs (for any
	// broker), Agents those it runs for this broker.
	Capacity, Running, Agents int
	// MemTotal and MemAvailable are its memory in bytes (0 when unknown).
	MemTotal, MemAvailable uint64
	LastHeard              time.Time
	// Lost: not heard for HostTimeout; its agents have ended.
	Lost bool
}

// Client places agents on hosts and carries their streams, for a broker.
type Client struct {
	nc       *nats.Conn
	o        ClientOptions
	log      zerolog.Logger
	stats    relayStats
	chunk    int
	maxReq   int
	instance string

	mu        sync.Mutex
	closed    bool
	hosts     map[string]*hostState // by name
	agents    map[string]*remoteProc
	changed   chan struct{} // closed and replaced when a host's room may have grown
	resumed   time.Time
	lostTotal int64
	take      func(Adoptee) // set by Adopt
	// left are the agents left running for this broker's next run (see
	// remoteProc.Leave): a host's beat naming them names no orphan.
	left map[string]bool
	subs []*nats.Subscription

	ready    chan struct{}
	stop     chan struct{}
	loopDone chan struct{}
	wg       sync.WaitGroup
}

type hostState struct {
	beat   hostBeat
	last   time.Time
	lost   bool
	lostAt time.Time
	seq    uint64 // beats heard from this instance
	// pending are this broker's agents on the host that its beats do not
	// count yet: starts under way, and agents started since the last beat.
	pending map[string]bool
	// asked: this instance of the host was asked for the agents of an
	// earlier run (see Adopt); adopting: its answer is not yet taken, so
	// that an agent its beat names as this run's may not be known yet.
	asked, adopting bool
}

// NewClient joins the hosts on nc: it listens to their beats, asks them
// for one at once, and announces this broker. Close releases it.
func NewClient(nc *nats.Conn, o ClientOptions) *Client {
	if o.Instance == "" {
		o.Instance = nuid.Next()
	}
	if o.HostTimeout <= 0 {
		o.HostTimeout = 10 * time.Second
	}
	if o.BeatInterval <= 0 {
		o.BeatInterval = 2 * time.Second
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 2 * time.Minute
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = o.HostTimeout
	}
	if o.Window <= 0 {
		o.Window = defaultWindow
	}
	if o.Resend <= 0 {
		o.Resend = defaultResend
	}
	if o.AskWindow <= 0 {
		o.AskWindow = 300 * time.Millisecond
	}
	c := &Client{
		nc: nc, o: o, instance: o.Instance,
		log:      o.Logger.With().Str("broker", o.Broker).Logger(),
		chunk:    chunkSize(nc),
		maxReq:   replyLimit(nc),
		hosts:    make(map[string]*hostState),
		agents:   make(map[string]*remoteProc),
		left:     make(map[string]bool),
		changed:  make(chan struct{}),
		ready:    make(chan struct{}),
		stop:     make(chan struct{}),
		loopDone: make(chan struct{}),
	}
	if sub, err := nc.Subscribe(subjHostBeat, c.onHostBeat); err == nil {
		c.subs = append(c.subs, sub)
	} else {
		c.log.Error().Err(err).Msg("cluster: cannot hear the hosts' beats")
	}
	c.beat()
	_ = nc.Publish(subjAsk, nil)
	go c.loop()
	return c
}

// Instance is this run's id.
func (c *Client) Instance() string { return c.instance }

func (c *Client) beat() {
	_ = c.nc.Publish(subjBrokerBeat, mustJSON(brokerBeat{Name: c.o.Broker, Instance: c.instance}))
}

func (c *Client) loop() {
	defer close(c.loopDone)
	step := min(c.o.BeatInterval, c.o.HostTimeout/4, c.o.Resend) / 2
	tick := time.NewTicker(max(step, 10*time.Millisecond))
	defer tick.Stop()
	askDone := time.After(c.o.AskWindow)
	lastBeat := time.Now()
	for {
		select {
		case <-c.stop:
			return
		case <-askDone:
			close(c.ready)
			askDone = nil
		case now := <-tick.C:
			if now.Sub(lastBeat) >= c.o.BeatInterval {
				c.beat()
				lastBeat = now
			}
			c.sweep(now)
		}
	}
}

// sweep loses the hosts not heard for HostTimeout and resends what the
// hosts have not acknowledged. While this broker's own connection is down
// nothing is heard, and no host is lost for that.
func (c *Client) sweep(now time.Time) {
	type loss struct {
		name, instance string
		err            error
	}
	var losses []loss
	c.mu.Lock()
	if !c.nc.IsConnected() {
		c.resumed = now
	}
	for name, h := range c.hosts {
		if h.lost {
			if now.Sub(h.lostAt) > 30*c.o.HostTimeout {
				delete(c.hosts, name)
			}
			continue
		}
		heard := h.last
		if c.resumed.After(heard) {
			heard = c.resumed
		}
		if now.Sub(heard) > c.o.HostTimeout {
			h.lost, h.lostAt = true, now
			c.lostTotal++
			losses = append(losses, loss{name, h.beat.Instance,
				fmt.Errorf("agent host %s stopped answering (last heard %s ago)", name, now.Sub(h.last).Round(time.Second))})
		}
	}
	agents := slices.Collect(maps.Values(c.agents))
	c.mu.Unlock()
	for _, l := range losses {
		c.log.Warn().Str("host", l.name).Err(l.err).Msg("cluster: agent host lost")
		c.endAgents(l.name, l.instance, l.err)
	}
	for _, a := range agents {
		a.stdin.tick(now)
	}
}

// endAgents ends every agent of this broker on that instance of the host.
func (c *Client) endAgents(host, instance string, err error) {
	c.mu.Lock()
	var gone []*remoteProc
	for _, a := range c.agents {
		if a.host == host && a.hostInstance == instance {
			gone = append(gone, a)
		}
	}
	c.mu.Unlock()
	for _, a := range gone {
		a.end(err, "", true)
	}
}

func (c *Client) onHostBeat(m *nats.Msg) {
	var b hostBeat
	if json.Unmarshal(m.Data, &b) != nil || b.Name == "" || b.Instance == "" {
		return
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	h := c.hosts[b.Name]
	var restarted string
	if h != nil && h.beat.Instance != b.Instance {
		restarted = h.beat.Instance
		h = nil
	}
	if h == nil && restarted == "" && len(c.hosts) >= maxMembers {
		c.mu.Unlock()
		c.log.Warn().Str("host", b.Name).Int("hosts", len(c.hosts)).Msg("cluster: too many agent hosts; this one is not heard")
		return
	}
	if h == nil {
		h = &hostState{pending: make(map[string]bool)}
		c.hosts[b.Name] = h
	}
	h.beat, h.last, h.lost = b, time.Now(), false
	h.seq++
	var orphans []string
	type usageTold struct {
		a *remoteProc
		b beatAgent
	}
	var told []usageTold // given once c.mu is let go: a remoteProc's lock comes first
	for _, a := range b.Agents {
		if a.Broker != c.instance {
			continue
		}
		delete(h.pending, a.ID) // counted in Running now
		if ra := c.agents[a.ID]; ra == nil && !c.left[a.ID] {
			orphans = append(orphans, a.ID)
		} else if ra != nil {
			told = append(told, usageTold{ra, a})
		}
	}
	if h.adopting {
		orphans = nil
	}
	c.askLocked(b.Name, h)
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	for _, t := range told {
		t.a.told(t.b)
	}
	if restarted != "" {
		c.log.Warn().Str("host", b.Name).Msg("cluster: agent host restarted")
		c.endAgents(b.Name, restarted, fmt.Errorf("agent host %s restarted: the agents it ran are gone", b.Name))
	}
	// An agent the host runs for this broker that the broker does not know
	// (its start was given up, or the host was lost and came back): stop it.
	for _, id := range orphans {
		msg := nats.NewMsg(agentSubject(id, "ctl"))
		msg.Header.Set(hMethod, ctlRelease)
		_ = c.nc.PublishMsg(msg)
	}
}

// Hosts lists the hosts known, by name.
func (c *Client) Hosts() []HostInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	mine := make(map[string]int)
	for _, a := range c.agents {
		mine[a.host]++
	}
	out := make([]HostInfo, 0, len(c.hosts))
	for name, h := range c.hosts {
		out = append(out, HostInfo{Name: name, Instance: h.beat.Instance, Labels: maps.Clone(h.beat.Labels),
			Profiles: slices.Clone(h.beat.Profiles), Capacity: h.beat.Capacity, Running: h.beat.Running,
			Agents: mine[name], MemTotal: h.beat.MemTotal, MemAvailable: h.beat.MemAvailable,
			LastHeard: h.last, Lost: h.lost})
	}
	slices.SortFunc(out, func(a, b HostInfo) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// ErrClosed: the Client was closed.
var ErrClosed = errors.New("cluster client closed")

// Start places thread's agent of profile on a host alive that runs profile,
// whose labels match every "key=value" of selector, and that has the most
// room, and starts it there. When no host has room it calls onWait once
// and waits for one until ctx ends (with ctx's cause). The Remote's Proc
// carries the agent's stdin and stdout, its Host serves its files and
// terminals from the host, Where is the host's name.
func (c *Client) Start(ctx context.Context, thread, profile string, selector []string, onWait func()) (pool.Remote, error) {
	return c.StartPreferring(ctx, thread, profile, selector, "", onWait)
}

// StartPreferring is Start for a thread whose workspace is on host prefer
// (its earlier agent ran there): while that host is alive, runs profile
// and matches selector, the agent goes there, waiting for room there if
// it has none, since on another host the thread would lose its files;
// only a host lost, gone or no longer fit lets it go elsewhere.
func (c *Client) StartPreferring(ctx context.Context, thread, profile string, selector []string, prefer string, onWait func()) (pool.Remote, error) {
	sel, err := ParseLabels(selector)
	if err != nil {
		return pool.Remote{}, fmt.Errorf("hosts: %w", err)
	}
	select {
	case <-c.ready:
	case <-c.stop:
		return pool.Remote{}, ErrClosed
	case <-ctx.Done():
		return pool.Remote{}, context.Cause(ctx)
	}
	waited := false
	refused := make(map[string]uint64) // host name → the beat it refused at
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return pool.Remote{}, ErrClosed
		}
		h := c.pickLocked(profile, sel, refused, prefer)
		if h == nil {
			ch := c.changed
			c.mu.Unlock()
			if !waited {
				waited = true
				if onWait != nil {
					onWait()
				}
			}
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return pool.Remote{}, context.Cause(ctx)
			}
		}
		id := nuid.Next()
		h.pending[id] = true
		name, instance, seq := h.beat.Name, h.beat.Instance, h.seq
		c.mu.Unlock()
		r, full, err := c.startOn(ctx, id, name, instance, thread, profile)
		if err != nil || full {
			c.mu.Lock()
			delete(h.pending, id)
			c.mu.Unlock()
		}
		switch {
		case full:
			refused[name] = seq
		case err != nil:
			return pool.Remote{}, err
		default:
			return r, nil
		}
	}
}

// pickLocked is the host with the most room for profile matching sel, not
// refused since its last beat; nil when none has room. A host prefer that
// fits is the only one considered.
func (c *Client) pickLocked(profile string, sel map[string]string, refused map[string]uint64, prefer string) *hostState {
	fits := func(h *hostState) bool {
		if h.lost || !slices.Contains(h.beat.Profiles, profile) {
			return false
		}
		for k, v := range sel {
			if h.beat.Labels[k] != v {
				return false
			}
		}
		return true
	}
	if h := c.hosts[prefer]; h != nil && fits(h) {
		if seq, ok := refused[prefer]; (ok && seq == h.seq) || h.beat.Capacity-h.beat.Running-len(h.pending) <= 0 {
			return nil
		}
		return h
	}
	var best *hostState
	bestFree := 0
	for name, h := range c.hosts {
		if !fits(h) {
			continue
		}
		if seq, ok := refused[name]; ok && seq == h.seq {
			continue
		}
		free := h.beat.Capacity - h.beat.Running - len(h.pending)
		if free > bestFree || (free == bestFree && free > 0 && best != nil && name < best.beat.Name) {
			best, bestFree = h, free
		}
	}
	return best
}

// errHostLostWhileStarting ends a start whose host was lost before it
// answered.
var errHostLostWhileStarting = errors.New("the agent host was lost while starting the agent")

// startOn asks one host to start the agent. full reports a refusal for
// lack of room (or a host that no longer answers its start subject).
func (c *Client) startOn(ctx context.Context, id, host, instance, thread, profile string) (r pool.Remote, full bool, err error) {
	a, err := c.newRemote(id, host, instance, thread)
	if err != nil {
		return pool.Remote{}, false, err
	}
	req := startRequest{ID: id, Thread: thread, Profile: profile, Broker: c.o.Broker, BrokerInstance: c.instance}
	rctx, cancel := context.WithTimeoutCause(ctx, c.o.StartTimeout, fmt.Errorf("agent host %s did not start the agent within %s", host, c.o.StartTimeout))
	defer cancel()
	// A host lost while it starts the agent will not answer: the start
	// ends with the loss, and goes to another host.
	rctx, lose := context.WithCancelCause(rctx)
	defer lose(nil)
	watchDone := make(chan struct{})
	defer close(watchDone)
	go func() {
		select {
		case <-a.lost:
			lose(errHostLostWhileStarting)
		case <-watchDone:
		}
	}()
	msg, err := c.nc.RequestWithContext(rctx, hostStartSubject(instance), mustJSON(req))
	if err != nil {
		a.discard()
		if errors.Is(err, nats.ErrNoResponders) {
			return pool.Remote{}, true, nil
		}
		if errors.Is(context.Cause(rctx), errHostLostWhileStarting) && ctx.Err() == nil {
			c.log.Warn().Str("thread", thread).Str("host", host).Msg("cluster: agent host lost while starting an agent; trying another")
			return pool.Remote{}, true, nil
		}
		if cause := context.Cause(rctx); cause != nil {
			err = cause
		}
		return pool.Remote{}, false, fmt.Errorf("agent host %s: starting an agent: %w", host, err)
	}
	var rep startReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		a.discard()
		return pool.Remote{}, false, fmt.Errorf("agent host %s: an unreadable answer to a start: %w", host, err)
	}
	if rep.Full {
		a.discard()
		return pool.Remote{}, true, nil
	}
	if rep.Error != "" {
		a.discard()
		return pool.Remote{}, false, fmt.Errorf("agent host %s: %s", host, rep.Error)
	}
	a.pid, a.terminals = rep.PID, rep.Terminals
	c.log.Info().Str("thread", thread).Str("host", host).Str("agent", id).Int("pid", rep.PID).Msg("cluster: agent started on a host")
	return pool.Remote{Proc: a, Host: &remoteHost{a: a}, Dir: rep.Dir, Where: host, Shared: rep.Shared,
		HostMCP: rep.MCPServers != nil, MCPServers: rep.MCPServers}, false, nil
}

// Close ends every agent still known (their Exited close) and releases
// what the Client holds. Safe to call twice.
func (c *Client) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.loopDone
		return
	}
	c.closed = true
	subs := c.subs
	c.subs = nil
	agents := slices.Collect(maps.Values(c.agents))
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	for _, sub := range subs {
		_ = sub.Unsubscribe()
	}
	for _, a := range agents {
		a.release()
		a.end(ErrClosed, "", true)
		a.discard()
	}
	close(c.stop)
	<-c.loopDone
	c.wg.Wait()
}
