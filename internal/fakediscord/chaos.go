package fakediscord

import (
	"math/rand/v2"
	"net/http"
	"time"
)

// Chaos makes a share of REST requests fail at random, on top of the
// scripted faults (Inject429, InjectError) and the real buckets: a long
// run sees the failures Discord hands out now and then without a script
// naming each one. The zero value injects nothing.
type Chaos struct {
	// Seed makes the draws repeatable for one sequence of requests.
	Seed uint64
	// Rate429 is the share of matching requests answered 429 with
	// retry_after RetryAfter (default 1s), as if their bucket had run
	// out; RateError the share answered with one of ErrorStatuses
	// (default 502, which discordgo retries), picked in turn.
	Rate429       float64
	RetryAfter    time.Duration
	RateError     float64
	ErrorStatuses []int
	// Match limits the chaos to some requests (nil: all of them).
	Match Match
}

// ChaosCounts counts the failures Chaos injected.
type ChaosCounts struct {
	TooManyRequests int
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
		c.ErrorStatuses = []int{http.StatusBadGateway}
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
		for k, v := range s.chaos.counts.Errors {
			out.Errors[k] = v
		}
	}
	return out
}

// chaosLocked draws for one request: a fault to answer it with, or nil.
func (s *Server) chaosLocked(r Request) *fault {
	c := s.chaos
	if c == nil || (c.cfg.Rate429 <= 0 && c.cfg.RateError <= 0) {
		return nil
	}
	if c.cfg.Match != nil && !c.cfg.Match(r) {
		return nil
	}
	x := c.rng.Float64()
	switch {
	case x < c.cfg.Rate429:
		c.counts.TooManyRequests++
		return &fault{status: http.StatusTooManyRequests, retryAfter: c.cfg.RetryAfter}
	case x < c.cfg.Rate429+c.cfg.RateError:
		status := c.cfg.ErrorStatuses[c.next%len(c.cfg.ErrorStatuses)]
		c.next++
		c.counts.Errors[status]++
		return &fault{status: status}
	}
	return nil
}
