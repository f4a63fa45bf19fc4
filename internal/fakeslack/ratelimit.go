package fakeslack

import (
	"net/http"
	"time"

	"acpbroker/internal/fakehttp"
)

// RateLimit is a token bucket: Limit calls per Per on average, and up to
// Burst at once (Burst 0 means Limit).
type RateLimit struct {
	Limit int
	Per   time.Duration
	Burst int
}

// Slack's tiers: calls per minute, with bursts.
var (
	Tier1 = RateLimit{Limit: 1, Per: time.Minute}
	Tier2 = RateLimit{Limit: 20, Per: time.Minute}
	Tier3 = RateLimit{Limit: 50, Per: time.Minute}
	Tier4 = RateLimit{Limit: 100, Per: time.Minute}
	// Special is the fake's figure for the methods Slack documents as
	// "special" (auth.test, chat.getPermalink,
	// assistant.threads.setStatus): several hundred a minute.
	Special = RateLimit{Limit: 600, Per: time.Minute, Burst: 100}
	// PostMessage is chat.postMessage's limit in each channel: about one
	// a second, with short bursts.
	PostMessage = RateLimit{Limit: 1, Per: time.Second, Burst: 3}
)

// DefaultRateLimits returns the limit of each method the fake serves, as
// Slack documents its tier. chat.postMessage is limited per channel, the
// others per workspace.
func DefaultRateLimits() map[string]RateLimit {
	return map[string]RateLimit{
		"auth.test":                             Special,
		"apps.connections.open":                 Tier3,
		"chat.postMessage":                      PostMessage,
		"chat.update":                           Tier3,
		"chat.delete":                           Tier3,
		"chat.postEphemeral":                    Tier4,
		"chat.getPermalink":                     Special,
		"chat.startStream":                      Tier2,
		"chat.appendStream":                     Tier4,
		"chat.stopStream":                       Tier2,
		"reactions.add":                         Tier3,
		"reactions.remove":                      Tier2,
		"reactions.get":                         Tier3,
		"conversations.info":                    Tier3,
		"conversations.replies":                 Tier3,
		"conversations.history":                 Tier3,
		"conversations.open":                    Tier3,
		"users.info":                            Tier4,
		"usergroups.list":                       Tier2,
		"usergroups.users.list":                 Tier2,
		"views.open":                            Tier4,
		"views.push":                            Tier4,
		"views.update":                          Tier4,
		"files.getUploadURLExternal":            Tier4,
		"files.completeUploadExternal":          Tier4,
		"files.info":                            Tier4,
		"files.upload":                          Tier2,
		"assistant.threads.setStatus":           Special,
		"assistant.threads.setTitle":            Tier4,
		"assistant.threads.setSuggestedPrompts": Tier4,
	}
}

type bucket struct {
	tokens float64
	last   time.Time
}

// takeLocked spends a token of the bucket key under the limit of method,
// and reports how long to wait when there is none (0: go ahead).
func (s *Server) takeLocked(method, key string, now time.Time) time.Duration {
	if s.opts.NoRateLimits {
		return 0
	}
	lim, ok := s.opts.RateLimits[method]
	if !ok || lim.Limit <= 0 || lim.Per <= 0 {
		return 0
	}
	burst := float64(lim.Burst)
	if burst <= 0 {
		burst = float64(lim.Limit)
	}
	rate := float64(lim.Limit) / lim.Per.Seconds() // tokens a second
	b := s.buckets[key]
	if b == nil {
		b = &bucket{tokens: burst, last: now}
		s.buckets[key] = b
	}
	b.tokens = min(burst, b.tokens+now.Sub(b.last).Seconds()*rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	return time.Duration((1 - b.tokens) / rate * float64(time.Second))
}

// Match selects calls for fault injection.
type Match func(Call) bool

// OnMethod matches the calls of a method.
func OnMethod(name string) Match {
	return func(c Call) bool { return c.Method == name }
}

// OnMethodIn matches the calls of a method about a channel.
func OnMethodIn(name, channelID string) Match {
	return func(c Call) bool { return c.Method == name && c.Channel() == channelID }
}

// AnyCall matches every call.
func AnyCall() Match { return func(Call) bool { return true } }

// fault is how a call fails: the shared kinds, and Slack's own answer
// 200 {"ok":false,"error":slackError}.
type fault struct {
	fakehttp.Fault
	slackError string
}

// Inject429 makes the next n calls that match answer 429 ratelimited
// with Retry-After set to retryAfter (in whole seconds, rounded up),
// whatever their bucket says. Faults are tried in the order injected; a
// call consumes at most one.
func (s *Server) Inject429(match Match, n int, retryAfter time.Duration) {
	s.Inject(match, n, fault{Fault: fakehttp.Fault{Status: http.StatusTooManyRequests, RetryAfter: retryAfter}})
}

// InjectError makes the next n calls that match answer an HTTP error
// status (500, 502, 503…) with an HTML body, as Slack's front ends do.
func (s *Server) InjectError(match Match, n int, status int) {
	s.Inject(match, n, fault{Fault: fakehttp.Fault{Status: status}})
}

// InjectSlackError makes the next n calls that match answer 200 with
// {"ok": false, "error": code}: internal_error, fatal_error,
// service_unavailable, or any method error.
func (s *Server) InjectSlackError(match Match, n int, code string) {
	s.Inject(match, n, fault{Fault: fakehttp.Fault{Status: http.StatusOK}, slackError: code})
}

// InjectDrop makes the next n calls that match fail as a network failure
// would: the connection is closed without an answer.
func (s *Server) InjectDrop(match Match, n int) {
	s.Inject(match, n, fault{Fault: fakehttp.Fault{Drop: true}})
}

// InjectStall makes the next n calls that match take d before they are
// answered: a slow Slack. The call is handled as usual; only its answer
// waits (Close, or the client giving up, ends the wait).
func (s *Server) InjectStall(match Match, n int, d time.Duration) {
	s.Inject(match, n, fault{Fault: fakehttp.Fault{Stall: d}})
}

// injectLocked applies a scripted fault or Chaos to a call; hit is false
// when neither applies. A stall comes back as an action with stall set,
// the call to be handled as usual.
func (s *Server) injectLocked(rec *Call) (action, reply, bool) {
	f, ok := s.Next(*rec)
	if !ok {
		return action{}, nil, false
	}
	rec.Injected = true
	switch {
	case f.Stall > 0:
		return action{status: http.StatusOK, stall: f.Stall}, nil, true
	case f.Drop:
		return action{drop: true}, nil, true
	case f.slackError != "":
		return action{status: http.StatusOK}, fail(f.slackError), true
	case f.Status == http.StatusTooManyRequests:
		rec.RateLimited = true
		rec.RetryAfter = f.RetryAfter
		return action{status: f.Status, retryAfter: f.RetryAfter}, fail("ratelimited"), true
	}
	return action{status: f.Status}, nil, true
}
