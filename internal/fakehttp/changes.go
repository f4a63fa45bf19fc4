package fakehttp

import (
	"context"
	"sync"
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
