package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"sync"
)

// The bounds of the turns' renderings kept for the pages watching them:
// how many, and their bytes in all. Past either, the oldest go first
// (a page that still needs one renders it again).
const (
	maxRenders     = 512
	maxRenderBytes = 64 << 20
)

// renders keeps each turn's latest rendering as a page's "turn" event,
// so that the pages watching a thread render each version of a turn
// once between them, whatever their number. Its methods are safe for
// concurrent use.
type renders struct {
	pages    *template.Template
	maxBytes int // maxRenderBytes

	mu    sync.Mutex
	by    map[renderKey]*rendering
	order []renderKey // oldest first; each key at most once
	bytes int
	made  int // renderings made, for tests
}

type renderKey struct {
	k   key
	seq uint64
}

// rendering is one version of a turn's event; ready is closed once
// event (or err) is set.
type rendering struct {
	version uint64
	ready   chan struct{}
	event   []byte
	err     error
	counted bool // its bytes are in renders.bytes (guarded by renders.mu)
}

func newRenders(pages *template.Template) *renders {
	return &renders{pages: pages, maxBytes: maxRenderBytes, by: map[renderKey]*rendering{}}
}

// event is turn ts of k as a page's "turn" event, and the version it
// shows: ts's, or a later one another page had rendered. It waits for a
// rendering another page is making, until ctx ends.
func (r *renders) event(ctx context.Context, k key, ts turnShot) ([]byte, uint64, error) {
	rk := renderKey{k, ts.Seq}
	r.mu.Lock()
	x := r.by[rk]
	if x == nil || x.version < ts.Version {
		if x != nil {
			r.drop(rk, x)
		}
		x = &rendering{version: ts.Version, ready: make(chan struct{})}
		r.by[rk] = x
		r.order = append(r.order, rk)
		r.made++
		r.mu.Unlock()
		r.make(x, ts)
		r.mu.Lock()
		if r.by[rk] == x {
			x.counted = true
			r.bytes += len(x.event)
			r.trim()
		}
		r.mu.Unlock()
		return x.event, x.version, x.err
	}
	r.mu.Unlock()
	select {
	case <-x.ready:
		return x.event, x.version, x.err
	case <-ctx.Done():
		return nil, 0, context.Cause(ctx)
	}
}

// make renders ts into x and marks it ready.
func (r *renders) make(x *rendering, ts turnShot) {
	defer close(x.ready)
	var b bytes.Buffer
	if err := r.pages.ExecuteTemplate(&b, "turn", ts); err != nil {
		x.err = err
		return
	}
	data, _ := json.Marshal(map[string]any{"seq": ts.Seq, "html": b.String()})
	x.event = fmt.Appendf(nil, "event: turn\ndata: %s\n\n", data)
}

// drop forgets rk's rendering x. r.mu is held.
func (r *renders) drop(rk renderKey, x *rendering) {
	delete(r.by, rk)
	for i, o := range r.order {
		if o == rk {
			r.order = append(r.order[:i], r.order[i+1:]...)
			break
		}
	}
	if x.counted {
		r.bytes -= len(x.event)
	}
}

// trim drops the oldest renderings past the bounds. r.mu is held.
func (r *renders) trim() {
	for len(r.order) > 0 && (len(r.order) > maxRenders || r.bytes > r.maxBytes) {
		rk := r.order[0]
		r.drop(rk, r.by[rk])
	}
}

// forget drops k's renderings of the turns not in turns (those the hub
// no longer keeps).
func (r *renders) forget(k key, turns []turnShot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rk := range append([]renderKey(nil), r.order...) {
		if rk.k == k && !hasTurn(turns, rk.seq) {
			r.drop(rk, r.by[rk])
		}
	}
}

// size is how many renderings are kept, and their bytes.
func (r *renders) size() (int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.by), r.bytes
}
