package faults

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A local process (the test) opens as many idle connections as the
// machine lets it, half to the API's listener and half to the metrics
// listener, and holds them, as an agent could. The test's own descriptor
// limit is raised to its hard limit and the flood sized to that, less a
// margin for the test's own files (about 20,000 connections where the
// hard limit allows; 2,000 with -short); the broker's soft limit is then
// lowered to half the flood, so that the flood is twice the descriptors
// the broker may open, as it was where 21,000 connections used up a
// broker's. While the flood holds them, /healthz answers, the API
// answers, and a prompt through the API runs its turn to its end; the
// API holds no more than api.max_connections; and every connection of
// the flood is closed by the broker on time (within the API's 10 s for a
// request's headers, and a margin).
func TestListeners_AFloodOfIdleConnectionsLeavesTheBrokerAnswering(t *testing.T) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = lim.Max
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	n := int(min(lim.Max, 20400)) - 400
	if testing.Short() {
		n = 2000
	}
	if n < 2000 {
		t.Skipf("the hard limit on open files (%d) leaves too few for a flood", lim.Max)
	}
	const maxConns = 64
	w, b := apiWorld(t, settings{"api.max_connections": maxConns})
	brokerLimit := uint64(n / 2)
	if err := unix.Prlimit(b.PID(), unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: brokerLimit, Max: lim.Max}, nil); err != nil {
		t.Fatalf("lowering the broker's limit on open files: %v", err)
	}
	t.Logf("flood of %d connections; the broker may open %d files, the test %d", n, brokerLimit, lim.Cur)

	conns, flooded := flood(t, n, b.APIAddr(), b.Addr())

	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	// Answered at once, not once the flood's connections time out.
	const promptly = 2 * time.Second
	at := time.Now()
	if code, body, err := b.Get(ctx, "/healthz"); err != nil || code != http.StatusOK {
		t.Fatalf("/healthz during the flood: %d %q %v", code, body, err)
	}
	if took := time.Since(at); took > promptly {
		t.Errorf("/healthz took %s to answer during the flood", took.Round(time.Millisecond))
	}
	t.Logf("/healthz answered in %s", time.Since(at).Round(time.Millisecond))
	c := b.client(ciToken)
	at = time.Now()
	if code, raw := c.do("GET", "/v1/prompts/p-none", nil, nil); code != http.StatusNotFound {
		t.Fatalf("the API during the flood: %d %s", code, raw)
	}
	if took := time.Since(at); took > promptly {
		t.Errorf("the API took %s to answer during the flood", took.Round(time.Millisecond))
	}
	at = time.Now()
	s := c.start(map[string]any{"channel": w.Channel, "text": "stream 3 10ms"})
	if end := endOf(t, c.events(s.ID)); end.State != "done" {
		t.Fatalf("a turn during the flood ended %s: %s", end.State, end.Error)
	}
	t.Logf("a turn through the API ran in %s", time.Since(at).Round(time.Millisecond))
	if v, _ := b.metric("acp_broker_api_connections"); v > maxConns {
		t.Errorf("the API holds %v connections, more than api.max_connections = %d", v, maxConns)
	}
	if v, _ := b.metric(`acp_broker_api_connections_closed_total{reason="evicted"}`); v == 0 {
		t.Error("no idle connection was closed to make room")
	}

	// Every connection of the flood is closed by the broker within the
	// API's wait for a request's headers (10 s) and a margin.
	closedBy(t, conns, flooded, 13*time.Second)
}

// flood opens n connections, to each of targets in turn, and holds them
// until the test's end; it fails the test if any could not be opened,
// and returns them and when they were all open.
func flood(t *testing.T, n int, targets ...string) ([]net.Conn, time.Time) {
	t.Helper()
	conns := make([]net.Conn, n)
	var failed atomic.Int64
	var firstErr atomic.Value
	start := time.Now()
	var wg sync.WaitGroup
	const dialers = 8
	for d := range dialers {
		wg.Go(func() {
			dialer := net.Dialer{Timeout: 3 * time.Second}
			for i := d; i < n; i += dialers {
				c, err := dialer.Dial("tcp", targets[i%len(targets)])
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				conns[i] = c
			}
		})
	}
	wg.Wait()
	flooded := time.Now()
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	t.Logf("%d connections opened in %s (%d failed)", n-int(failed.Load()), flooded.Sub(start).Round(time.Millisecond), failed.Load())
	if failed.Load() > 0 {
		t.Errorf("%d of the flood's connections could not be opened: %v", failed.Load(), firstErr.Load())
	}
	return conns, flooded
}

// closedBy checks that the broker closed every one of conns within wait
// of flooded.
func closedBy(t *testing.T, conns []net.Conn, flooded time.Time, wait time.Duration) {
	t.Helper()
	deadline := flooded.Add(wait)
	open, last := 0, time.Time{}
	for _, c := range conns {
		if c == nil {
			continue
		}
		c.SetReadDeadline(deadline)
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			open++
		} else {
			last = time.Now()
		}
	}
	if open > 0 {
		t.Fatalf("%d of the flood's connections were still open %s after it", open, wait)
	}
	t.Logf("the flood's connections were all closed within %s of it", last.Sub(flooded).Round(time.Millisecond))
}

// Slack's HTTP listener (slack.mode = "http") holds a bounded number of
// connections too: 2,000 idle ones against a broker that may open 1,024
// files leave Slack's events taken, a mention answered within 5 s, and every
// connection of the flood closed within Slack's listener's 10 s wait
// for a request's headers (and a margin).
func TestListeners_AFloodOfIdleConnectionsLeavesSlackOverHTTPAnswering(t *testing.T) {
	w, front := newWorldOn(t, "slack", setup{})
	f := front.(*slackFront)
	if err := w.SlackOverHTTP(); err != nil {
		t.Fatal(err)
	}
	b := w.start()
	if err := unix.Prlimit(b.PID(), unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 1024, Max: 1024}, nil); err != nil {
		t.Fatalf("lowering the broker's limit on open files: %v", err)
	}
	conns, flooded := flood(t, 2000, w.Conf["slack.listen"].(string))
	at := time.Now()
	thread := f.mention(pAlice, "stream 3 10ms")
	if got := f.awaitAnswers(thread, 1)[0]; !strings.Contains(got.text, "chunk 3") {
		t.Fatalf("the answer during the flood: %q", got.text)
	}
	took := time.Since(at)
	t.Logf("a mention was answered in %s during the flood", took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("a mention took %s to be answered during the flood, not once its connections timed out", took.Round(time.Millisecond))
	}
	closedBy(t, conns, flooded, 13*time.Second)
}
