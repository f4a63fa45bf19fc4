package netproxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// env is a proxy serving one agent's socket in a test.
type env struct {
	t        testing.TB
	p        *Proxy
	l        *Listener
	sock     string
	refusals chan Refusal
	logs     *syncBuffer
	resolver *fakeResolver
}

const testKey = "agents.codex.allow_hosts"

// start serves a socket for profile "codex", thread "t1" with allow, and
// names resolved by names (a nil map leaves the system's resolver).
func start(t testing.TB, opts Options, allow []string, names map[string][]netip.Addr) *env {
	t.Helper()
	a, err := ParseAllow(allow)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, refusals: make(chan Refusal, 100), logs: &syncBuffer{}}
	if names != nil {
		e.resolver = &fakeResolver{names: names}
		opts.Resolve = e.resolver.resolve
	}
	opts.Logger = zerolog.New(e.logs)
	e.p = New(opts)
	e.sock = socketPath(t)
	ln, err := net.Listen("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	e.l = e.p.Serve(ln, Owner{Profile: "codex", Thread: "t1", Allow: a, Key: testKey,
		OnRefused: func(r Refusal) {
			select {
			case e.refusals <- r:
			default: // must not block: the tests read the first few
			}
		}})
	t.Cleanup(func() { e.p.Close() })
	return e
}

// socketPath is a short path for a Unix socket (their paths are bounded).
func socketPath(t testing.TB) string {
	dir, err := os.MkdirTemp("", "np")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "proxy.sock")
}

// client is an HTTP client whose proxy is the socket.
func (e *env) client() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy.invalid:3128"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", e.sock)
		},
		DisableKeepAlives: true,
	}}
}

// raw sends text on a new connection to the socket and reads the response.
func (e *env) raw(text string) (*http.Response, string) {
	e.t.Helper()
	c, br := e.send(text)
	defer c.Close()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		e.t.Fatalf("reading the answer to %q: %v", text, err)
	}
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// send writes text on a new connection to the socket.
func (e *env) send(text string) (net.Conn, *bufio.Reader) {
	e.t.Helper()
	c, err := net.Dial("unix", e.sock)
	if err != nil {
		e.t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, text); err != nil {
		e.t.Fatal(err)
	}
	return c, bufio.NewReader(c)
}

// connect opens a tunnel to target; it fails the test unless answered 200.
func (e *env) connect(target string) (net.Conn, *bufio.Reader) {
	e.t.Helper()
	c, br := e.send("CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n")
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("CONNECT %s: %s %s", target, resp.Status, body)
	}
	return c, br
}

// refusal is the next refusal reported, within 5 s.
func (e *env) refusal() Refusal {
	e.t.Helper()
	select {
	case r := <-e.refusals:
		return r
	case <-time.After(5 * time.Second):
		e.t.Fatal("no refusal reported")
		return Refusal{}
	}
}

// metric is the value of the proxy's series name (for profile, if not
// empty); -1 if there is none.
func metric(t *testing.T, p *Proxy, name, profile string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(p); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			matches := profile == ""
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "profile" && lp.GetValue() == profile {
					matches = true
				}
			}
			if !matches {
				continue
			}
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
			return m.Gauge.GetValue()
		}
	}
	return -1
}

// fakeResolver answers from a map and counts its calls.
type fakeResolver struct {
	mu    sync.Mutex
	names map[string][]netip.Addr
	asked []string
}

// slowName is a name the fake resolver answers only when its context ends.
const slowName = "slow.example.com"

func (r *fakeResolver) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, host)
	if host == slowName {
		r.mu.Unlock()
		<-ctx.Done()
		r.mu.Lock()
		return nil, context.Cause(ctx)
	}
	if addrs, ok := r.names[host]; ok {
		return addrs, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (r *fakeResolver) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.asked...)
}

// tcpServer is a TCP server on 127.0.0.1 running handle for each
// connection; closed, with its connections, when the test ends.
type tcpServer struct {
	ln    net.Listener
	port  int
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func serveTCP(t *testing.T, handle func(net.Conn)) *tcpServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &tcpServer{ln: ln, port: ln.Addr().(*net.TCPAddr).Port, conns: map[net.Conn]struct{}{}}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[c] = struct{}{}
			s.mu.Unlock()
			s.wg.Go(func() {
				defer c.Close()
				handle(c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *tcpServer) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

// echoAfterEOF reads until the client closes its side, then answers
// "got: " and what it read, and closes.
func echoAfterEOF(c net.Conn) {
	data, err := io.ReadAll(c)
	if err != nil {
		return
	}
	io.WriteString(c, "got: "+string(data))
}

// silent holds a connection, sending nothing, until the client goes.
func silent(c net.Conn) { io.Copy(io.Discard, c) }

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// lines are the log lines that contain all of words.
func (s *syncBuffer) lines(words ...string) []string {
	var out []string
next:
	for _, line := range strings.Split(s.String(), "\n") {
		for _, w := range words {
			if !strings.Contains(line, w) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
}

// pipeListener is a listener whose connections are net.Pipes, for tests
// in a synctest bubble.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// dial is a new connection to the listener.
func (l *pipeListener) dial() net.Conn {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
	case <-l.done:
		server.Close()
	}
	return client
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.UnixAddr{Name: "pipe", Net: "unix"} }
