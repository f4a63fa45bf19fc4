package thread

import "time"

// markState is the status mark on the prompt's message, kept in step
// with the turn apart from the answer: marks in a busy channel may queue
// behind each other, and the answer does not wait for them. The final
// mark waits for the answer, though: a prompt marked ended shows how it
// ended in the thread, even when the final view waits out a rate limit
// the marks do not share. States passed over meanwhile are skipped. What may be on the message is
// known, so a mark a failed call may have left is taken off before the
// final one counts as shown.
type markState struct {
	want Mark  // the mark the prompt should show
	on   marks // the marks that may be on the message
	put  Mark  // the mark known to be on it
	busy bool  // a call is on its way
	// tried is a mark on the way whose call failed: decoration, not tried
	// again; the next change (at the latest, the final mark) takes off
	// what it may have left.
	tried    Mark
	failures int // the final mark's, in a row
	retryAt  time.Time
	dropped  bool // the Server gave up on the marks: the next start settles them
	done     bool // the final mark is on, or given up on
}

// marks is a set of marks.
type marks uint32

func (m marks) has(k Mark) bool      { return m&(1<<k) != 0 }
func (m marks) with(k Mark) marks    { return m | 1<<k }
func (m marks) without(k Mark) marks { return m &^ (1 << k) }

// actMark starts the call that brings the mark closer to what the turn
// says, and returns when to try again after a failed final mark.
func (v *turnView) actMark(now time.Time) time.Time {
	m := &v.mark
	final := v.phase == phaseEnded
	if m.done || m.busy || m.dropped || m.want == 0 {
		return time.Time{}
	}
	if final && !v.answer.done {
		return time.Time{} // the end is not shown yet: the mark stays as it is until it is
	}
	if m.on == marks(0).with(m.want) && m.put == m.want {
		if final {
			v.markDone()
		}
		return time.Time{}
	}
	if !final && m.tried == m.want {
		return time.Time{}
	}
	if now.Before(m.retryAt) {
		return m.retryAt
	}
	want, on, put := m.want, m.on, m.put
	m.busy = true
	s, at := v.s, v.sink.at
	v.spawn(func() func(*turnView) {
		on, put, err := s.setMarks(at, on, put, want)
		done := time.Now()
		return func(v *turnView) { v.markSet(want, on, put, err, done) }
	})
	return time.Time{}
}

// markSet takes the result of setMarks.
func (v *turnView) markSet(want Mark, on marks, put Mark, err error, at time.Time) {
	m := &v.mark
	m.busy, m.on, m.put = false, on, put
	switch {
	case err == nil:
		m.failures = 0
		return
	case v.s.decor.Err() != nil:
		m.dropped = true
		return
	case want != m.want:
		return // passed over meanwhile
	case v.phase != phaseEnded:
		m.tried = want
		return
	}
	// The final mark is the one left for good: a failure is tried again,
	// a little later each time.
	m.failures++
	if notFound(err) || m.failures >= posterTries {
		v.s.log.Warn().Err(err).Str("thread", v.sink.conv.thread).Stringer("mark", want).Msg("final status mark not shown; giving up")
		v.markDone()
		return
	}
	m.retryAt = at.Add(posterBackoff << (m.failures - 1))
}

func (v *turnView) markDone() {
	v.mark.done = true
	v.s.mu.Lock()
	v.s.marking--
	v.s.mu.Unlock()
}

// setMarks makes want the one mark on the message at: the marks that may
// be on it (on) other than want are taken off, then want is put unless
// it is known to be on (put). It returns what may then be on, what is
// known on, and the first failure, where it stopped.
func (s *Server) setMarks(at Origin, on marks, put, want Mark) (marks, Mark, error) {
	for k := MarkQueued; k <= MarkStop; k++ {
		if !on.has(k) || k == want {
			continue
		}
		if err := s.mark(at.Where, at.ID, k, false); err != nil && !notFound(err) {
			s.log.Debug().Err(err).Stringer("mark", k).Msg("mark not taken off")
			return on, put, err
		}
		on = on.without(k)
		if put == k {
			put = 0
		}
	}
	if want == 0 || put == want {
		return on, put, nil
	}
	// From now on it may be on, whatever the call answers.
	on = on.with(want)
	if err := s.mark(at.Where, at.ID, want, true); err != nil {
		s.log.Debug().Err(err).Stringer("mark", want).Msg("mark not put")
		return on, put, err
	}
	return on, want, nil
}
