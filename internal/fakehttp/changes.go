package fakehttp

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Changes tells those who wait on a fake server that its state changed:
// a request, an acknowledgement, a connection coming or going. The zero
// value is ready; its methods are safe for concurrent use, and Notify
// may be called under the server's own lock (Changes takes no other).
type Changes struct {
	mu     sync.Mutex
	ch     chan struct{} // closed at the next change
	closed bool
}

func (c *Changes) chanLocked() chan struct{} {
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	return c.ch
}

// Next returns a channel that is closed at the next change. Take the
// channel before checking the state it guards, so that no change is
// missed.
func (c *Changes) Next() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.chanLocked()
}

// Notify records a change: it wakes everyone waiting.
func (c *Changes) Notify() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.chanLocked())
	c.ch = make(chan struct{})
}

// Close records that the server closed and wakes everyone waiting;
// WaitFor then returns its closed error. It is safe to call twice.
func (c *Changes) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	close(c.chanLocked())
	c.ch = make(chan struct{})
}

// WaitFor blocks until cond returns true, ctx ends (its error is
// returned) or Close is called (closed is returned). cond is called
// without any lock held, once at first and again after every change.
func (c *Changes) WaitFor(ctx context.Context, cond func() bool, closed error) error {
	for {
		c.mu.Lock()
		ch, done := c.chanLocked(), c.closed
		c.mu.Unlock()
		if cond() {
			return nil
		}
		if done {
			return closed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Waiting is what a fake offers those who wait on its state: Changed,
// WaitFor and Await, over the fake's Changes. A fake embeds it; make one
// with NewWaiting.
type Waiting struct {
	changes *Changes
	closed  error         // WaitFor's answer once the fake closed
	tb      testing.TB    // Await fails it
	timeout time.Duration // Await's bound
	name    string        // the fake's, in Await's failures
}

// NewWaiting returns the Waiting over changes of the fake called name:
// WaitFor returns closed once the fake closed, and Await fails tb after
// timeout.
func NewWaiting(changes *Changes, closed error, tb testing.TB, timeout time.Duration, name string) Waiting {
	return Waiting{changes: changes, closed: closed, tb: tb, timeout: timeout, name: name}
}

// Changed returns a channel that is closed at the next change the fake
// records (a request, an acknowledgement, a connection coming or going).
// Take the channel before checking the state it guards, so that no
// change is missed.
func (w Waiting) Changed() <-chan struct{} { return w.changes.Next() }

// WaitFor blocks until cond returns true, ctx ends (its error is
// returned) or the fake closes (its closed error). cond is called without
// the fake's lock held, once at first and again after every change; it
// may use the fake's accessors.
func (w Waiting) WaitFor(ctx context.Context, cond func() bool) error {
	return w.changes.WaitFor(ctx, cond, w.closed)
}

// Await is WaitFor bounded by the fake's wait timeout that fails the
// test (tb.Fatalf, so call it from the test's goroutine) on timeout; what
// names the awaited condition in the failure.
func (w Waiting) Await(what string, cond func() bool) {
	w.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	defer cancel()
	if err := w.WaitFor(ctx, cond); err != nil {
		w.tb.Fatalf("%s: waiting for %s: %v", w.name, what, err)
	}
}

// WaitFirst waits with wait until one of the items list returns
// satisfies match (nil matches any), and returns it: a fake's
// WaitMessage, over its messages as they now stand.
func WaitFirst[M any](ctx context.Context, wait func(context.Context, func() bool) error, list func() []M, match func(M) bool) (M, error) {
	var found M
	err := wait(ctx, func() bool {
		for _, m := range list() {
			if match == nil || match(m) {
				found = m
				return true
			}
		}
		return false
	})
	return found, err
}
