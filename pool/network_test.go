package pool_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"acpbroker/internal/eventually"
	"acpbroker/netproxy"
	"acpbroker/pool"
)

// proxyPool is a pool whose one profile's sandboxed agents go through
// a proxy to allow, and the proxy.
func proxyPool(t *testing.T, allow ...string) (*pool.Pool, *netproxy.Proxy) {
	t.Helper()
	needBwrap(t)
	list, err := netproxy.ParseAllow(allow)
	if err != nil {
		t.Fatal(err)
	}
	proxy := netproxy.New(netproxy.Options{Logger: testLogger(t)})
	t.Cleanup(func() { proxy.Close() })
	p := newPool(t, pool.Config{
		Profiles: map[string]*pool.Profile{"net": {
			Command: fakeAgent, Env: []string{"PATH=/usr/bin:/bin"}, WorkDir: t.TempDir(), PerThreadDir: true,
			Network: pool.NetworkProxy, Allow: list, AllowKey: "agents.net.allow_hosts",
		}},
		Sandbox: pool.Sandbox{Bwrap: "bwrap"},
		Proxy:   proxy,
		NetDir:  t.TempDir(),
	})
	return p, proxy
}

// An agent behind the proxy, and a terminal it opens, reach an allowed
// upstream through the proxy alone: straight, the host's loopback is
// not there; a host not allowed is refused in words naming the key, and
// the refusal reaches the agent's turn. Its socket goes with it.
func TestNetwork_AnAgentAndItsTerminalsGoOutThroughTheProxyAlone(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "upstream") }))
	defer up.Close()
	hostport := strings.TrimPrefix(up.URL, "http://")
	p, _ := proxyPool(t, hostport)
	a := acquire(t, p, "t")
	got := prompt(t, a, "probe tcp:"+hostport+" proxy:"+up.URL+" proxy:http://elsewhere.example/ w:/run/acp-broker/net/planted")
	if r := line(t, got, "w:/run/acp-broker/net/planted"); !strings.HasPrefix(r, "denied") {
		t.Errorf("the agent wrote beside the proxy's socket: %s", r)
	}
	if r := line(t, got, "tcp:"+hostport); !strings.HasPrefix(r, "denied") {
		t.Errorf("straight to the host's loopback: %s", r)
	}
	if r := line(t, got, "proxy:"+up.URL); r != "ok: upstream" {
		t.Errorf("through the proxy to the allowed upstream: %s", r)
	}
	if r := line(t, got, "proxy:http://elsewhere.example/"); !strings.Contains(r, "403") || !strings.Contains(r, "agents.net.allow_hosts") {
		t.Errorf("a host not allowed: %s", r)
	}
	select {
	case r := <-a.Refused():
		if r.Host != "elsewhere.example" || r.Port != 80 {
			t.Errorf("the refusal the turn sees: %+v", r)
		}
	default:
		t.Error("the refusal did not reach the agent's turn")
	}
	// A terminal is confined as its agent, behind the same proxy.
	term := prompt(t, a, "terminal-env -- "+fakeAgent+" -probe tcp:"+hostport+" proxy:"+up.URL)
	if r := line(t, term, "tcp:"+hostport); !strings.HasPrefix(r, "denied") {
		t.Errorf("a terminal, straight to the host's loopback: %s", r)
	}
	if r := line(t, term, "proxy:"+up.URL); r != "ok: upstream" {
		t.Errorf("a terminal, through the proxy to the allowed upstream: %s", r)
	}
	dirs := func() []os.DirEntry {
		entries, _ := os.ReadDir(p.Config().NetDir)
		return entries
	}
	if len(dirs()) != 1 {
		t.Errorf("the net directory holds %d entries while one agent runs", len(dirs()))
	}
	p.Release(a, true) // stopped in the background
	eventually.True(t, "the net directory emptied after the agent was released to stop", func() bool { return len(dirs()) == 0 })
}

// line is the rest of the line of text that starts with what and a
// space.
func line(t *testing.T, text, what string) string {
	t.Helper()
	for _, l := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(l, what+" "); ok {
			return rest
		}
	}
	t.Fatalf("no line for %s in %q", what, text)
	return ""
}
