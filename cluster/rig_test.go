package cluster

import (
	"context"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"acpbroker/acp/host"
	"acpbroker/pool"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// runNATS starts a NATS server on 127.0.0.1 (port 0: any free one) and
// stops it when the test ends.
func runNATS(t *testing.T, port int, maxPayload int32) *server.Server {
	t.Helper()
	if port == 0 {
		port = -1
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true, MaxPayload: maxPayload})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

func natsPort(s *server.Server) int { return s.Addr().(*net.TCPAddr).Port }

func dial(t *testing.T, url string) *nats.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	nc, err := Connect(ctx, Options{URL: url, Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func newClient(t *testing.T, nc *nats.Conn, o ClientOptions) *Client {
	t.Helper()
	if o.Broker == "" {
		o.Broker = "broker"
	}
	if o.BeatInterval == 0 {
		o.BeatInterval = 100 * time.Millisecond
	}
	if o.AskWindow == 0 {
		o.AskWindow = 100 * time.Millisecond
	}
	if o.Resend == 0 {
		o.Resend = 200 * time.Millisecond
	}
	c := NewClient(nc, o)
	t.Cleanup(c.Close)
	return c
}

func serve(t *testing.T, nc *nats.Conn, s Starter, o ServerOptions) *Server {
	t.Helper()
	if o.BeatInterval == 0 {
		o.BeatInterval = 100 * time.Millisecond
	}
	if o.Resend == 0 {
		o.Resend = 200 * time.Millisecond
	}
	if o.Profiles == nil {
		o.Profiles = []string{"p"}
	}
	if o.Capacity == 0 {
		o.Capacity = 4
	}
	srv, err := Serve(nc, s, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Close(ctx)
	})
	return srv
}

// waitHosts waits until the client knows n hosts alive.
func waitHosts(t *testing.T, c *Client, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		alive := 0
		for _, h := range c.Hosts() {
			if !h.Lost {
				alive++
			}
		}
		if alive == n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the client knows %v, want %d hosts alive", c.Hosts(), n)
}

// procStarter starts real processes running argv, with a real host.Host
// serving dir.
type procStarter struct {
	argv []string
	dir  string

	mu       sync.Mutex
	started  int
	released int
}

func (s *procStarter) Start(ctx context.Context, thread, profile string) (Started, error) {
	p, err := pool.StartProcess(pool.ProcessSpec{Command: s.argv[0], Args: s.argv[1:], Dir: s.dir, Env: os.Environ(), Logger: zerolog.Nop()})
	if err != nil {
		return Started{}, err
	}
	h := host.New(host.Options{Terminal: func(c host.Command) (host.Command, error) {
		c.Env = append(os.Environ(), c.Env...)
		return c, nil
	}})
	s.mu.Lock()
	s.started++
	s.mu.Unlock()
	return Started{Proc: p, Host: h, Dir: s.dir, Release: func() {
		p.Stop(time.Second)
		_ = h.Close()
		s.mu.Lock()
		s.released++
		s.mu.Unlock()
	}}, nil
}

func (s *procStarter) counts() (started, released int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started, s.released
}

// fakeProc is an agent on goroutines: its stdin and stdout are pipes.
type fakeProc struct {
	inR            *io.PipeReader
	inW            *io.PipeWriter
	outR           *io.PipeReader
	outW           *io.PipeWriter
	exited, reaped chan struct{}
	once, monitor  sync.Once
}

func newFakeProc() *fakeProc {
	p := &fakeProc{exited: make(chan struct{}), reaped: make(chan struct{})}
	p.inR, p.inW = io.Pipe()
	p.outR, p.outW = io.Pipe()
	go func() { _, _ = io.Copy(io.Discard, p.inR) }()
	return p
}

func (p *fakeProc) PID() int                { return 4242 }
func (p *fakeProc) Stdin() io.WriteCloser   { return p.inW }
func (p *fakeProc) Stdout() io.ReadCloser   { return p.outR }
func (p *fakeProc) Exited() <-chan struct{} { return p.exited }
func (p *fakeProc) Reaped() <-chan struct{} { return p.reaped }
func (p *fakeProc) ExitErr() error          { return nil }
func (p *fakeProc) StderrTail() string      { return "" }
func (p *fakeProc) Monitor(readerDone <-chan struct{}) {
	p.monitor.Do(func() {
		go func() {
			<-p.exited
			<-readerDone
			close(p.reaped)
		}()
	})
}
func (p *fakeProc) Alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}
func (p *fakeProc) Stop(time.Duration) { p.Kill() }
func (p *fakeProc) Kill() {
	p.once.Do(func() {
		close(p.exited)
		p.outW.Close()
		p.inR.Close()
	})
	// One never monitored (its host gave up its start) has no reader to
	// wait for, as a pool's Proc reaps itself.
	done := make(chan struct{})
	close(done)
	p.Monitor(done)
	<-p.reaped
}

// fakeStarter starts fakeProcs and records the most it ran at once.
type fakeStarter struct {
	mu       sync.Mutex
	running  int
	most     int
	released int
}

func (s *fakeStarter) Start(ctx context.Context, thread, profile string) (Started, error) {
	p := newFakeProc()
	s.mu.Lock()
	s.running++
	s.most = max(s.most, s.running)
	s.mu.Unlock()
	var once sync.Once
	return Started{Proc: p, Host: host.New(host.Options{}), Dir: "/", Release: func() {
		once.Do(func() {
			p.Kill()
			s.mu.Lock()
			s.running--
			s.released++
			s.mu.Unlock()
		})
	}}, nil
}

func (s *fakeStarter) stats() (running, most, released int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running, s.most, s.released
}
