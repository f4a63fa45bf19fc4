package fakehttp

import "sync"

// Injector holds the failures of a fake's requests: the faults a test
// scripted for the next matching ones and the random Chaos, under a lock
// of its own. A fake embeds it, so that its SetChaos and ChaosCounts are
// the injector's, and asks Next for each request's fate. R is the fake's
// record of a request, F its own fault type (a Fault and what its
// platform adds). Make one with NewInjector.
type Injector[R, F any] struct {
	errorStatus int
	fromChaos   func(Fault) F

	mu     sync.Mutex
	script Script[R, F]
	dice   Dice[R]
}

// NewInjector returns an Injector whose Chaos answers errorStatus when it
// names no ErrorStatuses, and which makes the fake's fault of a drawn one
// with fromChaos.
func NewInjector[R, F any](errorStatus int, fromChaos func(Fault) F) *Injector[R, F] {
	return &Injector[R, F]{errorStatus: errorStatus, fromChaos: fromChaos}
}

// SetChaos starts injecting random failures as c says, replacing any
// earlier Chaos; SetChaos of the zero Chaos stops. Counts carry over.
func (in *Injector[R, F]) SetChaos(c Chaos[R]) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.dice.Set(c, in.errorStatus)
}

// ChaosCounts returns how many failures Chaos has injected so far.
func (in *Injector[R, F]) ChaosCounts() ChaosCounts {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.dice.Counts()
}

// Inject makes the next n requests that match fail with f. Faults are
// tried in the order injected; a request uses at most one.
func (in *Injector[R, F]) Inject(match func(R) bool, n int, f F) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.script.Add(match, n, f)
}

// Next returns the fault r is to fail with: the first scripted one that
// matches, used up, or else one Chaos draws; ok is false when r goes
// through.
func (in *Injector[R, F]) Next(r R) (f F, ok bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if f, ok = in.script.Take(r); ok {
		return f, true
	}
	drawn, ok := in.dice.Draw(r)
	if !ok {
		return f, false
	}
	return in.fromChaos(drawn), true
}
