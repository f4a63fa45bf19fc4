package fakediscord

import (
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"strconv"
	"time"
)

// bucket is a fixed window: up to limit requests from start until reset.
type bucket struct {
	count int
	reset time.Time
}

// resetSlack is added to the reset time the headers advertise. discordgo
// turns X-RateLimit-Reset-After into a duration by truncating the
// fraction (4.123 can come out as 4.122s), so a client that honours the
// headers to the letter could otherwise arrive a hair before the window
// ends.
const resetSlack = 2 * time.Millisecond

// limitFor returns the bucket size of a route.
func (s *Server) limitFor(route string) RateLimit {
	if l, ok := s.opts.RateLimits[route]; ok && l.Limit > 0 && l.Per > 0 {
		return l
	}
	return s.opts.DefaultRateLimit
}

func bucketHash(route string) string {
	h := fnv.New64a()
	h.Write([]byte(route))
	return fmt.Sprintf("%016x", h.Sum64())
}

// secs renders a duration as seconds with millisecond precision, rounded
// up.
func secs(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	ms := math.Ceil(float64(d) / float64(time.Millisecond))
	return strconv.FormatFloat(ms/1000, 'f', 3, 64)
}

// takeLocked counts a request against its bucket, sets the rate-limit
// headers, and reports how long to wait if the bucket is exhausted (0:
// go ahead).
func (s *Server) takeLocked(h http.Header, route, major string, now time.Time) time.Duration {
	lim := s.limitFor(route)
	key := route + "|" + major
	b := s.buckets[key]
	if b == nil || !now.Before(b.reset) {
		b = &bucket{reset: now.Add(lim.Per)}
		s.buckets[key] = b
	}
	limited := !s.opts.NoRateLimits && b.count >= lim.Limit
	if !limited {
		b.count++
	}
	remaining := lim.Limit - b.count
	if s.opts.NoRateLimits && remaining < 1 {
		remaining = lim.Limit
	}
	advertised := b.reset.Add(resetSlack)
	h.Set("X-RateLimit-Limit", strconv.Itoa(lim.Limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(remaining))
	h.Set("X-RateLimit-Reset", strconv.FormatFloat(float64(advertised.UnixMilli())/1000, 'f', 3, 64))
	h.Set("X-RateLimit-Reset-After", secs(advertised.Sub(now)))
	h.Set("X-RateLimit-Bucket", bucketHash(route))
	if limited {
		return advertised.Sub(now)
	}
	return 0
}

// Match selects requests for fault injection.
type Match func(Request) bool

// OnRoute matches requests for a route key (a Route* constant).
func OnRoute(route string) Match {
	return func(r Request) bool { return r.Route == route }
}

// OnRouteIn matches requests for a route key whose major parameter (the
// channel, guild or interaction token) is major.
func OnRouteIn(route, major string) Match {
	return func(r Request) bool { return r.Route == route && r.Major == major }
}

// AnyRequest matches every request.
func AnyRequest() Match { return func(Request) bool { return true } }

type fault struct {
	match      Match
	left       int
	status     int
	retryAfter time.Duration
	global     bool
	stall      time.Duration // answer normally, but only after this long
}

// Inject429 makes the next n requests that match answer 429 with
// retry_after (and Retry-After, X-RateLimit-Reset-After) set to
// retryAfter, whatever their bucket says. Faults are tried in the order
// injected; a request consumes at most one.
func (s *Server) Inject429(match Match, n int, retryAfter time.Duration) {
	s.inject(&fault{match: match, left: n, status: http.StatusTooManyRequests, retryAfter: retryAfter})
}

// InjectGlobal429 is Inject429 with the global flag set (JSON "global":
// true and X-RateLimit-Global), which makes discordgo hold every bucket.
func (s *Server) InjectGlobal429(match Match, n int, retryAfter time.Duration) {
	s.inject(&fault{match: match, left: n, status: http.StatusTooManyRequests, retryAfter: retryAfter, global: true})
}

// InjectError makes the next n requests that match answer status with a
// Discord error body (e.g. 500, or 502, which discordgo retries).
func (s *Server) InjectError(match Match, n int, status int) {
	s.inject(&fault{match: match, left: n, status: status})
}

// InjectStall makes the next n requests that match take d before they are
// answered: a slow Discord. The request is handled as usual; only its
// answer waits (Close, or the client giving up, ends the wait).
func (s *Server) InjectStall(match Match, n int, d time.Duration) {
	s.inject(&fault{match: match, left: n, stall: d})
}

func (s *Server) inject(f *fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, f)
}

// faultLocked returns the first pending fault matching r and uses it up.
func (s *Server) faultLocked(r Request) *fault {
	for i, f := range s.faults {
		if f.left > 0 && f.match(r) {
			f.left--
			if f.left == 0 {
				s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
			}
			return f
		}
	}
	return nil
}

// rateLimitedBody is the 429 body; retry_after is in seconds.
func rateLimitedBody(wait time.Duration, global bool) map[string]any {
	ra, _ := strconv.ParseFloat(secs(wait), 64)
	return map[string]any{
		"message":     "You are being rate limited.",
		"retry_after": ra,
		"global":      global,
	}
}

func setRetryAfter(h http.Header, wait time.Duration, scope string) {
	h.Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
	h.Set("X-RateLimit-Scope", scope)
}
