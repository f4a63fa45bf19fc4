package listener

import (
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs an HTTP server on a listener limited to n, with handler h.
func serve(t *testing.T, n int, h http.Handler) (*Limited, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Limit(ln, n)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Minute, ConnState: l.ConnState(nil)}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(l) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return l, ln.Addr().String()
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer reports whether the server closed c within d.
func closedByServer(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func awaitOpen(t *testing.T, l *Limited, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for l.Stats().Open != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open, want %d", l.Stats().Open, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Connections that never send a request fill the bound; a client's
// request still gets its answer, and the connection idle longest is the
// one closed to make room for it.
func TestLimited_ClosesTheIdleLongestToMakeRoom(t *testing.T) {
	l, addr := serve(t, 4, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	var idle []net.Conn
	for range 4 {
		idle = append(idle, dial(t, addr))
		time.Sleep(10 * time.Millisecond) // accepted in this order
	}
	awaitOpen(t, l, 4)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("a request beside four idle connections: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" {
		t.Fatalf("answered %q", body)
	}
	if !closedByServer(idle[0], 2*time.Second) {
		t.Error("the connection idle longest was not closed")
	}
	for i, c := range idle[1:] {
		if closedByServer(c, 50*time.Millisecond) {
			t.Errorf("idle connection %d was closed, not the oldest", i+1)
		}
	}
	if st := l.Stats(); st.Evicted != 1 || st.Refused != 0 || st.Open > 4 {
		t.Errorf("stats %+v, want one evicted, none refused, at most 4 open", st)
	}
}

// When every connection is busy with a request, a new one is closed at
// once rather than held: the count never passes the bound.
func TestLimited_ClosesANewConnectionWhenEveryOneIsBusy(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	l, addr := serve(t, 2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	}))
	defer close(release)
	for range 2 {
		c := dial(t, addr)
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		<-entered
	}
	extra := dial(t, addr)
	if !closedByServer(extra, 2*time.Second) {
		t.Fatal("a connection past the bound was held open while every other was busy")
	}
	if st := l.Stats(); st.Refused != 1 || st.Evicted != 0 || st.Open != 2 {
		t.Errorf("stats %+v, want one refused, none evicted, 2 open", st)
	}
}

// A connection closed by the server or by its client is no longer
// counted.
func TestLimited_CountsOnlyOpenConnections(t *testing.T) {
	l, addr := serve(t, 8, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	cs := []net.Conn{dial(t, addr), dial(t, addr), dial(t, addr)}
	awaitOpen(t, l, 3)
	for _, c := range cs {
		c.Close()
	}
	awaitOpen(t, l, 0)
}
