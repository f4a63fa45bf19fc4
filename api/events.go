package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// keepAlive spaces the comments that keep an idle event stream open
// through proxies.
const keepAlive = 15 * time.Second

// streams counts the event streams open, by token name, to hold each
// token to api.max_streams. It owns its lock, held by no one while
// another lock is taken.
type streams struct {
	mu   sync.Mutex
	open map[string]int // no entry for a token with none open
}

// take counts one more of token's streams, unless it has limit open.
func (c *streams) take(token string, limit int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open[token] >= limit {
		return false
	}
	c.open[token]++
	return true
}

// release counts one of token's streams closed.
func (c *streams) release(token string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open[token]--; c.open[token] <= 0 {
		delete(c.open, token)
	}
}

// total is how many streams are open.
func (c *streams) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, k := range c.open {
		n += k
	}
	return n
}

// events streams a prompt's events as Server-Sent Events, from after
// Last-Event-ID when given, until the end event (or the client leaves,
// or the API stops). A prompt no longer in memory gets its end alone.
func (s *Server) events(w http.ResponseWriter, r *http.Request, tok *tokenEntry) {
	p, rec, ok := s.owned(w, r, tok)
	if !ok {
		return
	}
	var last uint64
	if id := cmpOr(r.Header.Get("Last-Event-ID"), r.URL.Query().Get("last_event_id")); id != "" {
		if _, err := fmt.Sscan(id, &last); err != nil {
			fail(w, http.StatusBadRequest, "Last-Event-ID", "Last-Event-ID %q is not an event id", id)
			return
		}
	}
	if limit := cmpInt(s.config().MaxStreams, defaultMaxStreams); !s.streams.take(tok.Name, limit) {
		w.Header().Set("Retry-After", "1")
		fail(w, http.StatusTooManyRequests, "", "token %s has %d event streams open, api.max_streams: close one first", tok.Name, limit)
		return
	}
	defer s.streams.release(tok.Name)
	// The stream reads nothing more, and outlives the server's read and
	// write timeouts: each write has streamWriteWait instead, so that a
	// client that stops reading is let go.
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Time{})
	rc.SetWriteDeadline(time.Now().Add(streamWriteWait))
	flusher, _ := w.(http.Flusher)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(e event) bool {
		_, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.id, e.typ, e.data)
		return err == nil
	}
	if p == nil {
		v, _ := s.lookup(rec.ID)
		data, _ := json.Marshal(End{State: v.State, StopReason: v.StopReason, Error: v.Error, Summary: v.Summary, Usage: v.Usage})
		fmt.Fprintf(w, "event: end\ndata: %s\n\n", data)
		return
	}
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		rc.SetWriteDeadline(time.Now().Add(streamWriteWait))
		list, missed, ended, changed := p.since(last)
		if missed > 0 {
			data, _ := json.Marshal(map[string]uint64{"missed": missed})
			if !write(event{id: last + missed, typ: "gap", data: data}) {
				return
			}
		}
		for _, e := range list {
			if !write(e) {
				return
			}
			last = e.id
		}
		if flusher != nil {
			flusher.Flush()
		}
		if ended {
			return
		}
		select {
		case <-changed:
		case <-tick.C:
			rc.SetWriteDeadline(time.Now().Add(streamWriteWait))
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		case <-r.Context().Done():
			return
		}
	}
}
