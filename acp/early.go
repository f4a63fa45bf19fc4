package acp

import (
	"fmt"
	"unicode/utf8"
)

// earlyQueue is what the Conn keeps of the updates for one session not
// known yet: the state they set, folded as they come, and the updates
// themselves, for the caller of NewSession or LoadSession.
type earlyQueue struct {
	state   SessionState
	updates []Update
	bytes   int // of the agent's JSON, counted into Conn.earlyBytes
}

// keepEarlyLocked keeps an update for a session not known yet, if a
// session is being created and the bounds allow; else it says why not.
// change is the update's state change, when it is of a state kind; size
// is the length of its JSON. c.mu is held.
func (c *Conn) keepEarlyLocked(sessionID string, u Update, change stateChange, size int) (why string) {
	if c.creating == 0 {
		return "no session is being created"
	}
	q := c.early[sessionID]
	switch {
	case q == nil && len(c.early) >= maxEarlySessions:
		return fmt.Sprintf("updates for %d sessions not yet known are kept already", maxEarlySessions)
	case q != nil && len(q.updates) >= maxEarlyUpdates:
		return fmt.Sprintf("%d updates for this session are kept already", maxEarlyUpdates)
	case c.earlyBytes+size > maxEarlyBytes:
		return fmt.Sprintf("the updates for sessions not yet known would pass %d bytes", maxEarlyBytes)
	}
	if q == nil {
		q = &earlyQueue{}
		c.early[sessionID] = q
	}
	if isStateKind(u.Kind) {
		q.state.apply(change)
		c.stats.unknownOptions.Add(uint64(change.skipped))
	}
	q.updates = append(q.updates, u)
	q.bytes += size
	c.earlyBytes += size
	return ""
}

// takeEarlyLocked removes and returns what was kept for sessionID (nil
// if nothing). c.mu is held.
func (c *Conn) takeEarlyLocked(sessionID string) *earlyQueue {
	q := c.early[sessionID]
	if q == nil {
		return nil
	}
	delete(c.early, sessionID)
	c.earlyBytes -= q.bytes
	return q
}

// creatingSession counts a session/new or session/load in flight: while
// one is, updates for sessions not yet known are kept. The function it
// returns counts it out, once the session is registered or has failed;
// when none is left in flight, what is still kept is dropped and counted.
func (c *Conn) creatingSession() (done func()) {
	c.mu.Lock()
	c.creating++
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		c.creating--
		dropped := 0
		if c.creating == 0 {
			for id := range c.early {
				dropped += len(c.takeEarlyLocked(id).updates)
			}
		}
		c.mu.Unlock()
		if dropped > 0 {
			c.stats.earlyDropped.Add(uint64(dropped))
			c.noisy.Warn().Int("updates", dropped).Msg("updates for sessions never created; dropped")
		}
	}
}

// excerpt is s, cut to n bytes (at a character) with "…" when longer.
func excerpt(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// maxLogged bounds a string the agent chose (an id, a method, a path in
// an error) as the log shows it.
const maxLogged = 256

// logged is s as the log shows it: cut to maxLogged bytes.
func logged(s string) string { return excerpt(s, maxLogged) }
