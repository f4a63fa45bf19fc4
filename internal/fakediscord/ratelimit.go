package fakediscord

import (
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"strconv"
	"time"

	"acpbroker/internal/fakehttp"
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

// fault is how a request fails: the shared kinds, and Discord's global
// 429.
type fault struct {
	fakehttp.Fault
	global bool
}

// Inject429 makes the next n requests that match answer 429 with
// retry_after (and Retry-After, X-RateLimit-Reset-After) set to
// retryAfter, whatever their bucket says. Faults are tried in the order
// injected; a request consumes at most one.
func (s *Server) Inject429(match Match, n int, retryAfter time.Duration) {
	s.Inject(match, n, fault{Fault: fakehttp.Fault{Status: http.StatusTooManyRequests, RetryAfter: retryAfter}})
}

// InjectGlobal429 is Inject429 with the global flag set (JSON "global":
// true and X-RateLimit-Global), which makes discordgo hold every bucket.
func (s *Server) InjectGlobal429(match Match, n int, retryAfter time.Duration) {
	s.Inject(match, n, fault{Fault: fakehttp.Fault{Status: http.StatusTooManyRequests, RetryAfter: retryAfter}, global: true})
}

// InjectError makes the next n requests that match answer status with a
// Discord error body (e.g. 500, or 502, which discordgo retries).
func (s *Server) InjectError(match Match, n int, status int) {
	s.Inject(match, n, fault{Fault: fakehttp.Fault{Status: status}})
}

// InjectDrop makes the next n requests that match fail as a network
// failure would: the connection is closed without an answer.
func (s *Server) InjectDrop(match Match, n int) {
	s.Inject(match, n, fault{Fault: fakehttp.Fault{Drop: true}})
}

// InjectStall makes the next n requests that match take d before they are
// answered: a slow Discord. The request is handled as usual; only its
// answer waits (Close, or the client giving up, ends the wait).
func (s *Server) InjectStall(match Match, n int, d time.Duration) {
	s.Inject(match, n, fault{Fault: fakehttp.Fault{Stall: d}})
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
