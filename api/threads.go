package api

import (
	"sync"
	"time"

	"acpbroker/internal/ttlcache"
)

// Headless threads are kept while their prompts are (state.retention,
// a week by default), at most maxThreads, the least recently used
// forgotten first.
const (
	threadTTL  = 7 * 24 * time.Hour
	maxThreads = 10000
)

// threads are the headless threads the API's prompts opened, with the
// token that owns each. It owns its lock, held by no one while another
// lock is taken.
type threads struct {
	mu sync.Mutex
	m  *ttlcache.Cache[string, string]
}

func newThreads(now func() time.Time) *threads {
	return &threads{m: ttlcache.New[string, string](maxThreads, threadTTL, now)}
}

// use records thread, token's, as used at at.
func (t *threads) use(thread, token string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m.PutAt(thread, token, at)
}

// owner is the token whose prompts opened thread, if it is known.
func (t *threads) owner(thread string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m.Peek(thread)
}

// HeadlessThread reports whether thread is one a headless prompt opened
// (for Headless.Known).
func (s *Server) HeadlessThread(thread string) bool {
	_, ok := s.threads.owner(thread)
	return ok
}
