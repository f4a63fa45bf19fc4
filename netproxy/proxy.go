package netproxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Defaults and fixed bounds of a Proxy.
const (
	defaultDialTimeout = 10 * time.Second
	defaultIdleTimeout = 10 * time.Minute
	defaultMaxConns    = 256

	// maxHeaderBytes bounds a request's line and headers.
	maxHeaderBytes = 16 << 10
	// maxResponseHeaderBytes bounds an upstream's response line and
	// headers.
	maxResponseHeaderBytes = 64 << 10
	// headerTimeout bounds the wait for a request's line and headers.
	headerTimeout = 10 * time.Second
	// replyTimeout bounds writing a refusal or an error to an agent.
	replyTimeout = 5 * time.Second
	// acceptBackoff is the pause after a failed Accept (too many open
	// files) before the next.
	acceptBackoff = 100 * time.Millisecond
)

// Errors a proxied connection ends with.
var (
	// ErrClosed is the cause of the work of a closed Listener or Proxy.
	ErrClosed = errors.New("netproxy: closed")
	// errServed ends the work of a connection that has been served.
	errServed = errors.New("netproxy: connection served")
	// errDialTimeout is the cause of a resolution or dial past DialTimeout.
	errDialTimeout = errors.New("took longer than the dial timeout")
)

// Options configure a Proxy.
type Options struct {
	Logger zerolog.Logger
	// Resolve resolves a host name (nil: net.DefaultResolver.LookupNetIP
	// "ip").
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// DialTimeout bounds resolving and dialling an upstream (default 10s).
	DialTimeout time.Duration
	// IdleTimeout closes a tunnel or request with no bytes either way
	// this long (default 10m).
	IdleTimeout time.Duration
	// MaxConns is how many connections each Serve (each agent) may have
	// open at once (default 256); a connection past it is answered 503
	// and closed.
	MaxConns int
}

// Owner is who a listener serves: one agent.
type Owner struct {
	Profile, Thread string
	Allow           Allow
	// Key names the allow list's configuration key for messages, e.g.
	// `agent.allow_hosts` or `agents.codex.allow_hosts`.
	Key string
	// OnRefused, if set, is called (must not block) for each refused
	// connection, from one of the listener's goroutines: calls may come
	// from several at once.
	OnRefused func(Refusal)
}

// Refusal is one connection refused.
type Refusal struct {
	// Host is the host as asked; empty when the connection was refused
	// before its request was read (too many connections open).
	Host string
	Port int
	// Reason says why in words: "not in agents.codex.allow_hosts",
	// "resolves to 127.0.0.1, a loopback address", …
	Reason string
}

// Proxy serves agents' proxy sockets. It is a prometheus.Collector of its
// connections. Its methods are safe for concurrent use.
type Proxy struct {
	log         zerolog.Logger
	resolve     func(ctx context.Context, host string) ([]netip.Addr, error)
	dialTimeout time.Duration
	idleTimeout time.Duration
	maxConns    int

	open atomic.Int64 // tunnels and requests open now

	mu        sync.Mutex
	closed    bool
	listeners map[*Listener]struct{} // those served and not closed
	// profiles are the counters of each profile ever served, kept for
	// the proxy's life (they are counters): as many as the configuration
	// names profiles.
	profiles map[string]*counts
}

// counts are one profile's counters.
type counts struct {
	allowed, refused atomic.Uint64
}

// New returns a proxy serving nothing yet.
func New(opts Options) *Proxy {
	p := &Proxy{
		log:         opts.Logger,
		resolve:     opts.Resolve,
		dialTimeout: opts.DialTimeout,
		idleTimeout: opts.IdleTimeout,
		maxConns:    opts.MaxConns,
		listeners:   map[*Listener]struct{}{},
		profiles:    map[string]*counts{},
	}
	if p.resolve == nil {
		p.resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if p.dialTimeout <= 0 {
		p.dialTimeout = defaultDialTimeout
	}
	if p.idleTimeout <= 0 {
		p.idleTimeout = defaultIdleTimeout
	}
	if p.maxConns <= 0 {
		p.maxConns = defaultMaxConns
	}
	return p
}

// Listener is one agent's proxy socket being served.
type Listener struct {
	p      *Proxy
	ln     net.Listener
	owner  Owner
	log    zerolog.Logger
	counts *counts
	// ctx ends when the listener is closed; resolutions and dials
	// derive from it.
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	closed  bool
	conns   map[net.Conn]struct{} // the agent's connections and their upstreams
	clients int                   // how many of conns are the agent's: at most maxConns

	wg        sync.WaitGroup // every goroutine serving this listener
	closeOnce sync.Once
	closeErr  error
}

// Serve serves ln (a Unix listener the caller made) for owner until the
// returned Listener is closed or p is closed. It does not block. The
// Listener owns ln from now on: closing it closes ln.
func (p *Proxy) Serve(ln net.Listener, owner Owner) *Listener {
	ctx, cancel := context.WithCancelCause(context.Background())
	l := &Listener{
		p:      p,
		ln:     ln,
		owner:  owner,
		log:    p.log.With().Str("profile", owner.Profile).Str("thread", owner.Thread).Logger(),
		ctx:    ctx,
		cancel: cancel,
		conns:  map[net.Conn]struct{}{},
	}
	p.mu.Lock()
	c := p.profiles[owner.Profile]
	if c == nil {
		c = &counts{}
		p.profiles[owner.Profile] = c
	}
	l.counts = c
	closed := p.closed
	if !closed {
		p.listeners[l] = struct{}{}
	}
	p.mu.Unlock()
	if closed {
		l.Close()
		return l
	}
	l.wg.Go(l.accept)
	return l
}

// Close stops accepting, closes every connection (tunnels included) and
// returns once every goroutine of this listener has returned. Safe to
// call twice, and from several goroutines at once.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		l.cancel(ErrClosed)
		l.mu.Lock()
		l.closed = true
		conns := l.conns
		l.conns = nil
		l.mu.Unlock()
		if err := l.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			l.closeErr = err
		}
		for c := range conns {
			c.Close()
		}
		l.p.mu.Lock()
		delete(l.p.listeners, l)
		l.p.mu.Unlock()
	})
	l.wg.Wait()
	return l.closeErr
}

// Close closes every listener as Listener.Close does; a Serve after it
// returns a closed Listener. Safe to call twice.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	ls := make([]*Listener, 0, len(p.listeners))
	for l := range p.listeners {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	var errs []error
	for _, l := range ls {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

// accept takes the agent's connections until the listener is closed.
func (l *Listener) accept() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if l.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			l.log.Warn().Err(err).Msg("network proxy cannot accept a connection")
			t := time.NewTimer(acceptBackoff)
			select {
			case <-l.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		switch l.admit(c) {
		case admitted:
			l.wg.Go(func() { l.serve(c) })
		case full:
			l.refuseFull(c)
		case shut:
			c.Close()
			return
		}
	}
}

type admission int

const (
	admitted admission = iota
	full
	shut
)

// admit counts c among the agent's connections if there is room.
func (l *Listener) admit(c net.Conn) admission {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return shut
	case l.clients >= l.p.maxConns:
		return full
	}
	l.conns[c] = struct{}{}
	l.clients++
	return admitted
}

// track counts an upstream connection as the listener's, to be closed
// with it; false (and up closed) if the listener is closed.
func (l *Listener) track(up net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		up.Close()
		return false
	}
	l.conns[up] = struct{}{}
	return true
}

// release closes c and forgets it; client says whether it was one the
// agent made.
func (l *Listener) release(c net.Conn, client bool) {
	c.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conns == nil {
		return // closed: Close has forgotten them all
	}
	delete(l.conns, c)
	if client {
		l.clients--
	}
}

// refuseFull answers a connection past MaxConns 503 and closes it.
func (l *Listener) refuseFull(c net.Conn) {
	defer c.Close()
	r := Refusal{Reason: "too many connections open (at most " + itoa(l.p.maxConns) + ")"}
	l.refused(r)
	reply(c, 503, "acp-broker: "+r.Reason)
}

// refused counts, logs and reports a refusal.
func (l *Listener) refused(r Refusal) {
	l.counts.refused.Add(1)
	l.log.Info().Str("host", r.Host).Int("port", r.Port).Str("reason", r.Reason).Msg("network connection refused")
	if l.owner.OnRefused != nil {
		l.owner.OnRefused(r)
	}
}
