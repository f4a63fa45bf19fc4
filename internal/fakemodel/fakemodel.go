// Package fakemodel is what the fake model servers (fakeopenai,
// fakeanthropic) share: an HTTP server on 127.0.0.1, a script of replies
// used in order, a record of the requests served that tests can wait on,
// and the writing of answers as Server-Sent Events.
package fakemodel

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// Server serves the routes it was started with; Request is a recorded
// request. Its methods are safe for concurrent use.
type Server[Request any] struct {
	name string
	url  string
	srv  *http.Server
	logf func(string, ...any)
	done chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	queue   []Reply
	reqs    []*Request
	changed chan struct{}
	seq     int
	closed  bool
}

// Start listens on 127.0.0.2 (127.0.0.1 where that cannot be had) on a
// free port and serves the routes routes adds until Close. name prefixes
// its errors; logf (optional) receives one line per request from the
// handlers. An agent behind the broker's proxy reaches it as it would
// a model provider, through the proxy: its own 127.0.0.1, which it
// reaches straight, is not the host's.
func Start[Request any](name string, logf func(string, ...any), routes func(*http.ServeMux)) (*Server[Request], error) {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, err
		}
	}
	s := &Server[Request]{
		name:    name,
		url:     "http://" + ln.Addr().String(),
		logf:    logf,
		done:    make(chan struct{}),
		changed: make(chan struct{}),
	}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	mux := http.NewServeMux()
	routes(mux)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	s.wg.Go(func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logf("%s: serve: %v", name, err)
		}
	})
	return s, nil
}

// BaseURL is http://127.0.0.2:port (see Start), without a path.
func (s *Server[Request]) BaseURL() string { return s.url }

// Logf logs one line through the Logf the server was started with.
func (s *Server[Request]) Logf(format string, args ...any) { s.logf(format, args...) }

// Done is closed when the server closes; handlers that hold a response
// open wait on it.
func (s *Server[Request]) Done() <-chan struct{} { return s.done }

// Enqueue appends replies to the script, to be used by the next main
// requests in order.
func (s *Server[Request]) Enqueue(replies ...Reply) {
	s.mu.Lock()
	s.queue = append(s.queue, replies...)
	s.mu.Unlock()
}

// Pending is the number of scripted replies not used yet.
func (s *Server[Request]) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// Next takes the next scripted reply for a main request (one that
// offers tools). Any other request, or one that finds the script used
// up, gets Text(DefaultText), and scripted is false.
func (s *Server[Request]) Next(main bool) (reply Reply, scripted bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !main || len(s.queue) == 0 {
		return Text(DefaultText), false
	}
	r := s.queue[0]
	s.queue = s.queue[1:]
	return r, true
}

// Requests returns copies of the recorded requests, oldest first.
func (s *Server[Request]) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.reqs))
	for i, r := range s.reqs {
		out[i] = *r
	}
	return out
}

// Wait blocks until cond holds for the recorded requests, ctx ends, or the
// server closes.
func (s *Server[Request]) Wait(ctx context.Context, cond func([]Request) bool) error {
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if cond(s.Requests()) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-s.done:
			return errors.New(s.name + ": server closed")
		}
	}
}

// Close stops the server: open streams end, and it returns once every
// handler has returned.
func (s *Server[Request]) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	close(s.done)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	s.wg.Wait()
}

// Record adds the request build makes (given its sequence number, from
// 1) to the record and wakes waiters.
func (s *Server[Request]) Record(build func(seq int) *Request) *Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	req := build(s.seq)
	s.reqs = append(s.reqs, req)
	s.notifyLocked()
	return req
}

// Update changes a recorded request under the lock and wakes waiters.
func (s *Server[Request]) Update(req *Request, f func(*Request)) {
	s.mu.Lock()
	f(req)
	s.notifyLocked()
	s.mu.Unlock()
}

func (s *Server[Request]) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}
