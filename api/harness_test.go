package api

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"acpbroker/adapter"
)

// clock is a time a test moves by hand.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }

// unitAPI is a Server of headless threads that serves no listener: its
// Handler is called with httptest, on a clock the test moves.
type unitAPI struct {
	*Server
	t      *testing.T
	clock  *clock
	engine *engine
}

// unit is a unitAPI with one token ("ci"); tune changes its Config.
func unit(t *testing.T, tune func(*Config)) *unitAPI {
	t.Helper()
	clk := newClock()
	e := &engine{submitted: make(chan *adapter.Prompt, 100)}
	h := NewHeadless(e, func(string) bool { return false })
	cfg := testConfig(h)
	cfg.Tokens[0].MayApprove = true
	cfg.Now = clk.now
	if tune != nil {
		tune(&cfg)
	}
	s := newServer(cfg)
	h.Known = s.HeadlessThread
	t.Cleanup(s.stop)
	return &unitAPI{Server: s, t: t, clock: clk, engine: e}
}

// call is a request from addr with token (none if "") and its answer.
type call struct {
	method, path, token, body, addr string
	header                          map[string]string
}

// A request is given 5 s (an event stream that is not refused would
// stream until then).
func (a *unitAPI) do(c call) *httptest.ResponseRecorder {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r := httptest.NewRequestWithContext(ctx, c.method, c.path, strings.NewReader(c.body))
	r.RemoteAddr = cmpOr(c.addr, "192.0.2.1") + ":40000"
	if c.token != "" {
		r.Header.Set("Authorization", "Bearer "+c.token)
	}
	for k, v := range c.header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	a.Handler().ServeHTTP(w, r)
	return w
}

// post starts a prompt, with an Idempotency-Key unless key is "", and
// returns the answer.
func (a *unitAPI) post(body, key string) (*httptest.ResponseRecorder, StartResponse) {
	a.t.Helper()
	c := call{method: "POST", path: "/v1/prompts", token: testToken, body: body}
	if key != "" {
		c.header = map[string]string{"Idempotency-Key": key}
	}
	w := a.do(c)
	var resp StartResponse
	json.Unmarshal(w.Body.Bytes(), &resp)
	return w, resp
}

// submitted is the next prompt the engine was given.
func (a *unitAPI) submitted() *adapter.Prompt {
	a.t.Helper()
	select {
	case p := <-a.engine.submitted:
		return p
	default:
		a.t.Fatal("no prompt was submitted")
		return nil
	}
}

// noneSubmitted fails the test if the engine was given a prompt.
func (a *unitAPI) noneSubmitted() {
	a.t.Helper()
	select {
	case <-a.engine.submitted:
		a.t.Fatal("a prompt was submitted")
	default:
	}
}

func wantStatus(t *testing.T, what string, w *httptest.ResponseRecorder, status int) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("%s: %d %s, want %d", what, w.Code, w.Body, status)
	}
}
