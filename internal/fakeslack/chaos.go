package fakeslack

import (
	"math/rand/v2"
	"net/http"
	"time"
)

// Chaos makes a share of calls fail at random, on top of the scripted
// faults (Inject429, InjectError, InjectDrop…) and the real buckets: a
// long run sees the failures Slack hands out now and then without a
// script naming each one. The zero value injects nothing.
type Chaos struct {
	// Seed makes the draws repeatable for one sequence of calls.
	Seed uint64
	// Rate429 is the share of matching calls answered 429 with
	// Retry-After RetryAfter (default 1s); RateError the share answered
	// with one of ErrorStatuses (default 503), picked in turn; RateDrop
	// the share whose connection is cut without an answer.
	Rate429       float64
	RetryAfter    time.Duration
	RateError     float64
	ErrorStatuses []int
	RateDrop      float64
	// Match limits the chaos to some calls (nil: all of them).
	Match Match
}

// ChaosCounts counts the failures Chaos injected.
type ChaosCounts struct {
	TooManyRequests int
	Drops           int
	// Errors counts the error answers by status.
	Errors map[int]int
}

type chaosState struct {
	cfg    Chaos
	rng    *rand.Rand
	next   int // index into cfg.ErrorStatuses
	counts ChaosCounts
}

// SetChaos starts injecting random failures as c says, replacing any
// earlier Chaos; SetChaos(Chaos{}) stops. Counts carry over.
func (s *Server) SetChaos(c Chaos) {
	if c.RetryAfter <= 0 {
		c.RetryAfter = time.Second
	}
	if len(c.ErrorStatuses) == 0 {
		c.ErrorStatuses = []int{http.StatusServiceUnavailable}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	counts := ChaosCounts{Errors: map[int]int{}}
	if s.chaos != nil {
		counts = s.chaos.counts
	}
	s.chaos = &chaosState{cfg: c, rng: rand.New(rand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15)), counts: counts}
}

// ChaosCounts returns how many failures Chaos has injected so far.
func (s *Server) ChaosCounts() ChaosCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := ChaosCounts{Errors: map[int]int{}}
	if s.chaos != nil {
		out.TooManyRequests = s.chaos.counts.TooManyRequests
		out.Drops = s.chaos.counts.Drops
		for k, v := range s.chaos.counts.Errors {
			out.Errors[k] = v
		}
	}
	return out
}

// chaosLocked draws for one call: a fault to answer it with, or nil.
func (s *Server) chaosLocked(c Call) *fault {
	ch := s.chaos
	if ch == nil || (ch.cfg.Rate429 <= 0 && ch.cfg.RateError <= 0 && ch.cfg.RateDrop <= 0) {
		return nil
	}
	if ch.cfg.Match != nil && !ch.cfg.Match(c) {
		return nil
	}
	x := ch.rng.Float64()
	switch {
	case x < ch.cfg.Rate429:
		ch.counts.TooManyRequests++
		return &fault{status: http.StatusTooManyRequests, retryAfter: ch.cfg.RetryAfter}
	case x < ch.cfg.Rate429+ch.cfg.RateError:
		status := ch.cfg.ErrorStatuses[ch.next%len(ch.cfg.ErrorStatuses)]
		ch.next++
		ch.counts.Errors[status]++
		return &fault{status: status}
	case x < ch.cfg.Rate429+ch.cfg.RateError+ch.cfg.RateDrop:
		ch.counts.Drops++
		return &fault{drop: true}
	}
	return nil
}
