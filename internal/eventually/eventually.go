// Package eventually waits in tests for a condition that something
// running elsewhere (a goroutine, a subprocess, a server) makes true, so
// that each test need not write its own polling loop with a deadline.
//
// Use it only where the code emits no event to wait on; to show that
// something did NOT happen, wait on the event that proves it could no
// longer happen (or use testing/synctest), never on the clock.
package eventually

import (
	"testing"
	"time"
)

// Patience is how long True waits: room for a loaded machine, far more
// than any condition here should take.
const Patience = 10 * time.Second

// Tick is how often a condition is checked.
const Tick = 10 * time.Millisecond

// True waits until cond returns true, checking it at once and then every
// Tick, and fails the test (tb.Fatalf, so call it from the test's
// goroutine) if it is still false after Patience; what names the awaited
// condition in the failure.
func True(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	Within(tb, Patience, what, cond)
}

// Within is True with a bound of its own: for a test whose bound is part
// of what it checks ("the child is killed within 3s").
func Within(tb testing.TB, bound time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !Wait(bound, cond) {
		tb.Fatalf("waiting for %s: not within %s", what, bound)
	}
}

// Wait is the wait of Within without the failure: it reports whether
// cond came true within bound.
func Wait(bound time.Duration, cond func() bool) bool {
	if cond() {
		return true
	}
	deadline := time.NewTimer(bound)
	defer deadline.Stop()
	tick := time.NewTicker(Tick)
	defer tick.Stop()
	for {
		select {
		case <-deadline.C:
			return cond()
		case <-tick.C:
			if cond() {
				return true
			}
		}
	}
}
