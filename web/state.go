package web

import (
	"encoding/json"
	"slices"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat/thread"
	"acpbroker/store"
	"acpbroker/web/render"
)

// State keeps what the pages show across a restart (store.Store): each
// thread's recent turns and the operator's recent failures. Its Save
// methods must not wait for the disk.
type State interface {
	SaveWebThread(store.WebThread)
	SaveWebFailures([]store.WebFailure)
	WebState() ([]store.WebThread, []store.WebFailure, error)
}

var _ State = (*store.Store)(nil)

// saveEvery is the longest a change of a running turn waits to be given
// to the State; a turn's end is given at once.
const saveEvery = 2 * time.Second

// interruptedText is the outcome of a turn that was running when the
// broker that ran it stopped.
const interruptedText = "⏹️ interrupted: the broker stopped before this turn ended"

// savedTurn is a turn as the State keeps it.
type savedTurn struct {
	Seq                           uint64
	Prompt, Author, AuthorID, Ref string
	Started                       time.Time
	Updates                       []savedUpdate `json:",omitempty"`
	Cut                           bool          `json:",omitempty"`
	Notices                       []string      `json:",omitempty"`
	Done, Failed                  bool
	Outcome, Usage                string
	// Open are the requests open as it was saved, which a restart ends;
	// Unanswered those its end did.
	Open, Unanswered []render.Unanswered `json:",omitempty"`
}

// savedUpdate is an update with what the page shows of it beyond the
// agent's JSON: the broker's own fields.
type savedUpdate struct {
	U        acp.Update          `json:"u"`
	RawInput json.RawMessage     `json:"rawInput,omitempty"`
	Terminal *acp.TerminalOutput `json:"terminal,omitempty"`
	Switched []acp.Switch        `json:"switched,omitempty"`
}

// savedLocked copies t for saving; the hub's lock is held.
func (t *turnLog) savedLocked() savedTurn {
	st := savedTurn{Seq: t.seq, Prompt: t.start.Prompt, Author: t.start.Author, AuthorID: t.start.AuthorID,
		Ref: t.start.Ref, Started: t.start.Started, Cut: t.cut, Notices: slices.Clone(t.notices),
		Done: t.done, Failed: t.failed, Outcome: t.outcome, Usage: t.usage,
		Open: appendUnanswered(nil, t.asks), Unanswered: slices.Clone(t.unanswered)}
	st.Updates = make([]savedUpdate, len(t.updates))
	for i, u := range t.updates {
		st.Updates[i] = savedUpdate{U: u, RawInput: u.RawInput, Terminal: u.Terminal, Switched: u.Switched}
	}
	return st
}

// turnLog is the turn st keeps; one that was not done is done now,
// interrupted.
func (st savedTurn) turnLog() *turnLog {
	t := &turnLog{start: thread.TurnStart{Prompt: st.Prompt, Author: st.Author, AuthorID: st.AuthorID, Started: st.Started, Ref: st.Ref},
		cut: st.Cut, notices: st.Notices, done: true, failed: st.Failed, outcome: st.Outcome, usage: st.Usage,
		phase: adapter.PhaseWorking, seq: st.Seq, version: 1, savedAt: 2}
	t.unanswered = st.Unanswered[:min(len(st.Unanswered), maxUnanswered)]
	if !st.Done {
		t.outcome, t.failed, t.savedAt = interruptedText, false, 0 // saved again, ended
		// The requests it had open died with the broker that asked them.
		t.unanswered = append(t.unanswered, st.Open[:min(len(st.Open), maxUnanswered-len(t.unanswered))]...)
	}
	for _, su := range st.Updates {
		u := su.U
		u.RawInput, u.Terminal, u.Switched = su.RawInput, su.Terminal, su.Switched
		t.updates = append(t.updates, u)
		if chunk(u) {
			t.textBytes += updateSize(&u)
		} else {
			t.bytes += updateSize(&u)
		}
	}
	return t
}

// restore loads what st kept into the hub, which is new.
func (h *hub) restore(threads []store.WebThread, failures []store.WebFailure) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, wt := range threads { // least recently changed first
		k := key{wt.Platform, wt.Thread}
		l := &threadLog{key: k, changed: wt.Changed, version: 1}
		for _, tu := range wt.Turns {
			var st savedTurn
			if json.Unmarshal(tu.Data, &st) != nil {
				continue
			}
			if !st.Done {
				h.dirty[k] = true // written again, interrupted
			}
			l.turns = append(l.turns, st.turnLog())
			h.seq = max(h.seq, st.Seq)
		}
		if n := len(l.turns); n > maxTurns {
			l.turns = slices.Delete(l.turns, 0, n-maxTurns)
		}
		if len(h.threads) >= maxThreads {
			h.dropOldestLocked()
		}
		h.threads[k] = l
	}
	if n := len(failures); n > maxFailures {
		failures = failures[n-maxFailures:]
	}
	for _, f := range failures {
		h.failures = append(h.failures, Failure(f))
	}
}

// takeSaves copies, under the hub's lock, what changed since the last
// call, and encodes it after: of each thread changed that it still
// keeps, the turns changed; and, if they changed (failed), the failures.
func (h *hub) takeSaves() (threads []store.WebThread, failures []store.WebFailure, failed bool) {
	type changed struct {
		wt    store.WebThread
		turns []savedTurn
	}
	h.mu.Lock()
	var all []changed
	for k := range h.dirty {
		l := h.threads[k]
		if l == nil {
			continue
		}
		c := changed{wt: store.WebThread{Platform: k.platform, Thread: k.thread, Changed: l.changed}}
		for _, t := range l.turns {
			if t.savedAt != t.version+1 {
				c.turns = append(c.turns, t.savedLocked())
				t.savedAt = t.version + 1
			}
		}
		all = append(all, c)
	}
	clear(h.dirty)
	if h.failuresDirty {
		failed, h.failuresDirty = true, false
		for _, f := range h.failures {
			failures = append(failures, store.WebFailure(f))
		}
	}
	h.mu.Unlock()
	// Encoded outside the lock: the turns are copies.
	for _, c := range all {
		for _, st := range c.turns {
			b, err := json.Marshal(st)
			if err != nil {
				continue
			}
			c.wt.Turns = append(c.wt.Turns, store.WebTurn{Seq: st.Seq, Data: b})
		}
		threads = append(threads, c.wt)
	}
	return threads, failures, failed
}

// save gives the State what changed since the last save.
func (s *Server) save() {
	threads, failures, failed := s.hub.takeSaves()
	for _, t := range threads {
		s.cfg.State.SaveWebThread(t)
	}
	if failed {
		s.cfg.State.SaveWebFailures(failures)
	}
}

// saver gives the State the hub's changes: at a turn's end, and every
// saveEvery while turns run; once more as the Server closes.
func (s *Server) saver() {
	tick := time.NewTicker(saveEvery)
	defer tick.Stop()
	for {
		select {
		case <-s.hub.saveKick:
		case <-tick.C:
		case <-s.ctx.Done():
			s.save()
			return
		}
		s.save()
	}
}
