package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A token has at most api.max_streams event streams open: the next is
// answered 429 at once, naming the key, with a Retry-After; one closed
// lets another open, and another token is not held by this one's.
func TestEvents_StreamsAreCappedPerToken(t *testing.T) {
	a := unit(t, func(c *Config) {
		c.MaxStreams = 1
		c.Tokens = append(c.Tokens, c.Tokens[0])
		c.Tokens[1].Name, c.Tokens[1].Token = "other", "other-token-0123456789"
	})
	_, started := a.post(`{"text": "hello"}`, "")
	p := a.submitted()
	defer done(p, "")
	ctx, cancel := context.WithCancel(context.Background())
	r := httptest.NewRequestWithContext(ctx, "GET", "/v1/prompts/"+started.ID+"/events", nil)
	r.Header.Set("Authorization", "Bearer "+testToken)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		a.Handler().ServeHTTP(httptest.NewRecorder(), r)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for a.Stats().Streams != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the first stream was not counted")
		}
		time.Sleep(time.Millisecond)
	}
	w := a.do(call{method: "GET", path: "/v1/prompts/" + started.ID + "/events", token: testToken})
	wantStatus(t, "a second stream", w, http.StatusTooManyRequests)
	if w.Header().Get("Retry-After") != "1" || !strings.Contains(w.Body.String(), "api.max_streams") {
		t.Errorf("the refusal: Retry-After %q, %s", w.Header().Get("Retry-After"), w.Body)
	}
	// Another token's stream is its own (refused here only because
	// the prompt is not its).
	wantStatus(t, "another token's", a.do(call{method: "GET", path: "/v1/prompts/" + started.ID + "/events", token: "other-token-0123456789"}), http.StatusNotFound)
	cancel()
	<-ended
	if n := a.Stats().Streams; n != 0 {
		t.Fatalf("%d streams counted once the only one closed", n)
	}
	a.streams.mu.Lock()
	n := len(a.streams.open)
	a.streams.mu.Unlock()
	if n != 0 {
		t.Errorf("%d tokens kept with no stream open", n)
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	r = httptest.NewRequestWithContext(ctx, "GET", "/v1/prompts/"+started.ID+"/events", nil)
	r.Header.Set("Authorization", "Bearer "+testToken)
	w = httptest.NewRecorder()
	a.Handler().ServeHTTP(w, r)
	wantStatus(t, "a stream once the first closed", w, http.StatusOK)
}
