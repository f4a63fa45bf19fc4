package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"

	"acpbroker/acp"
	"acpbroker/pool"
)

// Starter starts agents on an agent host: *pool.Pool through Bare, or a
// stand-in in tests.
type Starter interface {
	// Start starts thread's agent of profile, as this host defines the
	// profile. It returns ErrFull (wrapped or not) when the host has no
	// room, and must not wait long for room: the broker tries another host.
	Start(ctx context.Context, thread, profile string) (Started, error)
}

// Started is an agent a Starter started.
type Started struct {
	Proc pool.Proc
	Host pool.AgentHost
	Dir  string
	// Release stops the agent (with a grace) if it still runs and frees
	// what it holds. The Server calls it exactly once.
	Release func()
	// MCPServers are the MCP servers of the profile as this host defines
	// it: the broker gives them to the agent's session.
	MCPServers []acp.MCPServer
	// Usage, if set, says what the agent uses (its control group's
	// memory and CPU); it is told to its broker at every beat.
	Usage func() (pool.Usage, error)
	// AfterTurn, if set, runs on the host after each of the thread's
	// turns (a worktree's branch pushed to the shared repository), one at
	// a time, within AfterTurnTimeout; a turn ending while one runs has it
	// run once more after.
	AfterTurn func(ctx context.Context) error
}

// AfterTurnTimeout bounds one Started.AfterTurn.
const AfterTurnTimeout = 2 * time.Minute

// ErrFull is a Starter's refusal for lack of room.
var ErrFull = errors.New("agent host has no room")

// ServerOptions configure an agent host's side.
type ServerOptions struct {
	// Name is the host's name (cluster.name), shown to brokers.
	Name string
	// Labels are host.labels, each "key=value".
	Labels []string
	// Capacity is host.capacity: agents at most.
	Capacity int
	// Profiles are the names of the profiles this host runs.
	Profiles []string
	// BeatInterval is how often the host announces itself; 2 s when zero.
	BeatInterval time.Duration
	// OwnerTimeout is how long a broker instance may stay silent before the
	// agents it asked for are stopped, and how long a new run of a broker
	// has to take over the agents of the run before it (see
	// Client.Adopt); 30 s when zero.
	OwnerTimeout time.Duration
	// CutTimeout is how long the host may be cut off from its NATS server
	// before it stops every agent it runs; 10 times OwnerTimeout when
	// zero. A NATS server down for everyone loses no broker its hosts, so
	// it is long; but nothing runs forever for a cluster that is gone.
	CutTimeout time.Duration
	// StartTimeout bounds one Starter.Start; 2 min when zero.
	StartTimeout time.Duration
	// Window bounds the bytes of an agent's stdout not yet consumed by the
	// broker (4 MiB when zero); Resend is how long without an
	// acknowledgement before chunks are sent again (500 ms when zero).
	Window int
	Resend time.Duration
	Logger zerolog.Logger
}

// Server runs agents for brokers on this host.
type Server struct {
	nc       *nats.Conn
	starter  Starter
	o        ServerOptions
	instance string
	labels   map[string]string
	log      zerolog.Logger
	stats    relayStats
	chunk    int
	maxReply int

	mu       sync.Mutex
	closed   bool
	agents   map[string]*hostAgent
	reserved int // starts under way
	brokers  map[string]brokerSeen
	resumed  time.Time // when the connection last came back
	cut      time.Time // when the connection went, while it is gone
	subs     []*nats.Subscription

	stop     chan struct{}
	loopDone chan struct{}
	wg       sync.WaitGroup
}

type brokerSeen struct {
	instance string
	last     time.Time
}

// hostAgent is an agent this host runs for a broker.
type hostAgent struct {
	id, thread, profile  string
	owner, ownerInstance string
	st                   Started
	out                  *sender
	in                   *receiver
	subs                 []*nats.Subscription
	releaseOnce          sync.Once
	released             chan struct{} // closed once Release has returned
	abandoned            chan struct{}
	abandonOnce          sync.Once
	callsMu              sync.Mutex
	calls                map[string]context.CancelCauseFunc // requests being served, by call id
	endedAt              time.Time                          // under Server.mu: its end is sent, its slot free
	why                  string                             // under Server.mu: why the host stopped it, if it did
	kept                 []byte                             // under Server.mu: what its broker keeps beside it (ctlKeep)
	orphaned             time.Time                          // under Server.mu: since when no run of its broker has it (a new run was heard, or it was left)
	gone                 chan struct{}                      // closed once the Server has forgotten it
	afterMu              sync.Mutex
	afterRunning         bool // an AfterTurn runs
	afterAgain           bool // a turn ended while it ran

	afterErr string // the kind of the last AfterTurn failure told (see afterTurnDone)
}

// turned runs the agent's AfterTurn, or has the one running run again.
func (s *Server) turned(a *hostAgent) {
	if a.st.AfterTurn == nil {
		return
	}
	a.afterMu.Lock()
	if a.afterRunning {
		a.afterAgain = true
		a.afterMu.Unlock()
		return
	}
	a.afterRunning = true
	a.afterMu.Unlock()
	s.wg.Go(func() {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), AfterTurnTimeout)
			go func() { // the Server's close ends it too
				select {
				case <-s.stop:
					cancel()
				case <-ctx.Done():
				}
			}()
			s.afterTurnDone(a, a.st.AfterTurn(ctx))
			cancel()
			a.afterMu.Lock()
			if !a.afterAgain {
				a.afterRunning = false
				a.afterMu.Unlock()
				return
			}
			a.afterAgain = false
			a.afterMu.Unlock()
		}
	})
}

// ParseLabels reads host.labels ("key=value" each) into a map.
func ParseLabels(list []string) (map[string]string, error) {
	m := make(map[string]string, len(list))
	for _, l := range list {
		k, v, ok := strings.Cut(l, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%q is not key=value", l)
		}
		m[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return m, nil
}

// Serve announces this host and starts the agents brokers ask for, until
// Close.
func Serve(nc *nats.Conn, s Starter, o ServerOptions) (*Server, error) {
	labels, err := ParseLabels(o.Labels)
	if err != nil {
		return nil, fmt.Errorf("host.labels: %w", err)
	}
	if o.Capacity <= 0 {
		return nil, fmt.Errorf("host.capacity: %d; a host runs at least one agent", o.Capacity)
	}
	if o.Name == "" {
		o.Name, _ = os.Hostname()
	}
	if o.BeatInterval <= 0 {
		o.BeatInterval = 2 * time.Second
	}
	if o.OwnerTimeout <= 0 {
		o.OwnerTimeout = 30 * time.Second
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 2 * time.Minute
	}
	if o.CutTimeout <= 0 {
		o.CutTimeout = 10 * o.OwnerTimeout
	}
	if o.Window <= 0 {
		o.Window = defaultWindow
	}
	if o.Resend <= 0 {
		o.Resend = defaultResend
	}
	srv := &Server{
		nc: nc, starter: s, o: o, instance: nuid.Next(), labels: labels,
		log:      o.Logger.With().Str("host", o.Name).Logger(),
		chunk:    chunkSize(nc),
		maxReply: replyLimit(nc),
		agents:   make(map[string]*hostAgent),
		brokers:  make(map[string]brokerSeen),
		stop:     make(chan struct{}),
		loopDone: make(chan struct{}),
	}
	for subj, h := range map[string]nats.MsgHandler{
		hostStartSubject(srv.instance): srv.onStart,
		hostAdoptSubject(srv.instance): srv.onAdopt,
		subjAsk:                        func(*nats.Msg) { srv.beat() },
		subjBrokerBeat:                 srv.onBrokerBeat,
	} {
		sub, err := nc.Subscribe(subj, h)
		if err != nil {
			srv.unsubscribe()
			return nil, fmt.Errorf("cluster: subscribing to %s: %w", subj, err)
		}
		srv.subs = append(srv.subs, sub)
	}
	srv.beat()
	go srv.loop()
	return srv, nil
}

// Instance is this run's id: a host seen with another has restarted.
func (s *Server) Instance() string { return s.instance }

func chunkSize(nc *nats.Conn) int {
	c := defaultChunk
	if mp := int(nc.MaxPayload()); mp > 0 && mp-payloadHeadroom < c {
		c = max(mp-payloadHeadroom, 1024)
	}
	return c
}

// replyLimit is the most a reply's JSON may hold.
func replyLimit(nc *nats.Conn) int {
	mp := int(nc.MaxPayload())
	if mp <= 0 {
		mp = 1 << 20
	}
	return mp - payloadHeadroom
}

func (s *Server) unsubscribe() {
	s.mu.Lock()
	subs := s.subs
	s.subs = nil
	s.mu.Unlock()
	for _, sub := range subs {
		_ = sub.Unsubscribe()
	}
}

// loop beats, resends and stops the agents of brokers gone.
func (s *Server) loop() {
	defer close(s.loopDone)
	tick := time.NewTicker(min(s.o.BeatInterval, s.o.Resend) / 2)
	defer tick.Stop()
	lastBeat := time.Now()
	for {
		select {
		case <-s.stop:
			return
		case now := <-tick.C:
			if now.Sub(lastBeat) >= s.o.BeatInterval {
				s.beat()
				lastBeat = now
			}
			s.sweep(now)
		}
	}
}

func (s *Server) sweep(now time.Time) {
	s.mu.Lock()
	if !s.nc.IsConnected() {
		s.resumed = now
		if s.cut.IsZero() {
			s.cut = now
		}
	} else {
		s.cut = time.Time{}
	}
	var gone []*hostAgent
	var why []string
	for _, a := range s.agents {
		a.out.tick(now)
		b, ok := s.brokers[a.owner]
		switch {
		case !s.cut.IsZero() && now.Sub(s.cut) > s.o.CutTimeout && a.endedAt.IsZero():
			gone = append(gone, a)
			why = append(why, fmt.Sprintf("the agent host was cut off from the cluster for %s", now.Sub(s.cut).Round(time.Second)))
		case !a.endedAt.IsZero() && now.Sub(a.endedAt) > s.o.OwnerTimeout:
			gone = append(gone, a)
			why = append(why, "its end was not taken by the broker")
		case !a.orphaned.IsZero() && now.Sub(a.orphaned) > s.o.OwnerTimeout:
			gone = append(gone, a)
			why = append(why, "its broker left it, and no run of it took it over")
		case !ok:
		case b.instance != a.ownerInstance:
			// The new run takes it over (onAdopt), or lets it go: one
			// that does neither within OwnerTimeout is not coming for it.
			if a.orphaned.IsZero() {
				a.orphaned = now
			}
		case now.Sub(b.last) > s.o.OwnerTimeout && now.Sub(s.resumed) > s.o.OwnerTimeout:
			gone = append(gone, a)
			why = append(why, fmt.Sprintf("its broker was not heard for %s", now.Sub(b.last).Round(time.Second)))
		}
	}
	for name, b := range s.brokers {
		if now.Sub(b.last) > 2*s.o.OwnerTimeout && !s.ownsLocked(name) {
			delete(s.brokers, name)
		}
	}
	s.mu.Unlock()
	for i, a := range gone {
		s.abandon(a, why[i])
	}
}

// runningLocked counts the agents that hold a slot: those not yet ended.
func (s *Server) runningLocked() int {
	n := 0
	for _, a := range s.agents {
		if a.endedAt.IsZero() {
			n++
		}
	}
	return n
}

func (s *Server) ownsLocked(broker string) bool {
	for _, a := range s.agents {
		if a.owner == broker {
			return true
		}
	}
	return false
}

func (s *Server) onBrokerBeat(m *nats.Msg) {
	var b brokerBeat
	if json.Unmarshal(m.Data, &b) != nil || b.Name == "" {
		return
	}
	s.mu.Lock()
	if _, ok := s.brokers[b.Name]; ok || len(s.brokers) < maxMembers {
		s.brokers[b.Name] = brokerSeen{instance: b.Instance, last: time.Now()}
	}
	s.mu.Unlock()
}

// beat publishes what this host is and runs.
func (s *Server) beat() {
	s.mu.Lock()
	b := hostBeat{Name: s.o.Name, Instance: s.instance, Labels: s.labels, Profiles: s.o.Profiles,
		Capacity: s.o.Capacity, Running: s.runningLocked()}
	var usages []func() (pool.Usage, error)
	for _, a := range s.agents {
		if a.endedAt.IsZero() {
			b.Agents = append(b.Agents, beatAgent{ID: a.id, Broker: a.ownerInstance})
			usages = append(usages, a.st.Usage)
		}
	}
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return
	}
	for i, usage := range usages { // read off the lock: a control group's files
		if usage == nil {
			continue
		}
		if u, err := usage(); err != nil {
			b.Agents[i].UsageError = err.Error()
		} else {
			b.Agents[i].Usage = &u
		}
	}
	b.MemTotal, b.MemAvailable = memInfo()
	_ = s.nc.Publish(subjHostBeat, mustJSON(b))
}

func (s *Server) onStart(m *nats.Msg) {
	var req startRequest
	if err := json.Unmarshal(m.Data, &req); err != nil || req.ID == "" {
		_ = m.Respond(mustJSON(startReply{Error: "cluster: a start request that could not be read"}))
		return
	}
	s.mu.Lock()
	if s.closed || s.runningLocked()+s.reserved >= s.o.Capacity || s.agents[req.ID] != nil {
		s.mu.Unlock()
		_ = m.Respond(mustJSON(startReply{Full: true}))
		return
	}
	if !slices.Contains(s.o.Profiles, req.Profile) {
		s.mu.Unlock()
		_ = m.Respond(mustJSON(startReply{Error: fmt.Sprintf("agent host %s does not run profile %q", s.o.Name, req.Profile)}))
		return
	}
	s.reserved++
	if b, ok := s.brokers[req.Broker]; !ok || b.instance != req.BrokerInstance {
		s.brokers[req.Broker] = brokerSeen{instance: req.BrokerInstance, last: time.Now()}
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		s.start(m, req)
	}()
}

func (s *Server) start(m *nats.Msg, req startRequest) {
	ctx, cancel := context.WithTimeoutCause(context.Background(), s.o.StartTimeout, errors.New("the agent did not start in time"))
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	log := s.log.With().Str("thread", req.Thread).Str("agent", req.ID).Logger()
	st, err := s.starter.Start(ctx, req.Thread, req.Profile)
	if err != nil {
		s.mu.Lock()
		s.reserved--
		s.mu.Unlock()
		if errors.Is(err, ErrFull) {
			_ = m.Respond(mustJSON(startReply{Full: true}))
			return
		}
		log.Warn().Err(err).Msg("cluster: starting an agent failed")
		_ = m.Respond(mustJSON(startReply{Error: err.Error()}))
		return
	}
	a := &hostAgent{id: req.ID, thread: req.Thread, profile: req.Profile, owner: req.Broker,
		ownerInstance: req.BrokerInstance, st: st,
		released: make(chan struct{}), abandoned: make(chan struct{}), gone: make(chan struct{}),
		calls: make(map[string]context.CancelCauseFunc)}
	a.out = newSender(s.nc, agentSubject(a.id, "out"), s.o.Window, s.chunk, s.o.Resend, &s.stats)
	a.in = newReceiver(s.nc, agentSubject(a.id, "inack"), s.o.Window, &s.stats, nil)
	for subj, h := range map[string]nats.MsgHandler{
		agentSubject(a.id, "in"):     a.in.onMsg,
		agentSubject(a.id, "outack"): a.out.onAck,
		agentSubject(a.id, "ctl"):    func(m *nats.Msg) { s.onCtl(a, m) },
	} {
		sub, err := s.nc.Subscribe(subj, h)
		if err != nil {
			for _, sub := range a.subs {
				_ = sub.Unsubscribe()
			}
			s.mu.Lock()
			s.reserved--
			s.mu.Unlock()
			s.release(a)
			_ = m.Respond(mustJSON(startReply{Error: fmt.Sprintf("cluster: subscribing to %s: %v", subj, err)}))
			return
		}
		a.subs = append(a.subs, sub)
	}
	s.mu.Lock()
	s.reserved--
	if s.closed {
		s.mu.Unlock()
		for _, sub := range a.subs {
			_ = sub.Unsubscribe()
		}
		s.release(a)
		_ = m.Respond(mustJSON(startReply{Error: "the agent host is shutting down"}))
		return
	}
	s.agents[a.id] = a
	s.mu.Unlock()
	log.Info().Int("pid", st.Proc.PID()).Str("profile", req.Profile).Msg("cluster: agent started")
	_ = m.Respond(mustJSON(startReply{Dir: st.Dir, Terminals: st.Host.Terminals(), PID: st.Proc.PID(), Shared: st.AfterTurn != nil,
		MCPServers: orNone(st.MCPServers)}))
	s.beat()
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		s.pumpIn(a)
	}()
	go func() {
		defer s.wg.Done()
		s.pumpOut(a)
	}()
}

// pumpIn writes what the broker sends into the agent's stdin, and closes
// it at the stream's end.
func (s *Server) pumpIn(a *hostAgent) {
	stdin := a.st.Proc.Stdin()
	buf := make([]byte, s.chunk)
	for {
		n, err := a.in.Read(buf)
		if n > 0 {
			if _, werr := stdin.Write(buf[:n]); werr != nil {
				break
			}
		}
		a.in.wrote()
		if err != nil {
			break
		}
	}
	_ = stdin.Close()
	a.in.Close() // what still comes is acknowledged and dropped
}

// pumpOut sends the agent's stdout, then its end, then releases it and,
// once the broker has every byte (or is gone), forgets it.
func (s *Server) pumpOut(a *hostAgent) {
	defer close(a.gone)
	readerDone := make(chan struct{})
	a.st.Proc.Monitor(readerDone)
	stdout := a.st.Proc.Stdout()
	buf := make([]byte, s.chunk)
	for {
		n, err := stdout.Read(buf)
		if n > 0 {
			if _, werr := a.out.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	close(readerDone)
	select {
	case <-a.st.Proc.Exited():
	case <-a.abandoned:
	}
	s.release(a)
	<-a.st.Proc.Reaped()
	end := endInfo{Stderr: tail(a.st.Proc.StderrTail(), 4<<10)}
	if err := a.st.Proc.ExitErr(); err != nil {
		end.Err = err.Error()
	}
	s.mu.Lock()
	if a.why != "" {
		end.Err = a.why + " (" + end.Err + ")"
	}
	s.mu.Unlock()
	_ = a.out.queueFrame(kindEnd, mustJSON(end))
	s.mu.Lock()
	a.endedAt = time.Now() // no longer counted: its slot is free
	s.mu.Unlock()
	s.beat()
	for !a.out.drained() {
		a.out.mu.Lock()
		ch := a.out.changed
		a.out.mu.Unlock()
		if a.out.drained() {
			break
		}
		select {
		case <-ch:
		case <-a.abandoned:
			a.out.fail(errors.New("abandoned"))
		}
	}
	s.mu.Lock()
	delete(s.agents, a.id)
	s.mu.Unlock()
	for _, sub := range a.subs {
		_ = sub.Unsubscribe()
	}
	a.in.fail(errStreamClosed)
	a.callsMu.Lock()
	for _, c := range a.calls {
		c(errors.New("the agent has ended"))
	}
	a.callsMu.Unlock()
	s.log.Info().Str("agent", a.id).Str("thread", a.thread).Msg("cluster: agent ended")
}

// release calls the agent's Release once; later calls wait for it.
func (s *Server) release(a *hostAgent) {
	a.releaseOnce.Do(func() {
		defer close(a.released)
		if a.st.Release != nil {
			a.st.Release()
		}
	})
	<-a.released
}

// abandon stops an agent whose broker is gone or asked so: nothing it
// writes is kept for the broker any more.
func (s *Server) abandon(a *hostAgent, why string) {
	a.abandonOnce.Do(func() {
		s.log.Info().Str("agent", a.id).Str("thread", a.thread).Str("cause", why).Msg("cluster: stopping an agent")
		close(a.abandoned)
		err := errors.New(why)
		a.out.fail(err)
		a.in.fail(err)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.release(a)
		}()
	})
}

// Close stops taking agents, stops every agent it runs (each within ctx,
// then killed), and returns once they and every goroutine of the Server
// are gone.
func (s *Server) Close(ctx context.Context) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.loopDone
		return
	}
	s.closed = true
	agents := make([]*hostAgent, 0, len(s.agents))
	for _, a := range s.agents {
		agents = append(agents, a)
	}
	subs := s.subs
	s.subs = nil
	s.mu.Unlock()
	for _, sub := range subs {
		_ = sub.Unsubscribe()
	}
	why := fmt.Sprintf("agent host %s is shutting down", s.o.Name)
	s.mu.Lock()
	for _, a := range agents {
		a.why = why
	}
	s.mu.Unlock()
	var stops sync.WaitGroup
	for _, a := range agents {
		stops.Go(func() {
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			s.mu.Lock()
			left := !a.orphaned.IsZero()
			s.mu.Unlock()
			if s.nc.IsClosed() || left { // no end can reach a broker
				s.abandon(a, why)
			}
			// Stopped, its end still reaches its broker, in these words.
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.release(a)
			}()
			select {
			case <-a.gone:
			case <-actx.Done():
				s.abandon(a, why)
				a.st.Proc.Kill()
			}
		})
	}
	stops.Wait()
	close(s.stop)
	s.wg.Wait()
	<-s.loopDone
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// memInfo reads MemTotal and MemAvailable, in bytes, from /proc/meminfo;
// zeros where it cannot.
func memInfo() (total, avail uint64) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, 0
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "MemTotal:":
			total = v * 1024
		case "MemAvailable:":
			avail = v * 1024
		}
	}
	return total, avail
}
