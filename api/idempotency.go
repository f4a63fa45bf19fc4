package api

import (
	"net/http"
	"sync"
	"time"

	"acpbroker/internal/ttlcache"
)

// Idempotency-Keys are kept for keyTTL after their first request, at
// most maxKeys of them (the least recently used forgotten first), each
// at most maxKeyLen long.
const (
	keyTTL    = 24 * time.Hour
	maxKeys   = 10000
	maxKeyLen = 200
)

// keyEntry is an Idempotency-Key: the prompt it started (ready is closed
// once that is settled: id "" if it started none).
type keyEntry struct {
	id     string
	digest string
	ready  chan struct{}
	resp   *StartResponse
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// keys are the Idempotency-Keys, by token and key. It owns its lock,
// held by no one while another lock is taken.
type keys struct {
	mu sync.Mutex
	m  *ttlcache.Cache[string, *keyEntry]
}

func newKeys(now func() time.Time) *keys {
	return &keys{m: ttlcache.New[string, *keyEntry](maxKeys, keyTTL, now)}
}

func keyOf(token, key string) string { return token + "\x00" + key }

// recall records a key a prompt recorded at was started with.
func (k *keys) recall(token, key, id, digest string, at time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.m.PutAt(keyOf(token, key), &keyEntry{id: id, digest: digest, ready: closedChan}, at)
}

// claim finds the token's Idempotency-Key: prior when it is known
// (perhaps still being settled), else a new entry, claimed.
func (k *keys) claim(token, key, digest string) (prior, claimed *keyEntry) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if e, ok := k.m.Get(keyOf(token, key)); ok {
		return e, nil
	}
	e := &keyEntry{digest: digest, ready: make(chan struct{})}
	k.m.Put(keyOf(token, key), e)
	return nil, e
}

// settle records what a claimed key started; one that started nothing
// is forgotten, so that a retry tries again.
func (k *keys) settle(token, key string, e *keyEntry, resp *StartResponse) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if resp != nil {
		e.id, e.resp = resp.ID, resp
	} else if cur, ok := k.m.Peek(keyOf(token, key)); ok && cur == e {
		k.m.Remove(keyOf(token, key))
	}
	close(e.ready)
}

// len is how many keys are kept.
func (k *keys) len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.m.Len()
}

// replay answers a retried POST with what its key started.
func (s *Server) replay(w http.ResponseWriter, r *http.Request, e *keyEntry, digest string) {
	select {
	case <-e.ready:
	case <-r.Context().Done():
		fail(w, http.StatusConflict, "Idempotency-Key", "a request with this Idempotency-Key is still being started")
		return
	}
	if e.digest != digest {
		fail(w, http.StatusUnprocessableEntity, "Idempotency-Key", "this Idempotency-Key was used with another request")
		return
	}
	if e.id == "" {
		fail(w, http.StatusConflict, "Idempotency-Key", "the request first sent with this Idempotency-Key started nothing: send it again")
		return
	}
	resp := e.resp
	if resp == nil {
		rec, _, ok, _ := s.config().Store.Prompt(e.id)
		if !ok {
			fail(w, http.StatusConflict, "Idempotency-Key", "the prompt this Idempotency-Key started is no longer kept")
			return
		}
		resp = &StartResponse{ID: rec.ID, Platform: rec.Platform, Thread: rec.Thread, Link: rec.Link, Events: "/v1/prompts/" + rec.ID + "/events"}
	}
	out := *resp
	if v, ok := s.lookup(out.ID); ok {
		out.State = v.State
	}
	w.Header().Set("Location", "/v1/prompts/"+out.ID)
	w.Header().Set("Idempotent-Replayed", "true")
	reply(w, http.StatusAccepted, out)
}
