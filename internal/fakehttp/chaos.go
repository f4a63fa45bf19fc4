package fakehttp

import (
	"maps"
	"math/rand/v2"
	"net/http"
	"time"
)

// Chaos makes a share of requests fail at random, on top of the
// scripted faults and the real buckets: a long run sees the failures a
// platform hands out now and then without a script naming each one. R
// is the fake's record of a request. The zero value injects nothing.
type Chaos[R any] struct {
	// Seed makes the draws repeatable for one sequence of requests.
	Seed uint64
	// Rate429 is the share of matching requests answered 429 with
	// RetryAfter (default 1s), as if their bucket had run out;
	// RateError the share answered with one of ErrorStatuses (default:
	// the fake's), picked in turn; RateDrop the share whose connection
	// is cut without an answer.
	Rate429       float64
	RetryAfter    time.Duration
	RateError     float64
	ErrorStatuses []int
	RateDrop      float64
	// Match limits the chaos to some requests (nil: all of them).
	Match func(R) bool
}

// ChaosCounts counts the failures Chaos injected.
type ChaosCounts struct {
	TooManyRequests int
	Drops           int
	// Errors counts the error answers by status.
	Errors map[int]int
}

// Dice draws the chaos for each request. The zero value draws nothing.
// Dice is not safe for concurrent use: its server's lock guards it.
type Dice[R any] struct {
	cfg    Chaos[R]
	rng    *rand.Rand
	next   int // index into cfg.ErrorStatuses
	counts ChaosCounts
}

// Set starts drawing as c says, replacing any earlier Chaos; an empty
// Chaos stops. errorStatus is the status answered when c names none.
// The counts carry over.
func (d *Dice[R]) Set(c Chaos[R], errorStatus int) {
	if c.RetryAfter <= 0 {
		c.RetryAfter = time.Second
	}
	if len(c.ErrorStatuses) == 0 {
		c.ErrorStatuses = []int{errorStatus}
	}
	d.cfg = c
	d.rng = rand.New(rand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15))
	d.next = 0
}

// Counts returns how many failures have been drawn so far.
func (d *Dice[R]) Counts() ChaosCounts {
	out := d.counts
	out.Errors = maps.Clone(d.counts.Errors)
	if out.Errors == nil {
		out.Errors = map[int]int{}
	}
	return out
}

// Draw decides the fate of one request: a fault to answer it with, and
// whether there is one.
func (d *Dice[R]) Draw(r R) (Fault, bool) {
	c := &d.cfg
	if d.rng == nil || (c.Rate429 <= 0 && c.RateError <= 0 && c.RateDrop <= 0) {
		return Fault{}, false
	}
	if c.Match != nil && !c.Match(r) {
		return Fault{}, false
	}
	if d.counts.Errors == nil {
		d.counts.Errors = map[int]int{}
	}
	x := d.rng.Float64()
	switch {
	case x < c.Rate429:
		d.counts.TooManyRequests++
		return Fault{Status: http.StatusTooManyRequests, RetryAfter: c.RetryAfter}, true
	case x < c.Rate429+c.RateError:
		status := c.ErrorStatuses[d.next%len(c.ErrorStatuses)]
		d.next++
		d.counts.Errors[status]++
		return Fault{Status: status}, true
	case x < c.Rate429+c.RateError+c.RateDrop:
		d.counts.Drops++
		return Fault{Drop: true}, true
	}
	return Fault{}, false
}
