// Package listener bounds the connections an HTTP server holds open, so
// that a flood of idle connections never uses up the process's file
// descriptors: past the bound, the connection idle longest is closed to
// make room, and a new one is closed at once when none is idle.
package listener

import (
	"container/list"
	"net"
	"net/http"
	"sync"
)

// Limited is a net.Listener that holds at most max connections open.
// Its ConnState must be the http.Server's ConnState, so that it knows
// which connections are idle (accepted and waiting for a request, or
// between requests) and may be closed to make room.
type Limited struct {
	net.Listener
	max int

	mu      sync.Mutex
	open    int
	idle    list.List // of *conn, idle longest first
	evicted uint64
	refused uint64
}

// Limit bounds ln to n connections open (at least 1).
func Limit(ln net.Listener, n int) *Limited {
	return &Limited{Listener: ln, max: max(n, 1)}
}

// Max is the bound on connections open.
func (l *Limited) Max() int { return l.max }

// Stats are a Limited listener's counters.
type Stats struct {
	// Open is the connections open now.
	Open int
	// Evicted counts the idle connections closed to make room for new
	// ones; Refused the new ones closed at once, every open one being
	// busy with a request.
	Evicted, Refused uint64
}

// Stats reads the counters.
func (l *Limited) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Open: l.open, Evicted: l.evicted, Refused: l.refused}
}

// Accept waits for a connection. At the bound it closes the connection
// idle longest to make room; when every open connection is busy, it
// closes the new one and waits for another. It never holds more than
// max connections.
func (l *Limited) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		var victim *conn
		if l.open >= l.max {
			if e := l.idle.Front(); e != nil {
				victim = e.Value.(*conn)
				l.forgetLocked(victim)
				l.evicted++
			} else {
				l.refused++
				l.mu.Unlock()
				c.Close()
				continue
			}
		}
		w := &conn{Conn: c, l: l}
		w.open = true
		l.open++
		w.idle = l.idle.PushBack(w) // idle until its first request
		l.mu.Unlock()
		if victim != nil {
			victim.Conn.Close()
		}
		return w, nil
	}
}

// ConnState follows what the HTTP server does with each connection:
// set it as the server's ConnState (it calls on to next when not nil).
func (l *Limited) ConnState(next func(net.Conn, http.ConnState)) func(net.Conn, http.ConnState) {
	return func(nc net.Conn, st http.ConnState) {
		if c, ok := nc.(*conn); ok && c.l == l {
			l.mu.Lock()
			if c.open {
				switch st {
				case http.StateIdle:
					if c.idle == nil {
						c.idle = l.idle.PushBack(c)
					}
				case http.StateActive:
					if c.idle != nil {
						l.idle.Remove(c.idle)
						c.idle = nil
					}
				case http.StateHijacked, http.StateClosed:
					// A hijacked connection is no longer the server's
					// to count; its Close releases nothing twice.
					l.forgetLocked(c)
				}
			}
			l.mu.Unlock()
		}
		if next != nil {
			next(nc, st)
		}
	}
}

// forgetLocked stops counting c. l.mu must be held.
func (l *Limited) forgetLocked(c *conn) {
	if !c.open {
		return
	}
	c.open = false
	l.open--
	if c.idle != nil {
		l.idle.Remove(c.idle)
		c.idle = nil
	}
}

// conn is an accepted connection, counted until it closes.
type conn struct {
	net.Conn
	l *Limited
	// Guarded by l.mu: open while counted; idle is its place in l.idle
	// while it waits for a request.
	open bool
	idle *list.Element
}

// Close closes the connection and stops counting it; it is safe to call
// twice.
func (c *conn) Close() error {
	c.l.mu.Lock()
	c.l.forgetLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}
