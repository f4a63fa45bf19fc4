package cluster

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// silencer is a TCP relay to a server that can go silent: the
// connections it relays then carry nothing either way and are not
// closed, as a flow through a failed switch; connections made since are
// relayed again, as after the switch is back (the old flow's TCP would
// still be backing off).
type silencer struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	flows  []*flow
	wg     sync.WaitGroup
}

type flow struct {
	mu     sync.Mutex
	silent bool
	a, b   net.Conn
}

func newSilencer(t *testing.T, target string) *silencer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &silencer{ln: ln, target: target}
	s.wg.Go(s.accept)
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, f := range s.flows {
			f.a.Close()
			f.b.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *silencer) accept() {
	for {
		a, err := s.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", s.target)
		if err != nil {
			a.Close()
			continue
		}
		f := &flow{a: a, b: b}
		s.mu.Lock()
		s.flows = append(s.flows, f)
		s.mu.Unlock()
		s.wg.Go(func() { f.pipe(b, a) })
		s.wg.Go(func() { f.pipe(a, b) })
	}
}

// pipe copies from src to dst until src ends, dropping what it reads
// once the flow is silent.
func (f *flow) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		f.mu.Lock()
		silent := f.silent
		f.mu.Unlock()
		if n > 0 && !silent {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			}
			return
		}
	}
}

// silence makes every flow relayed so far silent.
func (s *silencer) silence() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.flows {
		f.mu.Lock()
		f.silent = true
		f.mu.Unlock()
	}
}

// A connection whose server goes silent (nothing refused, nothing
// answered) is dropped after about StaleAfter and dialed afresh, and works
// again: it is not left to TCP's retransmissions.
func TestConnect_AConnectionGoneSilentIsDialedAfresh(t *testing.T) {
	ns := runNATS(t, 0, 0)
	relay := newSilencer(t, ns.Addr().String())
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	const stale = time.Second
	nc, err := Connect(ctx, Options{URL: "nats://" + relay.ln.Addr().String(), StaleAfter: stale})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	back := make(chan struct{}, 1)
	nc.SetReconnectHandler(func(*nats.Conn) {
		select {
		case back <- struct{}{}:
		default:
		}
	})
	sub, err := nc.Subscribe("echo", func(m *nats.Msg) { m.Respond(m.Data) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if _, err := nc.Request("echo", []byte("before"), time.Second); err != nil {
		t.Fatal(err)
	}
	relay.silence()
	silenced := time.Now()
	select {
	case <-back:
	case <-time.After(5 * stale):
		t.Fatalf("the connection was not dialed afresh within %s of going silent", 5*stale)
	}
	took := time.Since(silenced)
	if took < stale/2 {
		t.Errorf("the connection was dropped %s after going silent, before StaleAfter (%s) could pass", took, stale)
	}
	if m, err := nc.Request("echo", []byte("after"), time.Second); err != nil || string(m.Data) != "after" {
		t.Errorf("after the new dial a request = %v, %v", m, err)
	}
	t.Logf("dialed afresh %s after the connection went silent (StaleAfter %s)", took.Round(time.Millisecond), stale)
}
