package web

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"acpbroker/web/render"
)

// The bounds of the turns' renderings kept for the pages watching them:
// how many, and their bytes in all. Past either, the oldest go first
// (a page that still needs one renders it again).
const (
	maxRenders     = 512
	maxRenderBytes = 64 << 20
)

// renders keeps each turn's latest rendering, as its blocks and as a
// page's "turn" events, so that the pages watching a thread render each
// version of a turn once between them, whatever their number. Its
// methods are safe for concurrent use.
type renders struct {
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

// rendering is one version of a turn; ready is closed once it is made,
// and it does not change after.
type rendering struct {
	seq, version uint64
	ready        chan struct{}
	class        string // its <article>'s
	blocks       []render.Block
	// whole is the "turn" event of every block; delta the one from the
	// version it replaced, from (0 and nil when it replaced none).
	whole, delta []byte
	from         uint64
	counted      bool // its bytes are in renders.bytes (guarded by renders.mu)
}

func newRenders() *renders {
	return &renders{maxBytes: maxRenderBytes, by: map[renderKey]*rendering{}}
}

// rendering is turn ts of k rendered: ts's version, or a later one
// another page had rendered. It waits for a rendering another page is
// making, until ctx ends.
func (r *renders) rendering(ctx context.Context, k key, ts turnShot) (*rendering, error) {
	rk := renderKey{k, ts.Seq}
	r.mu.Lock()
	x := r.by[rk]
	if x == nil || x.version < ts.Version {
		var prev *rendering
		if x != nil {
			r.drop(rk, x)
			select {
			case <-x.ready:
				prev = x
			default:
			}
		}
		x = &rendering{seq: ts.Seq, version: ts.Version, ready: make(chan struct{})}
		r.by[rk] = x
		r.order = append(r.order, rk)
		r.made++
		r.mu.Unlock()
		x.make(ts, prev)
		r.mu.Lock()
		if r.by[rk] == x {
			x.counted = true
			r.bytes += x.size()
			r.trim()
		}
		r.mu.Unlock()
		return x, nil
	}
	r.mu.Unlock()
	select {
	case <-x.ready:
		return x, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// make renders ts into x, with its event from prev when there is one,
// and marks it ready.
func (x *rendering) make(ts turnShot, prev *rendering) {
	defer close(x.ready)
	x.class, x.blocks = render.TurnBlocks(ts.Turn)
	x.whole = x.event(0, nil)
	if prev != nil && prev.version > 0 { // "from" 0 is an event of every block
		x.from, x.delta = prev.version, x.event(prev.version, prev.blocks)
	}
}

// size is the bytes x keeps.
func (x *rendering) size() int {
	n := len(x.whole) + len(x.delta)
	for _, b := range x.blocks {
		n += len(b.HTML)
	}
	return n
}

// A "turn" event is a turn's rendering as a page applies it (app.js):
//
//	{"seq": 3, "version": 9, "from": 7, "class": "turn turn-running",
//	 "blocks": [{"id": "head"}, {"id": "answer", "keep": 1200, "html": "…"}]}
//
// Its blocks are the turn's, in order: one with no html is as the page
// has it; one with keep is the first keep UTF-16 code units of the
// page's source of the block, then html; else html is the block. "from"
// is the version of the turn the event applies to, 0 for one that holds
// every block whole.
type turnEvent struct {
	Seq     uint64       `json:"seq"`
	Version uint64       `json:"version"`
	From    uint64       `json:"from,omitempty"`
	Class   string       `json:"class"`
	Blocks  []blockEvent `json:"blocks"`
}

type blockEvent struct {
	ID   string  `json:"id"`
	Keep int     `json:"keep,omitempty"`
	HTML *string `json:"html,omitempty"`
}

// minKeep is the least of a block's start worth keeping rather than
// sending again.
const minKeep = 64

// event is x as a page's "turn" event from version from of the turn,
// whose blocks the page has as had: each block the same is named alone,
// one that starts as it had is sent from where it differs, any other is
// sent whole.
func (x *rendering) event(from uint64, had []render.Block) []byte {
	old := make(map[string]string, len(had))
	for _, b := range had {
		old[b.ID] = b.HTML
	}
	e := turnEvent{Seq: x.seq, Version: x.version, From: from, Class: x.class, Blocks: make([]blockEvent, 0, len(x.blocks))}
	for _, b := range x.blocks {
		be := blockEvent{ID: b.ID}
		o, ok := old[b.ID]
		switch {
		case ok && o == b.HTML:
		case ok:
			n := commonPrefix(o, b.HTML)
			html := b.HTML
			if n >= minKeep {
				be.Keep, html = utf16Len(b.HTML[:n]), b.HTML[n:]
			}
			be.HTML = &html
		default:
			html := b.HTML
			be.HTML = &html
		}
		e.Blocks = append(e.Blocks, be)
	}
	var buf bytes.Buffer
	buf.WriteString("event: turn\ndata: ")
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // an event stream, never read as HTML
	enc.Encode(e)            // of strings and numbers alone: it cannot fail
	buf.WriteString("\n")    // Encode ended the data line; this ends the event
	return buf.Bytes()
}

// commonPrefix is the length in bytes of the start a and b share, cut
// back to a whole rune.
func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	for i > 0 && i < len(b) && !utf8.RuneStart(b[i]) {
		i--
	}
	return i
}

// utf16Len is s's length in UTF-16 code units, as a page's script counts.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r) // an invalid byte is U+FFFD, one unit, in JSON too
	}
	return n
}

// eventFor is x as the event for a page that has its turn at version
// has, with blocks had (nil: none this stream sent): x's delta when it
// is from that version, one made for the page when it has blocks, x's
// whole event else.
func (x *rendering) eventFor(has uint64, had []render.Block) []byte {
	switch {
	case x.delta != nil && x.from == has && had != nil:
		return x.delta
	case had != nil && has != 0 && has != x.version:
		return x.event(has, had)
	}
	return x.whole
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
		r.bytes -= x.size()
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
