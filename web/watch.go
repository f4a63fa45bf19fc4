package web

import "errors"

// The bounds of the browsers watching threads (Server-Sent Events): per
// person and in all.
const (
	maxWatchersPerPerson = 8
	maxWatchers          = 256
)

// errTooManyWatchers: a person, or the broker, has as many pages
// watching as it takes.
var errTooManyWatchers = errors.New("too many pages are watching threads")

// watchers are the pages watching threads, guarded by the hub's lock.
// Each is told of a change by a signal in a channel of one: changes that
// come while it is busy are one signal, so a slow page never slows a
// turn (the page reads the thread as it is when it gets to it).
type watchers struct {
	by       map[key]map[*watcher]struct{}
	byPerson map[string]int
	all      int
}

// watcher is one page watching one thread.
type watcher struct {
	k       key
	person  string
	changed chan struct{}
}

func newWatchers() watchers {
	return watchers{by: map[key]map[*watcher]struct{}{}, byPerson: map[string]int{}}
}

// notify signals k's watchers. The hub's lock is held.
func (w *watchers) notify(k key) {
	for x := range w.by[k] {
		select {
		case x.changed <- struct{}{}:
		default:
		}
	}
}

// watch adds a watcher of k for person, within the bounds.
func (h *hub) watch(k key, person string) (*watcher, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := &h.ws
	if w.all >= maxWatchers || w.byPerson[person] >= maxWatchersPerPerson {
		return nil, errTooManyWatchers
	}
	x := &watcher{k: k, person: person, changed: make(chan struct{}, 1)}
	if w.by[k] == nil {
		w.by[k] = map[*watcher]struct{}{}
	}
	w.by[k][x] = struct{}{}
	w.byPerson[person]++
	w.all++
	return x, nil
}

// unwatch removes x; it is safe to call twice.
func (h *hub) unwatch(x *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := &h.ws
	set := w.by[x.k]
	if _, ok := set[x]; !ok {
		return
	}
	delete(set, x)
	if len(set) == 0 {
		delete(w.by, x.k)
	}
	if w.byPerson[x.person]--; w.byPerson[x.person] == 0 {
		delete(w.byPerson, x.person)
	}
	w.all--
}

// watching is how many pages watch threads now.
func (h *hub) watching() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ws.all
}
