package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A request without a token, or with one that is not the broker's, is
// answered 401 with the challenge a client reads.
func TestAuth_NoTokenOrAWrongOneIs401(t *testing.T) {
	a := unit(t, nil)
	for _, c := range []struct{ token, challenge string }{
		{"", `Bearer realm="acp-broker"`},
		{"not-the-token-0123456789", `Bearer realm="acp-broker", error="invalid_token"`},
		{testToken + "x", `Bearer realm="acp-broker", error="invalid_token"`},
	} {
		w := a.do(call{method: "GET", path: "/v1/prompts/p-x", token: c.token})
		wantStatus(t, "token "+c.token, w, http.StatusUnauthorized)
		if got := w.Header().Get("WWW-Authenticate"); got != c.challenge {
			t.Errorf("token %q: WWW-Authenticate %q, want %q", c.token, got, c.challenge)
		}
	}
	wantStatus(t, "the token", a.do(call{method: "GET", path: "/v1/prompts/p-x", token: testToken}), http.StatusNotFound)
}

// Past authFailures failures in a minute an address is answered 429,
// whatever token it sends, with a Retry-After after which it is
// answered again; another address is answered meanwhile.
func TestAuth_FailuresLimitedByAddressUntilRetryAfter(t *testing.T) {
	a := unit(t, nil)
	const guesser = "192.0.2.7"
	for i := range authFailures {
		w := a.do(call{method: "GET", path: "/v1/prompts/p-x", token: fmt.Sprintf("guess-%d", i), addr: guesser})
		wantStatus(t, fmt.Sprintf("failure %d", i+1), w, http.StatusUnauthorized)
	}
	w := a.do(call{method: "GET", path: "/v1/prompts/p-x", token: testToken, addr: guesser})
	wantStatus(t, "the token past the failures", w, http.StatusTooManyRequests)
	// A failure is given back every 3 s (20 a minute): Retry-After
	// rounds that up, as whole seconds do.
	if got := w.Header().Get("Retry-After"); got != "4" {
		t.Errorf("Retry-After %q, want 4", got)
	}
	if !strings.Contains(w.Body.String(), "failed authentications from "+guesser) {
		t.Errorf("the refusal says %s", w.Body)
	}
	wantStatus(t, "another address", a.do(call{method: "GET", path: "/v1/prompts/p-x", token: testToken, addr: "192.0.2.8"}), http.StatusNotFound)
	a.clock.add(3*time.Second - time.Millisecond)
	wantStatus(t, "before the wait is over", a.do(call{method: "GET", path: "/v1/prompts/p-x", token: testToken, addr: guesser}), http.StatusTooManyRequests)
	a.clock.add(time.Millisecond)
	wantStatus(t, "once the wait is over", a.do(call{method: "GET", path: "/v1/prompts/p-x", token: testToken, addr: guesser}), http.StatusNotFound)
	// One failure was given back, and the token spent none.
	wantStatus(t, "a failure given back", a.do(call{method: "GET", path: "/v1/prompts/p-x", token: "guess", addr: guesser}), http.StatusUnauthorized)
	wantStatus(t, "no more", a.do(call{method: "GET", path: "/v1/prompts/p-x", token: testToken, addr: guesser}), http.StatusTooManyRequests)
}

// A token makes api.rate_limit requests a minute, in a burst of as many:
// the next is answered 429 with a Retry-After after which it is
// answered again; a reload's lower rate holds at once.
func TestAuth_TokensAreRateLimited(t *testing.T) {
	a := unit(t, func(c *Config) { c.RateLimit = 3 })
	get := func() int { return a.do(call{method: "GET", path: "/v1/prompts/p-x", token: testToken}).Code }
	for i := range 3 {
		if code := get(); code != http.StatusNotFound {
			t.Fatalf("request %d: %d", i+1, code)
		}
	}
	w := a.do(call{method: "GET", path: "/v1/prompts/p-x", token: testToken})
	wantStatus(t, "the fourth request", w, http.StatusTooManyRequests)
	if got := w.Header().Get("Retry-After"); got != "21" {
		t.Errorf("Retry-After %q, want 21 (one request back every 20 s)", got)
	}
	if !strings.Contains(w.Body.String(), "token ci made more than 3 requests in a minute") {
		t.Errorf("the refusal says %s", w.Body)
	}
	a.clock.add(20 * time.Second)
	if code := get(); code != http.StatusNotFound {
		t.Fatalf("20 s later: %d", code)
	}
	if code := get(); code != http.StatusTooManyRequests {
		t.Fatalf("a second request 20 s later: %d", code)
	}
	a.clock.add(time.Minute)
	cfg := a.Config()
	cfg.RateLimit = 1
	a.SetConfig(cfg)
	if code := get(); code != http.StatusNotFound {
		t.Fatalf("after the reload: %d", code)
	}
	w = a.do(call{method: "GET", path: "/v1/prompts/p-x", token: testToken})
	wantStatus(t, "a second request at 1 a minute", w, http.StatusTooManyRequests)
	if got := w.Header().Get("Retry-After"); got != "61" {
		t.Errorf("Retry-After %q at 1 a minute, want 61", got)
	}
}

// A token a reload removes is refused at once, and its limiter is let go.
func TestAuth_ATokenRemovedByAReloadIsRefused(t *testing.T) {
	a := unit(t, nil)
	wantStatus(t, "before", a.do(call{method: "GET", path: "/v1/prompts/p-x", token: testToken}), http.StatusNotFound)
	cfg := a.Config()
	cfg.Tokens = nil
	a.SetConfig(cfg)
	wantStatus(t, "after", a.do(call{method: "GET", path: "/v1/prompts/p-x", token: testToken}), http.StatusUnauthorized)
	a.auth.mu.Lock()
	n := len(a.auth.limits)
	a.auth.mu.Unlock()
	if n != 0 {
		t.Errorf("%d limiters kept for tokens no longer configured", n)
	}
}

// An address is forgotten a minute after its last failure, when its
// allowance is whole again.
func TestAuth_AFailingAddressIsForgottenAfterAMinute(t *testing.T) {
	a := unit(t, nil)
	a.do(call{method: "GET", path: "/v1/prompts/p-x", token: "guess", addr: "192.0.2.9"})
	a.clock.add(time.Minute)
	a.do(call{method: "GET", path: "/v1/prompts/p-x", token: "guess", addr: "192.0.2.10"})
	a.auth.mu.Lock()
	_, kept := a.auth.failures.Peek("192.0.2.9")
	n := a.auth.failures.Len()
	a.auth.mu.Unlock()
	if kept || n != 1 {
		t.Errorf("a minute after its failure the address is kept (%v, %d addresses)", kept, n)
	}
}
