// Package fakehttp holds the HTTP failures the fake chat platforms
// share: faults scripted for the next matching requests, random chaos,
// and the stall or cut connection that ends a request, so that a fake
// keeps only what its platform says in a failure (headers, bodies).
package fakehttp

import (
	"net/http"
	"time"
)

// Fault is how one request fails. The zero value answers as usual.
type Fault struct {
	// Status is the HTTP status to answer with: 429, or an error
	// status; 0 when the fault is only a Stall or a Drop.
	Status int
	// RetryAfter goes with 429: how long the client is told to wait.
	RetryAfter time.Duration
	// Drop cuts the connection without an answer, as a network failure
	// would.
	Drop bool
	// Stall holds the answer this long; the request is handled as
	// usual.
	Stall time.Duration
}

// scripted is a fault waiting for the next left requests match selects.
type scripted[R, F any] struct {
	match func(R) bool
	left  int
	fault F
}

// Script is the list of faults a test injected, tried in the order
// injected; a request uses at most one. F is the fake's own fault type
// (a Fault and what its platform adds). The zero value is empty. A
// Script is not safe for concurrent use: its server's lock guards it.
type Script[R, F any] struct {
	pending []*scripted[R, F]
}

// Add makes the next n requests that match fail with f.
func (s *Script[R, F]) Add(match func(R) bool, n int, f F) {
	if n <= 0 {
		return
	}
	s.pending = append(s.pending, &scripted[R, F]{match: match, left: n, fault: f})
}

// Take returns the first pending fault matching r and uses it up; ok is
// false when none matches.
func (s *Script[R, F]) Take(r R) (f F, ok bool) {
	for i, p := range s.pending {
		if p.match(r) {
			p.left--
			if p.left == 0 {
				s.pending = append(s.pending[:i:i], s.pending[i+1:]...)
			}
			return p.fault, true
		}
	}
	return f, false
}

// Len returns how many faults are still pending.
func (s *Script[R, F]) Len() int { return len(s.pending) }

// Hold waits out a stall: until d has passed, the request's context
// ends (the client gave up) or quit is closed (the server closes).
func Hold(r *http.Request, d time.Duration, quit <-chan struct{}) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	case <-quit:
	}
}

// Cut ends a request without an answer: the connection is closed under
// the client, which sees a network failure. It does not return to the
// handler when the connection cannot be taken over; the server then
// aborts the request itself.
func Cut(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}
