package web

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"acpbroker/chat/thread"
	"acpbroker/internal/ttlcache"

	"golang.org/x/time/rate"
)

// The sign-in's bounds: how long a link is good for, how many may wait
// and how many sign-ins last at once (the least recently used goes
// first past it), and how often one address may try to sign in.
const (
	LinkTTL        = 10 * time.Minute
	maxLinks       = 1024
	maxSessions    = 4096
	maxSignInAddrs = 4096
	signInsPerMin  = 10
)

// cookieName is the session cookie's.
const cookieName = "acp_session"

// errTooManyLinks: more sign-in links wait than the broker keeps.
var errTooManyLinks = errors.New("too many sign-in links are waiting; try again in a few minutes")

// Person is who a session is for: a chat user of a platform, or an
// operator who signed in with an API token (Admin, its name).
type Person struct {
	Platform string
	User     thread.User
	Admin    string
}

// id names the person, for the bounds on what one may hold.
func (p Person) id() string {
	if p.Admin != "" {
		return "admin:" + p.Admin
	}
	return p.Platform + ":" + p.User.ID
}

// name is the person's name for people.
func (p Person) name() string {
	switch {
	case p.Admin != "":
		return p.Admin + " (operator)"
	case p.User.Name != "":
		return p.User.Name
	case p.User.Handle != "":
		return p.User.Handle
	}
	return p.User.ID
}

// link is a sign-in link waiting to be used.
type link struct {
	person Person
	thread string
}

// session is a sign-in: its person and the token its forms carry.
type session struct {
	person Person
	csrf   string
}

// newToken is 32 random bytes, as text for a URL or a cookie.
func newToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// signIns holds the links and sessions; its methods are safe for
// concurrent use.
type signIns struct {
	mu       sync.Mutex
	links    *ttlcache.Cache[string, link]
	sessions *ttlcache.Cache[string, session]
	addrs    *ttlcache.Cache[string, *rate.Limiter]
	now      func() time.Time
}

func newSignIns(ttl time.Duration, now func() time.Time) *signIns {
	return &signIns{
		links:    ttlcache.New[string, link](maxLinks, LinkTTL, now),
		sessions: ttlcache.New[string, session](maxSessions, ttl, now),
		addrs:    ttlcache.New[string, *rate.Limiter](maxSignInAddrs, time.Minute, now),
		now:      now,
	}
}

// link makes a sign-in link's token for p, to thread.
func (s *signIns) link(p Person, thread string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.links.Len() >= maxLinks {
		s.links.Put("", link{}) // sweeps the expired ones
		s.links.Remove("")
		if s.links.Len() >= maxLinks {
			return "", errTooManyLinks
		}
	}
	tok := newToken()
	s.links.Put(tok, link{person: p, thread: thread})
	return tok, nil
}

// use takes the link of tok, once, and starts its session: the
// session's cookie value and the link.
func (s *signIns) use(tok string) (string, link, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.links.Peek(tok)
	if !ok || tok == "" {
		return "", link{}, false
	}
	s.links.Remove(tok)
	return s.startLocked(l.person), l, true
}

// start starts a session for p and returns its cookie value.
func (s *signIns) start(p Person) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startLocked(p)
}

func (s *signIns) startLocked(p Person) string {
	id := newToken()
	s.sessions.Put(id, session{person: p, csrf: newToken()})
	return id
}

// session is the session of cookie value id.
func (s *signIns) session(id string) (session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id == "" {
		return session{}, false
	}
	return s.sessions.Peek(id)
}

// end ends the session of cookie value id.
func (s *signIns) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessions.Remove(id)
}

// counts are how many links wait and sessions last.
func (s *signIns) counts() (links, sessions int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.links.Len(), s.sessions.Len()
}

// allow reports whether addr may try to sign in now.
func (s *signIns) allow(addr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.addrs.Get(addr)
	if !ok {
		l = rate.NewLimiter(rate.Every(time.Minute/signInsPerMin), signInsPerMin)
		s.addrs.Put(addr, l)
	}
	return l.AllowN(s.now(), 1)
}

// clientAddr is the address a request came from, without its port:
// the connection's, or, when that is a trusted proxy's, the rightmost
// address of X-Forwarded-For that is not a trusted proxy's (those left of
// it are the client's to write). A proxy's header that names no address
// there leaves the connection's.
func (s *Server) clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil || !s.trusted(peer) {
		return host
	}
	var hops []string
	for _, h := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(h, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			return host
		}
		if a = a.Unmap(); !s.trusted(a) {
			return a.String()
		}
	}
	return host
}

// trusted reports whether a is a trusted proxy's address.
func (s *Server) trusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range s.cfg.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// sameToken compares two secrets in constant time.
func sameToken(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
