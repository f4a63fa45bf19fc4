package api

import (
	"sync"
	"time"
)

// Bounds of the ended prompts kept in memory (their events for late
// streams; GET reads the store after): at most keepEnded of them, for
// keepEndedAt, in keepEndedBytes in all, each keeping its last
// endedEventBytes of events and its clipped answer.
const (
	keepEnded       = 1000
	keepEndedAt     = 10 * time.Minute
	keepEndedBytes  = 64 << 20
	endedEventBytes = 256 << 10
)

// registry is the prompts in memory: running, and ended ones until the
// bounds above drop them, oldest first. It owns its lock, held by no one
// while another lock is taken (a prompt's own is never taken under it).
type registry struct {
	now func() time.Time

	mu   sync.Mutex
	live map[string]*prompt // by id
	done []endedPrompt      // ended prompts in memory, oldest first
	// doneBytes is what the ended prompts in memory keep, in all.
	doneBytes int
}

// endedPrompt is an ended prompt kept in memory: when it ended and the
// bytes it keeps.
type endedPrompt struct {
	id    string
	at    time.Time
	bytes int
}

func newRegistry(now func() time.Time) *registry {
	return &registry{now: now, live: map[string]*prompt{}}
}

// add keeps p, by id, until it has ended and the bounds drop it (or
// remove).
func (g *registry) add(id string, p *prompt) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.live[id] = p
}

// remove forgets a prompt that never started.
func (g *registry) remove(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.live, id)
}

// get is the prompt id in memory, or nil.
func (g *registry) get(id string) *prompt {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sweepLocked()
	return g.live[id]
}

// all is every prompt in memory, ended or not.
func (g *registry) all() []*prompt {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]*prompt, 0, len(g.live))
	for _, p := range g.live {
		out = append(out, p)
	}
	return out
}

// ended moves a prompt, which keeps bytes now, to the ended ones kept in
// memory, dropping the oldest beyond what is kept.
func (g *registry) ended(id string, at time.Time, bytes int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.done = append(g.done, endedPrompt{id: id, at: at, bytes: bytes})
	g.doneBytes += bytes
	g.sweepLocked()
}

// kept is how many ended prompts are in memory, and the bytes they keep.
func (g *registry) kept() (n, bytes int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.done), g.doneBytes
}

func (g *registry) sweepLocked() {
	now := g.now()
	for len(g.done) > 0 {
		e := g.done[0]
		if len(g.done) <= keepEnded && g.doneBytes <= keepEndedBytes && now.Sub(e.at) < keepEndedAt {
			return
		}
		delete(g.live, e.id)
		g.doneBytes -= e.bytes
		g.done[0] = endedPrompt{}
		g.done = g.done[1:]
	}
}
