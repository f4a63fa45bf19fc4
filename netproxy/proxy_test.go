package netproxy

import (
	"acpbroker/internal/eventually"

	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"
)

func TestProxy_ForwardsPlainHTTPWithoutHopByHopOrProxyHeaders(t *testing.T) {
	got := make(chan http.Header, 1)
	up := serveTCP(t, func(c net.Conn) {
		r, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		r.Header.Set("X-Host", r.Host)
		got <- r.Header
		body := r.Method + " " + r.RequestURI
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nConnection: X-Up-Hop, close\r\nX-Up-Hop: 1\r\nKeep-Alive: timeout=5\r\nX-Up-End: 2\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	})
	e := start(t, Options{}, []string{up.addr()}, nil)

	req, _ := http.NewRequest("GET", "http://"+up.addr()+"/path?q=1", nil)
	req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
	req.Header.Set("Proxy-Foo", "bar")
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "1")
	req.Header.Set("X-End", "2")
	resp, err := e.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := string(b)
	if resp.StatusCode != 200 || body != "GET /path?q=1" {
		t.Fatalf("got %s %q, want 200 %q", resp.Status, body, "GET /path?q=1")
	}
	h := <-got
	for _, name := range []string{"Proxy-Authorization", "Proxy-Foo", "X-Hop", "Proxy-Connection"} {
		if v := h.Get(name); v != "" {
			t.Errorf("upstream got %s: %q", name, v)
		}
	}
	if h.Get("X-End") != "2" {
		t.Errorf("upstream did not get X-End: %v", h)
	}
	if resp.Header.Get("X-Up-Hop") != "" || resp.Header.Get("Keep-Alive") != "" || resp.Header.Get("X-Up-End") != "2" {
		t.Errorf("the agent got headers %v, want X-Up-End and not X-Up-Hop", resp.Header)
	}
	if n := metric(t, e.p, "acp_broker_network_connections_total", "codex"); n != 1 {
		t.Errorf("connections_total = %v, want 1", n)
	}

	// The upstream is told the host the proxy checked, not another the
	// request's Host header names.
	resp, body = e.raw("GET http://" + up.addr() + "/host HTTP/1.1\r\nHost: evil.example\r\n\r\n")
	if resp.StatusCode != 200 || string(body) != "GET /host" {
		t.Fatalf("got %s %q", resp.Status, body)
	}
	if h := <-got; h.Get("X-Host") != up.addr() {
		t.Errorf("upstream was told Host %q, want %q", h.Get("X-Host"), up.addr())
	}
}

func TestProxy_TunnelsHTTPSThroughConnect(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "secret answer")
	}))
	defer up.Close()
	e := start(t, Options{}, []string{up.Listener.Addr().String()}, nil)
	cl := e.client()
	cl.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: up.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
	resp, err := cl.Get(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "secret answer" {
		t.Fatalf("got %q", body)
	}
}

func TestProxy_TunnelKeepsHalfClose(t *testing.T) {
	up := serveTCP(t, echoAfterEOF)
	e := start(t, Options{}, []string{up.addr()}, nil)
	c, br := e.connect(up.addr())
	defer c.Close()
	if got := metric(t, e.p, "acp_broker_network_open_connections", ""); got != 1 {
		t.Errorf("open_connections = %v with a tunnel open, want 1", got)
	}
	io.WriteString(c, "hello")
	// The upstream answers only once it has read to the end: the agent's
	// close for writing must reach it while the way back stays open.
	c.(*net.UnixConn).CloseWrite()
	got, err := io.ReadAll(br)
	if err != nil || string(got) != "got: hello" {
		t.Fatalf("read %q, %v; want %q", got, err, "got: hello")
	}
	eventually.True(t, "open_connections back to 0", func() bool {
		return metric(t, e.p, "acp_broker_network_open_connections", "") == 0
	})
}

func TestProxy_RefusesAHostNotInTheList(t *testing.T) {
	e := start(t, Options{}, []string{"api.openai.com"}, map[string][]netip.Addr{})
	resp, body := e.raw("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
	const want = "acp-broker: example.com:443 is not allowed: not in agents.codex.allow_hosts\n"
	if resp.StatusCode != 403 || body != want {
		t.Fatalf("got %s %q, want 403 %q", resp.Status, body, want)
	}
	if r := e.refusal(); r != (Refusal{Host: "example.com", Port: 443, Reason: "not in " + testKey}) {
		t.Errorf("OnRefused got %+v", r)
	}
	if n := metric(t, e.p, "acp_broker_network_refused_total", "codex"); n != 1 {
		t.Errorf("refused_total = %v, want 1", n)
	}
	if n := metric(t, e.p, "acp_broker_network_connections_total", "codex"); n != 0 {
		t.Errorf("connections_total = %v, want 0", n)
	}
	lines := e.logs.lines("network connection refused")
	if len(lines) != 1 {
		t.Fatalf("log lines of the refusal: %q", lines)
	}
	var fields map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &fields); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"profile": "codex", "thread": "t1", "host": "example.com", "port": 443.0, "reason": "not in " + testKey} {
		if fields[k] != v {
			t.Errorf("log field %s = %v, want %v (%s)", k, fields[k], v, lines[0])
		}
	}
	if calls := e.resolver.calls(); len(calls) != 0 {
		t.Errorf("a host not allowed was resolved: %q", calls)
	}

	// Plain HTTP is refused the same way, with its default port.
	resp, body = e.raw("GET http://example.com/x HTTP/1.1\r\nHost: example.com\r\n\r\n")
	if resp.StatusCode != 403 || body != "acp-broker: example.com:80 is not allowed: not in agents.codex.allow_hosts\n" {
		t.Fatalf("got %s %q", resp.Status, body)
	}
}

func TestProxy_RefusesAnAllowedNameResolvingToAnInnerAddress(t *testing.T) {
	for _, tc := range []struct{ addr, reason string }{
		{"127.0.0.1", "resolves to 127.0.0.1, a loopback address"},
		{"::1", "resolves to ::1, a loopback address"},
		{"::ffff:127.0.0.1", "resolves to 127.0.0.1, a loopback address"},
		{"10.1.2.3", "resolves to 10.1.2.3, a private address"},
		{"169.254.169.254", "resolves to 169.254.169.254, the cloud metadata address"},
		{"100.64.0.7", "resolves to 100.64.0.7, a shared (CGNAT) address"},
		{"0.0.0.0", "resolves to 0.0.0.0, an unspecified address"},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			e := start(t, Options{}, []string{"api.example.com"}, map[string][]netip.Addr{
				"api.example.com": {netip.MustParseAddr(tc.addr)},
			})
			resp, body := e.raw("CONNECT api.example.com:443 HTTP/1.1\r\n\r\n")
			want := "acp-broker: api.example.com:443 is not allowed: " + tc.reason + "\n"
			if resp.StatusCode != 403 || body != want {
				t.Fatalf("got %s %q, want 403 %q", resp.Status, body, want)
			}
			if r := e.refusal(); r.Reason != tc.reason || r.Host != "api.example.com" || r.Port != 443 {
				t.Errorf("OnRefused got %+v", r)
			}
		})
	}
}

func TestProxy_DialsOnlyTheAddressItResolvedAndChecked(t *testing.T) {
	up := serveTCP(t, echoAfterEOF)
	// The name resolves to a private address first and to the upstream's
	// loopback address, which an entry names exactly: only that one is
	// dialled, and the name is resolved once, by the proxy.
	e := start(t, Options{}, []string{fmt.Sprintf("svc.example.com:%d", up.port), up.addr()}, map[string][]netip.Addr{
		"svc.example.com": {netip.MustParseAddr("10.9.9.9"), netip.MustParseAddr("127.0.0.1")},
	})
	target := fmt.Sprintf("SVC.Example.COM.:%d", up.port)
	c, br := e.connect(target)
	defer c.Close()
	io.WriteString(c, "x")
	c.(*net.UnixConn).CloseWrite()
	if got, _ := io.ReadAll(br); string(got) != "got: x" {
		t.Fatalf("read %q through %s", got, target)
	}
	if calls := e.resolver.calls(); len(calls) != 1 || calls[0] != "svc.example.com" {
		t.Errorf("resolver asked %q, want once for svc.example.com", calls)
	}

	// Another port of the same name is not in the list.
	resp, body := e.raw(fmt.Sprintf("CONNECT svc.example.com:%d HTTP/1.1\r\n\r\n", up.port+1))
	if resp.StatusCode != 403 || !strings.Contains(body, "not in "+testKey) {
		t.Errorf("another port: %s %q", resp.Status, body)
	}
}

func TestProxy_RefusesWhatIsNotAProxyRequest(t *testing.T) {
	e := start(t, Options{}, []string{"api.example.com"}, map[string][]netip.Addr{})
	for _, tc := range []struct{ req, want string }{
		{"GET /x HTTP/1.1\r\nHost: api.example.com\r\n\r\n", "only CONNECT host:port and absolute http:// requests are proxied"},
		{"GET https://api.example.com/x HTTP/1.1\r\nHost: api.example.com\r\n\r\n", "only CONNECT host:port and absolute http:// requests are proxied"},
		{"CONNECT api.example.com HTTP/1.1\r\n\r\n", "CONNECT needs host:port"},
		{"CONNECT api.example.com:0 HTTP/1.1\r\n\r\n", `port "0" is not a number`},
		{"hello\r\n\r\n", "bad request"},
		{"CONNECT " + strings.Repeat("a", 300) + ".com:443 HTTP/1.1\r\n\r\n", "longer than 253 characters"},
		{"CONNECT a<b>.com:443 HTTP/1.1\r\n\r\n", `bad host "a<b>.com"`},
	} {
		resp, body := e.raw(tc.req)
		if resp.StatusCode != 400 || !strings.Contains(body, tc.want) {
			t.Errorf("%q: got %s %q, want 400 with %q", tc.req, resp.Status, body, tc.want)
		}
	}
	if calls := e.resolver.calls(); len(calls) != 0 {
		t.Errorf("resolved %q", calls)
	}
	// An answer quoting what the agent sent is bounded.
	resp, body := e.raw(strings.Repeat("x", 8000) + "\r\n\r\n")
	if resp.StatusCode != 400 || len(body) > maxReplyText+len("…\n") {
		t.Errorf("a long bad request: %s and %d bytes, want 400 and at most %d", resp.Status, len(body), maxReplyText+len("…\n"))
	}
}

func TestProxy_BoundsRequestHeaders(t *testing.T) {
	e := start(t, Options{}, []string{"api.example.com"}, map[string][]netip.Addr{})
	big := strings.Repeat("a", maxHeaderBytes)
	resp, body := e.raw("CONNECT api.example.com:443 HTTP/1.1\r\nX-Big: " + big + "\r\n\r\n")
	if resp.StatusCode != 431 || !strings.Contains(body, "larger than 16384 bytes") {
		t.Fatalf("got %s %q, want 431", resp.Status, body)
	}
	// Headers within the bound are read (and this host refused).
	resp, body = e.raw("CONNECT example.com:443 HTTP/1.1\r\nX-Big: " + big[:12<<10] + "\r\n\r\n")
	if resp.StatusCode != 403 {
		t.Fatalf("a request with 12 KiB of headers: %s %q, want 403", resp.Status, body)
	}
}

func TestProxy_WaitsForHeadersTenSeconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(Options{Logger: zerolog.Nop()})
		ln := newPipeListener()
		l := p.Serve(ln, Owner{Profile: "codex", Key: testKey})
		c := ln.dial()
		begun := time.Now()
		io.WriteString(c, "CONNECT api.example.com:443 HTTP/1.1\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(begun); resp.StatusCode != 408 || waited != headerTimeout {
			t.Errorf("got %s after %s, want 408 after %s", resp.Status, waited, headerTimeout)
		}
		c.Close()
		l.Close()
	})
}

func TestProxy_DialAndResolveFailuresAre502(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	e := start(t, Options{}, []string{closed, "gone.example.com"}, map[string][]netip.Addr{})
	resp, body := e.raw("CONNECT " + closed + " HTTP/1.1\r\n\r\n")
	if resp.StatusCode != 502 || !strings.Contains(body, "acp-broker: "+closed+": cannot connect") || !strings.Contains(body, "refused") {
		t.Errorf("dial to a closed port: %s %q", resp.Status, body)
	}
	resp, body = e.raw("CONNECT gone.example.com:443 HTTP/1.1\r\n\r\n")
	if resp.StatusCode != 502 || !strings.Contains(body, "gone.example.com:443: cannot resolve") {
		t.Errorf("a name that does not resolve: %s %q", resp.Status, body)
	}
	if n := metric(t, e.p, "acp_broker_network_refused_total", "codex"); n != 0 {
		t.Errorf("refused_total = %v after failures, want 0", n)
	}
}

func TestProxy_RefusesConnectionsPastMaxConns(t *testing.T) {
	up := serveTCP(t, silent)
	e := start(t, Options{MaxConns: 2}, []string{up.addr()}, nil)
	c1, _ := e.connect(up.addr())
	c2, _ := e.connect(up.addr())
	defer c2.Close()

	// The third is answered as soon as it is taken, before its request
	// (which it may not have had time to send).
	c, err := net.Dial("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	body := string(b)
	if resp.StatusCode != 503 || !strings.Contains(body, "too many connections open (at most 2)") {
		t.Fatalf("third connection: %s %q, want 503", resp.Status, body)
	}
	if r := e.refusal(); r.Host != "" || !strings.Contains(r.Reason, "too many connections") {
		t.Errorf("OnRefused got %+v", r)
	}
	if n := metric(t, e.p, "acp_broker_network_refused_total", "codex"); n != 1 {
		t.Errorf("refused_total = %v, want 1", n)
	}

	// Once one ends, there is room again.
	c1.Close()
	eventually.True(t, "a tunnel's end makes room", func() bool {
		e.l.mu.Lock()
		defer e.l.mu.Unlock()
		return e.l.clients == 1
	})
	c3, _ := e.connect(up.addr())
	c3.Close()
}

func TestProxy_ClosesIdleTunnels(t *testing.T) {
	const idle, tick, ticks = time.Second, 100 * time.Millisecond, 15
	// A tunnel whose upstream speaks every 100 ms (one way only) for
	// longer than the idle timeout stays open; one where nothing passes
	// is closed after the idle timeout.
	up := serveTCP(t, func(c net.Conn) {
		for range ticks {
			if _, err := c.Write([]byte{'.'}); err != nil {
				return
			}
			time.Sleep(tick)
		}
		io.WriteString(c, "done")
	})
	quiet := serveTCP(t, silent)
	e := start(t, Options{IdleTimeout: idle}, []string{up.addr(), quiet.addr()}, nil)

	busy, busyR := e.connect(up.addr())
	defer busy.Close()
	still, stillR := e.connect(quiet.addr())
	defer still.Close()
	begun := time.Now()
	if _, err := io.ReadAll(stillR); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(begun); waited < idle || waited > idle+2*time.Second {
		t.Errorf("an idle tunnel was closed after %s, want after %s", waited, idle)
	}
	want := strings.Repeat(".", ticks) + "done"
	got := make([]byte, len(want))
	n, err := io.ReadFull(busyR, got)
	if err != nil || string(got[:n]) != want {
		t.Errorf("a busy tunnel read %q, %v, want %q", got[:n], err, want)
	}
}

func TestProxy_CloseEndsEveryTunnelAndWaits(t *testing.T) {
	up := serveTCP(t, silent)
	e := start(t, Options{}, []string{up.addr()}, nil)
	c, br := e.connect(up.addr())
	defer c.Close()
	read := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(br)
		read <- err
	}()
	if err := e.l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-read:
	case <-time.After(5 * time.Second):
		t.Fatal("a tunnel is still open after Close")
	}
	if err := e.l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := net.Dial("unix", e.sock); err == nil {
		t.Error("the socket still takes connections after Close")
	}
	if got := metric(t, e.p, "acp_broker_network_open_connections", ""); got != 0 {
		t.Errorf("open_connections = %v after Close, want 0", got)
	}
}

func TestProxy_CloseClosesEveryListenerAndLaterServes(t *testing.T) {
	up := serveTCP(t, silent)
	e := start(t, Options{}, []string{up.addr()}, nil)
	c, br := e.connect(up.addr())
	defer c.Close()
	if err := e.p.Close(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(br); err != nil {
		t.Fatalf("a tunnel is still open after the proxy's Close: %v", err)
	}
	sock := socketPath(t)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l := e.p.Serve(ln, Owner{Profile: "codex"})
	if _, err := net.Dial("unix", sock); err == nil {
		t.Error("a Serve after the proxy's Close takes connections")
	}
	l.Close()
	if err := e.p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestProxy_DialTimeoutBoundsResolving(t *testing.T) {
	const timeout = 300 * time.Millisecond
	e := start(t, Options{DialTimeout: timeout}, []string{slowName}, map[string][]netip.Addr{})
	begun := time.Now()
	resp, body := e.raw("CONNECT " + slowName + ":443 HTTP/1.1\r\n\r\n")
	waited := time.Since(begun)
	if resp.StatusCode != 502 || !strings.Contains(body, "cannot resolve: took longer than the dial timeout") {
		t.Errorf("got %s %q, want 502 saying the dial timeout passed", resp.Status, body)
	}
	if waited < timeout || waited > timeout+2*time.Second {
		t.Errorf("answered after %s, want after %s", waited, timeout)
	}
}

func TestProxy_CloseAbandonsAResolutionInProgress(t *testing.T) {
	e := start(t, Options{}, []string{slowName}, map[string][]netip.Addr{})
	c, br := e.send("CONNECT " + slowName + ":443 HTTP/1.1\r\n\r\n")
	defer c.Close()
	eventually.True(t, "the name is being resolved", func() bool { return len(e.resolver.calls()) == 1 })
	begun := time.Now()
	e.l.Close()
	if waited := time.Since(begun); waited > 3*time.Second {
		t.Errorf("Close took %s with a resolution in progress (the dial timeout is 10s)", waited)
	}
	if _, err := io.ReadAll(br); err != nil {
		t.Errorf("the agent's connection: %v", err)
	}
}

func TestProxy_RefusalsNameTheAllowListWithoutAKey(t *testing.T) {
	p := New(Options{Logger: zerolog.Nop()})
	defer p.Close()
	sock := socketPath(t)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	p.Serve(ln, Owner{Profile: "p"})
	e := &env{t: t, sock: sock}
	resp, body := e.raw("CONNECT example.com:443 HTTP/1.1\r\n\r\n")
	if resp.StatusCode != 403 || body != "acp-broker: example.com:443 is not allowed: not in the allow list\n" {
		t.Errorf("got %s %q", resp.Status, body)
	}
}
