package fakeslack

import (
	"net/http"

	"acpbroker/internal/fakehttp"
)

// Chaos makes a share of calls fail at random, on top of the scripted
// faults (Inject429, InjectError, InjectDrop…) and the real buckets: a
// long run sees the failures Slack hands out now and then without a
// script naming each one. ErrorStatuses defaults to 503. The zero value
// injects nothing.
type Chaos = fakehttp.Chaos[Call]

// ChaosCounts counts the failures Chaos injected.
type ChaosCounts = fakehttp.ChaosCounts

// SetChaos starts injecting random failures as c says, replacing any
// earlier Chaos; SetChaos(Chaos{}) stops. Counts carry over.
func (s *Server) SetChaos(c Chaos) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chaos.Set(c, http.StatusServiceUnavailable)
}

// ChaosCounts returns how many failures Chaos has injected so far.
func (s *Server) ChaosCounts() ChaosCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.chaos.Counts()
}
