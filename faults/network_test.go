package faults

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// upstream is an HTTP server on 127.0.0.1 that answers every request
// with its name.
func upstream(t *testing.T, name string) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s here", name)
	}))
	t.Cleanup(s.Close)
	return s
}

// hostPort is a test server's host:port.
func hostPort(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

// In the default sandbox (agent.network = "proxy") a hostile agent has a
// network of its own: it cannot connect to the broker's metrics, API or
// web port, nor to another service on the host's loopback, straight or
// through the proxy; the proxy refuses a host its profile does not
// allow, in words that name the key; and it reaches an upstream that
// allow_hosts names, through the proxy alone. The thread is told once
// per turn, and the refusals are counted by profile.
func TestNetwork_AHostileAgentReachesOnlyWhatItsProfileAllows(t *testing.T) {
	needBwrap(t)
	allowed := upstream(t, "allowed")
	other := upstream(t, "other") // a database or admin service on the host
	w := newWorld(t, withAPI(settings{"agent.allow_hosts": []string{hostPort(allowed), "*.example.org"}, "web.listen": "127.0.0.1:0"}))
	w.Raw = apiTokens(w.Channel)
	b := w.start()
	metricsAddr, apiAddr, webAddr := b.Addr(), b.APIAddr(), b.WebAddr()
	if metricsAddr == "" || apiAddr == "" || webAddr == "" {
		t.Fatalf("the broker serves metrics on %q, its API on %q and its web pages on %q", metricsAddr, apiAddr, webAddr)
	}

	probes := []string{
		"tcp:" + metricsAddr,
		"tcp:" + apiAddr,
		"tcp:" + webAddr,
		"tcp:" + hostPort(other),
		"tcp:" + hostPort(allowed),
		"proxy:http://" + metricsAddr + "/metrics",
		"proxy:http://" + apiAddr + "/v1/openapi.json",
		"proxy:http://" + webAddr + "/threads",
		"proxy:" + other.URL,
		"connect:" + hostPort(other),
		"proxy:http://not-allowed.example.com/",
		"connect:not-allowed.example.com:443",
		"proxy:" + allowed.URL + "/x",
	}
	thread := w.mention(alice, "probe "+strings.Join(probes, " "))
	got := w.awaitAnswers(thread, 1)[0].Text
	for _, p := range probes[:5] {
		if r := probeLine(t, got, p); !strings.HasPrefix(r, "denied") {
			t.Errorf("straight to the host's loopback, %s: %s", p, r)
		}
	}
	for _, p := range probes[5:10] {
		r := probeLine(t, got, p)
		if !strings.HasPrefix(r, "denied: 403") || !strings.Contains(r, "agent.allow_hosts") {
			t.Errorf("through the proxy to the host's loopback, %s: %s", p, r)
		}
	}
	for _, p := range probes[10:12] {
		r := probeLine(t, got, p)
		if !strings.HasPrefix(r, "denied: 403") || !strings.Contains(r, "not-allowed.example.com:") || !strings.Contains(r, "agent.allow_hosts") {
			t.Errorf("a host not allowed, %s: %s", p, r)
		}
	}
	if r := probeLine(t, got, probes[12]); r != "ok: allowed here" {
		t.Errorf("the allowed upstream through the proxy: %s", r)
	}
	// Told once in the turn, with what was refused and why.
	notes := 0
	for _, m := range w.Srv.Messages(thread) {
		notes += strings.Count(m.Content, "which its profile does not allow")
	}
	if notes != 1 {
		t.Errorf("the thread was told of refusals %d times in one turn, want once", notes)
	}
	refused := b.awaitMetric(`acp_broker_network_refused_total{profile="default"}`, func(v float64) bool { return v >= 7 })
	if refused != 7 {
		t.Errorf("acp_broker_network_refused_total = %v, want the 7 asked of the proxy", refused)
	}
	if v, _ := b.metric(`acp_broker_network_connections_total{profile="default"}`); v < 1 {
		t.Errorf("acp_broker_network_connections_total = %v, want the allowed one", v)
	}
}

// A name allow_hosts permits is still refused when it resolves to the
// host's loopback or LAN: DNS cannot lead the proxy to the broker.
func TestNetwork_AnAllowedNameThatResolvesToLoopbackIsRefused(t *testing.T) {
	needBwrap(t)
	w := newWorld(t, setup{conf: settings{"agent.allow_hosts": []string{"localhost", "LocalHost.:8080"}}})
	w.start()
	probes := []string{"connect:localhost:443", "proxy:http://localhost/", "proxy:http://localhost:8080/"}
	thread := w.mention(alice, "probe "+strings.Join(probes, " "))
	got := w.awaitAnswers(thread, 1)[0].Text
	for _, p := range probes {
		r := probeLine(t, got, p)
		if !strings.HasPrefix(r, "denied: 403") || !strings.Contains(r, "loopback") {
			t.Errorf("%s: %s", p, r)
		}
	}
}

// agent.network = "none" leaves an agent no way out at all, not even the
// proxy; "host" gives it the host's network, the broker's own ports
// included (what the README warns of).
func TestNetwork_NoneAndHost(t *testing.T) {
	needBwrap(t)
	loopback := upstream(t, "loopback")
	for _, c := range []struct {
		network string
		want    string
	}{{"none", "denied"}, {"host", "ok"}} {
		t.Run(c.network, func(t *testing.T) {
			w := newWorld(t, setup{conf: settings{"agent.network": c.network, "agent.allow_hosts": []string{hostPort(loopback)}}})
			w.start()
			probes := []string{"tcp:" + hostPort(loopback), "proxy:" + loopback.URL}
			thread := w.mention(alice, "probe "+strings.Join(probes, " "))
			got := w.awaitAnswers(thread, 1)[0].Text
			if r := probeLine(t, got, probes[0]); !strings.HasPrefix(r, c.want) {
				t.Errorf("network %s, %s: %s", c.network, probes[0], r)
			}
			if r := probeLine(t, got, probes[1]); !strings.HasPrefix(r, "denied: no HTTP_PROXY") {
				t.Errorf("network %s has a proxy: %s", c.network, r)
			}
		})
	}
}
