package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"acpbroker/config"
	"acpbroker/internal/ttlcache"

	"golang.org/x/time/rate"
)

// tokenEntry is a token with its digest, compared in constant time.
type tokenEntry struct {
	config.APIToken
	digest [32]byte
}

// Failed authentications are limited by remote address: authFailures a
// minute, in a burst of as many; past them the address is answered 429
// (whatever token it sends) until one is allowed again. At most
// maxFailingAddrs addresses are remembered, the one that failed least
// recently forgotten first; an address is forgotten anyway a minute
// after its last failure, when its allowance is whole again.
const (
	authFailures    = 20
	maxFailingAddrs = 4096
)

// auth is who may call the API: the tokens, each token's rate limit and
// each address's failures. It owns its lock, held by no one while
// another lock is taken.
type auth struct {
	now func() time.Time

	mu       sync.Mutex
	tokens   []tokenEntry
	rate     int                      // requests a token may make a minute
	limits   map[string]*rate.Limiter // by token name; the configured ones only
	failures *ttlcache.Cache[string, *rate.Limiter]
}

func newAuth(now func() time.Time) *auth {
	return &auth{now: now, limits: map[string]*rate.Limiter{},
		failures: ttlcache.New[string, *rate.Limiter](maxFailingAddrs, time.Minute, now)}
}

// perMinute is a limiter's rate for n a minute, in a burst of as many
// (at least one).
func perMinute(n int) (rate.Limit, int) {
	n = max(n, 1)
	return rate.Every(time.Minute / time.Duration(n)), n
}

// set changes the tokens and the rate limit (a reload): a token no
// longer configured loses its limiter, the others keep what they spent.
func (a *auth) set(tokens []config.APIToken, perMin int) {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.tokens = a.tokens[:0]
	names := map[string]bool{}
	for _, t := range tokens {
		a.tokens = append(a.tokens, tokenEntry{APIToken: t, digest: sha256.Sum256([]byte(t.Token))})
		names[t.Name] = true
	}
	a.rate = perMin
	limit, burst := perMinute(perMin)
	for name, l := range a.limits {
		if !names[name] {
			delete(a.limits, name)
			continue
		}
		l.SetLimitAt(now, limit)
		l.SetBurstAt(now, burst)
	}
}

// wait is how long until l has a request to spend (0: it has one now),
// rounded up to the nanosecond.
func wait(l *rate.Limiter, now time.Time) time.Duration {
	left := l.TokensAt(now)
	if left >= 1 {
		return 0
	}
	return time.Duration(math.Ceil((1 - left) / float64(l.Limit()) * float64(time.Second)))
}

// tooMany answers 429, asking the client to wait wait (rounded up to a
// whole second, as Retry-After counts).
func tooMany(w http.ResponseWriter, wait time.Duration, format string, args ...any) {
	w.Header().Set("Retry-After", fmt.Sprint(int(wait/time.Second)+1))
	fail(w, http.StatusTooManyRequests, "", format, args...)
}

// authenticate finds the request's token, compared in constant time
// with every token's (by their digests, so that neither the length nor
// a prefix tells), and spends one of its requests; it answers 401 or
// 429 itself and returns nil then. A token is never logged.
func (a *auth) authenticate(w http.ResponseWriter, r *http.Request) *tokenEntry {
	addr := remoteHost(r)
	now := a.now()
	a.mu.Lock()
	var blocked time.Duration
	if l, ok := a.failures.Peek(addr); ok {
		blocked = wait(l, now)
	}
	a.mu.Unlock()
	if blocked > 0 {
		tooMany(w, blocked, "more than %d failed authentications from %s in a minute: try again in %s", authFailures, addr, blocked.Round(time.Second)+time.Second)
		return nil
	}
	given, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || given == "" {
		a.failed(addr, now)
		w.Header().Set("WWW-Authenticate", `Bearer realm="acp-broker"`)
		fail(w, http.StatusUnauthorized, "", "no bearer token: send Authorization: Bearer <token>")
		return nil
	}
	digest := sha256.Sum256([]byte(strings.TrimSpace(given)))
	a.mu.Lock()
	var found *tokenEntry
	for i := range a.tokens {
		if subtle.ConstantTimeCompare(digest[:], a.tokens[i].digest[:]) == 1 {
			t := a.tokens[i]
			found = &t
		}
	}
	if found == nil {
		a.mu.Unlock()
		a.failed(addr, now)
		w.Header().Set("WWW-Authenticate", `Bearer realm="acp-broker", error="invalid_token"`)
		fail(w, http.StatusUnauthorized, "", "the bearer token is not one of the broker's")
		return nil
	}
	l := a.limits[found.Name]
	if l == nil {
		l = rate.NewLimiter(perMinute(a.rate))
		a.limits[found.Name] = l
	}
	perMin := a.rate
	later := wait(l, now)
	if later == 0 {
		l.AllowN(now, 1)
	}
	a.mu.Unlock()
	if later > 0 {
		tooMany(w, later, "token %s made more than %d requests in a minute: try again in %s", found.Name, perMin, later.Round(time.Second)+time.Second)
		return nil
	}
	return found
}

// failed spends one of addr's failed authentications.
func (a *auth) failed(addr string, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	l, ok := a.failures.Get(addr)
	if !ok {
		l = rate.NewLimiter(perMinute(authFailures))
	}
	l.AllowN(now, 1)
	// Put again: the minute it is kept starts at its last failure.
	a.failures.Put(addr, l)
}

// remoteHost is the address a request came from, without its port.
func remoteHost(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}
