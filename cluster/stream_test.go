package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"acpbroker/pool"
)

// startCat places a `cat` agent through a client and returns it, with
// Monitor called as the pool would.
func startCat(t *testing.T, c *Client) (pool.Remote, chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r, err := c.Start(ctx, "thread", "p", nil, func() { t.Error("waited for a host") })
	if err != nil {
		t.Fatal(err)
	}
	readerDone := make(chan struct{})
	r.Proc.Monitor(readerDone)
	t.Cleanup(func() {
		r.Proc.Kill()
	})
	return r, readerDone
}

func TestStream_BytesBothWaysMatch(t *testing.T) {
	ns := runNATS(t, 0, 0)
	st := &procStarter{argv: []string{"cat"}, dir: t.TempDir()}
	serve(t, dial(t, ns.ClientURL()), st, ServerOptions{Name: "h1"})
	c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{})
	waitHosts(t, c, 1)
	r, readerDone := startCat(t, c)

	big := make([]byte, 6<<20)
	_, _ = rand.Read(big)
	var small bytes.Buffer
	for i := range 5000 {
		fmt.Fprintf(&small, "line %d\n", i)
	}
	want := append(append([]byte(nil), big...), small.Bytes()...)

	writeErr := make(chan error, 1)
	go func() {
		in := r.Proc.Stdin()
		if _, err := in.Write(big); err != nil {
			writeErr <- err
			return
		}
		for line := range strings.Lines(small.String()) {
			if _, err := io.WriteString(in, line); err != nil {
				writeErr <- err
				return
			}
		}
		writeErr <- in.Close()
	}()
	got, err := io.ReadAll(r.Proc.Stdout())
	close(readerDone)
	if err != nil {
		t.Fatalf("reading stdout: %v", err)
	}
	if err := <-writeErr; err != nil {
		t.Fatalf("writing stdin: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want the %d written (first difference at %d)", len(got), len(want), firstDiff(got, want))
	}
	select {
	case <-r.Proc.Reaped():
	case <-time.After(5 * time.Second):
		t.Fatal("cat's end did not arrive after its stdout")
	}
	if err := r.Proc.ExitErr(); err == nil || err.Error() != "agent exited with status 0" {
		t.Errorf("ExitErr = %v, want the host's words for cat ending at its stdin's end", err)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// An agent whose output nobody reads is blocked by the window: the host
// stops reading its stdout rather than keeping what it writes.
func TestStream_BackPressureBoundsWhatTheHostReads(t *testing.T) {
	ns := runNATS(t, 0, 0)
	const window = 256 << 10
	st := &procStarter{argv: []string{"yes", "an agent that talks too much"}, dir: t.TempDir()}
	srv := serve(t, dial(t, ns.ClientURL()), st, ServerOptions{Name: "h1", Window: window})
	c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{})
	waitHosts(t, c, 1)
	r, readerDone := startCat(t, c)

	time.Sleep(time.Second)
	first := srv.stats.bytesSent.Load()
	time.Sleep(500 * time.Millisecond)
	second := srv.stats.bytesSent.Load()
	if first == 0 {
		t.Fatal("the host relayed nothing of the agent's output")
	}
	if second > window+defaultChunk || second != first {
		t.Fatalf("the host relayed %d then %d bytes nobody read; want it stopped at the window (%d)", first, second, window)
	}
	if !r.Proc.Alive() {
		t.Fatal("the agent is not alive: it should be blocked writing")
	}
	// Reading resumes the flow.
	buf := make([]byte, 1<<20)
	if _, err := io.ReadFull(r.Proc.Stdout(), buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(buf, []byte("an agent that talks too much\n")) {
		t.Fatalf("read %q", buf[:40])
	}
	// Killed while its output is still unread, it ends at once: what it
	// had to say is dropped, and its end is not held behind it.
	close(readerDone)
	start := time.Now()
	r.Proc.Kill()
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Kill took %s with the agent's output unread", d)
	}
	select {
	case <-r.Proc.Exited():
	default:
		t.Fatal("Exited is not closed after Kill")
	}
}

// A NATS server restarted in the middle of both streams loses nothing and
// duplicates nothing, and the agent is not taken for gone.
func TestStream_SurvivesNATSRestart(t *testing.T) {
	first := runNATS(t, 0, 0)
	port := natsPort(first)
	st := &procStarter{argv: []string{"cat"}, dir: t.TempDir()}
	serve(t, dial(t, first.ClientURL()), st, ServerOptions{Name: "h1"})
	c := newClient(t, dial(t, first.ClientURL()), ClientOptions{HostTimeout: 5 * time.Second})
	waitHosts(t, c, 1)
	r, readerDone := startCat(t, c)

	const lines = 40000
	go func() {
		in := r.Proc.Stdin()
		for i := range lines {
			if _, err := fmt.Fprintf(in, "%08d\n", i); err != nil {
				return
			}
			if i%500 == 0 {
				time.Sleep(10 * time.Millisecond)
			}
		}
		_ = in.Close()
	}()
	restarted := make(chan struct{})
	go func() {
		defer close(restarted)
		time.Sleep(300 * time.Millisecond)
		first.Shutdown()
		first.WaitForShutdown()
		time.Sleep(300 * time.Millisecond)
		second, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
		if err != nil {
			t.Error(err)
			return
		}
		go second.Start()
		t.Cleanup(func() { second.Shutdown(); second.WaitForShutdown() })
		if !second.ReadyForConnections(5 * time.Second) {
			t.Error("the second NATS server was not ready")
		}
	}()
	got, err := io.ReadAll(r.Proc.Stdout())
	close(readerDone)
	<-restarted
	if err != nil {
		t.Fatalf("reading stdout: %v", err)
	}
	var want bytes.Buffer
	for i := range lines {
		fmt.Fprintf(&want, "%08d\n", i)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("read %d bytes, want %d (first difference at %d)", len(got), want.Len(), firstDiff(got, want.Bytes()))
	}
	<-r.Proc.Reaped()
	if err := r.Proc.ExitErr(); err == nil || err.Error() != "agent exited with status 0" {
		t.Fatalf("ExitErr = %v, want the host's words for an agent that ended on its own", err)
	}
	t.Logf("retransmits: broker %d; dropped: broker %d", c.stats.retransmits.Load(), c.stats.dropped.Load())
}

// Stop goes to the host: the agent's stdin is closed there, and cat, at
// its end, exits; every byte it wrote before is read first.
func TestStop_ThroughTheHost(t *testing.T) {
	ns := runNATS(t, 0, 0)
	serve(t, dial(t, ns.ClientURL()), &procStarter{argv: []string{"cat"}, dir: t.TempDir()}, ServerOptions{Name: "h1"})
	c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{})
	waitHosts(t, c, 1)
	r, readerDone := startCat(t, c)
	if _, err := io.WriteString(r.Proc.Stdin(), "last words\n"); err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(r.Proc.Stdout())
		close(readerDone)
		got <- b
	}()
	start := time.Now()
	r.Proc.Stop(5 * time.Second)
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Stop took %s for an agent that ends when its stdin closes", d)
	}
	select {
	case <-r.Proc.Reaped():
	default:
		t.Fatal("Stop returned before the agent was reaped")
	}
	if b := <-got; string(b) != "last words\n" {
		t.Fatalf("read %q before the end, want the agent's last words", b)
	}
	if r.Proc.Alive() {
		t.Fatal("Alive after Stop")
	}
}

// A NATS outage longer than HostTimeout is not taken for the loss of the
// hosts: a broker that hears no one while it is cut off loses no one.
func TestOutage_LongerThanHostTimeoutLosesNoHost(t *testing.T) {
	first := runNATS(t, 0, 0)
	port := natsPort(first)
	serve(t, dial(t, first.ClientURL()), &procStarter{argv: []string{"cat"}, dir: t.TempDir()}, ServerOptions{Name: "h1", OwnerTimeout: time.Second})
	c := newClient(t, dial(t, first.ClientURL()), ClientOptions{HostTimeout: time.Second})
	waitHosts(t, c, 1)
	r, readerDone := startCat(t, c)
	defer close(readerDone)

	first.Shutdown()
	first.WaitForShutdown()
	time.Sleep(2 * time.Second)
	second, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go second.Start()
	t.Cleanup(func() { second.Shutdown(); second.WaitForShutdown() })
	if !second.ReadyForConnections(5 * time.Second) {
		t.Fatal("the second NATS server was not ready")
	}
	if _, err := io.WriteString(r.Proc.Stdin(), "still there?\n"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len("still there?\n"))
	read := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(r.Proc.Stdout(), buf)
		read <- err
	}()
	select {
	case err := <-read:
		if err != nil {
			t.Fatalf("after the outage: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no answer after the outage")
	}
	select {
	case <-r.Proc.Exited():
		t.Fatalf("the agent was taken for gone: %v", r.Proc.ExitErr())
	default:
	}
	if hosts := c.Hosts(); len(hosts) != 1 || hosts[0].Lost {
		t.Fatalf("Hosts() = %+v, want h1 alive", hosts)
	}
}

// BenchmarkStream_Cat measures bytes through an agent's stdin and back
// from its stdout, over a NATS server on loopback.
func BenchmarkStream_Cat(b *testing.B) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		b.Fatal(err)
	}
	go ns.Start()
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	if !ns.ReadyForConnections(5 * time.Second) {
		b.Fatal("not ready")
	}
	hc, err := Connect(b.Context(), Options{URL: ns.ClientURL()})
	if err != nil {
		b.Fatal(err)
	}
	defer hc.Close()
	bc, err := Connect(b.Context(), Options{URL: ns.ClientURL()})
	if err != nil {
		b.Fatal(err)
	}
	defer bc.Close()
	srv, err := Serve(hc, &procStarter{argv: []string{"cat"}, dir: b.TempDir()}, ServerOptions{Name: "h1", Capacity: 1, Profiles: []string{"p"}})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close(context.Background())
	c := NewClient(bc, ClientOptions{Broker: "bench"})
	defer c.Close()
	r, err := c.Start(b.Context(), "t", "p", nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	readerDone := make(chan struct{})
	r.Proc.Monitor(readerDone)
	defer func() { close(readerDone); r.Proc.Kill() }()
	chunk := make([]byte, 1<<20)
	back := make([]byte, len(chunk))
	b.SetBytes(int64(len(chunk)))
	b.ResetTimer()
	for b.Loop() {
		go func() { _, _ = r.Proc.Stdin().Write(chunk) }()
		if _, err := io.ReadFull(r.Proc.Stdout(), back); err != nil {
			b.Fatal(err)
		}
	}
}

// The receiver takes each chunk once and in order: a duplicate, or a chunk
// after a gap, is dropped and counted, and acknowledged with what it has.
func TestReceiver_DropsDuplicatesAndGaps(t *testing.T) {
	ns := runNATS(t, 0, 0)
	nc := dial(t, ns.ClientURL())
	var st relayStats
	r := newReceiver(nc, "test.ack", 1<<20, &st, nil)
	acks, err := nc.SubscribeSync("test.ack")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := nc.Subscribe("test.data", r.onMsg)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	send := func(seq int, kind, data string) {
		m := &nats.Msg{Subject: "test.data", Header: nats.Header{}, Data: []byte(data)}
		m.Header.Set(hSeq, fmt.Sprint(seq))
		m.Header.Set(hKind, kind)
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	send(1, kindData, "one ")
	send(1, kindData, "one ")   // duplicate
	send(3, kindData, "three ") // after a gap
	send(2, kindData, "two ")
	send(3, kindData, "three ")
	send(4, kindEOF, "")
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "one two three " {
		t.Fatalf("read %q, want each chunk once, in order", got)
	}
	if n := st.dropped.Load(); n != 2 {
		t.Fatalf("dropped %d, want 2 (a duplicate and a chunk after a gap)", n)
	}
	var last string
	for {
		m, err := acks.NextMsg(200 * time.Millisecond)
		if err != nil {
			break
		}
		last = string(m.Data)
	}
	if last != "4 4" {
		t.Fatalf("the last acknowledgement was %q, want every chunk received and consumed (4 4)", last)
	}
}
