package api

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"testing"
	"time"

	"acpbroker/store"
)

// A POST sent again with its Idempotency-Key starts nothing more: it is
// answered with the first's prompt, said to be replayed; the same key
// with another body is refused; a day later the key is forgotten.
func TestIdempotency_ARetryIsAnsweredWithTheFirstPrompt(t *testing.T) {
	a := unit(t, nil)
	w, first := a.post(`{"text": "hello"}`, "k-1")
	wantStatus(t, "the first POST", w, http.StatusAccepted)
	a.submitted()
	w, again := a.post(`{"text": "hello"}`, "k-1")
	wantStatus(t, "the retry", w, http.StatusAccepted)
	a.noneSubmitted()
	if again.ID != first.ID || w.Header().Get("Idempotent-Replayed") != "true" || w.Header().Get("Location") != "/v1/prompts/"+first.ID {
		t.Errorf("the retry: %+v (replayed %q, location %q), want %s", again, w.Header().Get("Idempotent-Replayed"), w.Header().Get("Location"), first.ID)
	}
	w, _ = a.post(`{"text": "something else"}`, "k-1")
	wantStatus(t, "the key with another body", w, http.StatusUnprocessableEntity)
	a.noneSubmitted()

	a.clock.add(keyTTL - time.Second)
	if _, again := a.post(`{"text": "hello"}`, "k-1"); again.ID != first.ID {
		t.Fatalf("a retry before the day is over started %s", again.ID)
	}
	a.noneSubmitted()
	a.clock.add(time.Second)
	w, later := a.post(`{"text": "hello"}`, "k-1")
	wantStatus(t, "a day later", w, http.StatusAccepted)
	a.submitted()
	if later.ID == first.ID || w.Header().Get("Idempotent-Replayed") != "" {
		t.Errorf("a day later the key still answered with %s", later.ID)
	}
}

// A key whose request started nothing is forgotten, so that the retry
// tries again (and is refused for itself, not for the key).
func TestIdempotency_AKeyThatStartedNothingIsForgotten(t *testing.T) {
	a := unit(t, nil)
	for i := range 2 {
		w, _ := a.post(`{"thread": "t-none", "text": "hello"}`, "k-2")
		wantStatus(t, fmt.Sprintf("POST %d to a thread that is not", i+1), w, http.StatusNotFound)
	}
	if n := a.keys.len(); n != 0 {
		t.Errorf("%d keys kept for requests that started nothing", n)
	}
}

// The keys kept are bounded: past maxKeys the least recently used is
// forgotten, at the same cost as the first.
func TestIdempotency_KeysAreBounded(t *testing.T) {
	a := unit(t, nil)
	for i := range maxKeys + 10 {
		_, e := a.keys.claim("ci", fmt.Sprint("k-", i), "digest")
		a.keys.settle("ci", fmt.Sprint("k-", i), e, &StartResponse{ID: fmt.Sprint("p-", i)})
	}
	if n := a.keys.len(); n != maxKeys {
		t.Errorf("%d keys kept, want %d", n, maxKeys)
	}
	if prior, _ := a.keys.claim("ci", "k-0", "digest"); prior != nil {
		t.Error("the oldest key was kept past the bound")
	}
	if prior, _ := a.keys.claim("ci", fmt.Sprint("k-", maxKeys+9), "digest"); prior == nil || prior.id != fmt.Sprint("p-", maxKeys+9) {
		t.Errorf("the newest key: %+v", prior)
	}
}

// Keys are the token's own: another token's same key starts its own
// prompt.
func TestIdempotency_KeysAreTheTokensOwn(t *testing.T) {
	a := unit(t, nil)
	_, e := a.keys.claim("other", "k-3", "digest")
	a.keys.settle("other", "k-3", e, &StartResponse{ID: "p-other"})
	w, resp := a.post(`{"text": "hello"}`, "k-3")
	wantStatus(t, "ci's POST", w, http.StatusAccepted)
	a.submitted()
	if resp.ID == "p-other" {
		t.Error("ci was answered with another token's prompt")
	}
}

// What the store kept is recalled when the API starts: a key is
// answered until a day after its first request, not after the start,
// and a headless thread takes prompts again.
func TestIdempotency_KeysAndThreadsAreRecalledFromTheStore(t *testing.T) {
	clk := newClock()
	kept := &memStore{prompts: map[string]store.Prompt{}}
	body := `{"text": "hello"}`
	sum := sha256.Sum256([]byte(body))
	kept.PutPrompt(store.Prompt{ID: "p-old", Token: "ci", Key: "k-4", Digest: hex.EncodeToString(sum[:]), Thread: "t-old",
		Created: clk.now().Add(-23 * time.Hour), State: StateDone}, nil)
	a := unit(t, func(c *Config) { c.Store, c.Now = kept, clk.now })
	a.clock = clk
	w, resp := a.post(body, "k-4")
	wantStatus(t, "a retry of a recalled key", w, http.StatusAccepted)
	a.noneSubmitted()
	if resp.ID != "p-old" {
		t.Errorf("a recalled key answered with %s, want p-old", resp.ID)
	}
	w, _ = a.post(`{"thread": "t-old", "text": "again"}`, "")
	wantStatus(t, "a prompt in a recalled thread", w, http.StatusAccepted)
	a.submitted()
	clk.add(time.Hour)
	w, resp = a.post(body, "k-4")
	wantStatus(t, "a day after the key's first request", w, http.StatusAccepted)
	a.submitted()
	if resp.ID == "p-old" {
		t.Error("a recalled key was answered a day after its first request")
	}
}
