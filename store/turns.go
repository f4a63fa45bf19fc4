package store

import (
	"encoding/json"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// State is where a turn is in its life.
type State string

// Turn states. Queued and Running are live; the others are final.
const (
	Queued      State = "queued"
	Running     State = "running"
	Done        State = "done"
	Failed      State = "failed"
	Cancelled   State = "cancelled"
	Interrupted State = "interrupted"
)

// Final reports whether a turn in state s has ended.
func (s State) Final() bool { return s != Queued && s != Running }

// Turn is one prompt's record.
type Turn struct {
	ID     uint64 `json:"id"`
	Thread string `json:"thread"`
	// Ref is the chat layer's reference to the message; Title names it.
	Ref     string           `json:"ref,omitempty"`
	Title   string           `json:"title,omitempty"`
	Author  string           `json:"author,omitempty"`
	State   State            `json:"state"`
	Cause   string           `json:"cause,omitempty"`
	Queued  time.Time        `json:"queued"`
	Started time.Time        `json:"started,omitzero"`
	Ended   time.Time        `json:"ended,omitzero"`
	Tools   map[string]*Tool `json:"tools,omitempty"` // kept while running
	// Reported is set once the thread was told of an interruption.
	Reported bool `json:"reported,omitempty"`
	// Unshown: the turn ended but the thread does not show it yet (its
	// final view is being posted). A broker that dies then reports it at
	// the next start, as it does an interrupted turn.
	Unshown bool `json:"unshown,omitempty"`
	// ShownIn is the chat layer's reference to the message that shows
	// how the turn ended, once it does (empty if none does).
	ShownIn string `json:"shown_in,omitempty"`
	// Elsewhere is set by Recover on the ended turns it returns: where
	// the thread shows how its earlier turns ended (the latest
	// maxElsewhere), none of which is this turn's outcome.
	Elsewhere []string `json:"-"`
}

// maxElsewhere bounds Turn.Elsewhere: a platform looks for a turn's
// outcome among the messages that follow its prompt, and only so many
// earlier outcomes can be among them.
const maxElsewhere = 100

// Tool is the last known state of a tool call of a running turn.
type Tool struct {
	Title   string    `json:"title,omitempty"`
	Status  string    `json:"status"`
	Updated time.Time `json:"updated"`
}

// Recover ends the turns a previous process left queued or running: they
// become Interrupted. It returns every interrupted turn whose thread has
// not been told yet; call MarkReported once it has.
func (s *Store) Recover() ([]Turn, error) {
	now := s.opts.Now().UTC()
	var out []Turn
	shownIn := map[string][]string{} // by thread, in turn order so far
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketTurns)
		return b.ForEach(func(k, v []byte) error {
			var t Turn
			if err := json.Unmarshal(v, &t); err != nil {
				return nil
			}
			if !t.State.Final() {
				t.State, t.Ended, t.Cause, t.Tools = Interrupted, now, "the broker stopped while the turn was "+string(t.State), nil
				nv, err := json.Marshal(&t)
				if err != nil {
					return err
				}
				if err := b.Put(k, nv); err != nil {
					return err
				}
				s.mu.Lock()
				s.finished++
				s.mu.Unlock()
			}
			if (t.State == Interrupted || t.Unshown) && !t.Reported {
				if t.State != Interrupted {
					t.Elsewhere = slices.Clone(shownIn[t.Thread])
				}
				out = append(out, t)
			}
			if t.ShownIn != "" {
				// Keys are in id order: a turn sees only earlier ones.
				ws := append(shownIn[t.Thread], t.ShownIn)
				if len(ws) > maxElsewhere {
					ws = ws[len(ws)-maxElsewhere:]
				}
				shownIn[t.Thread] = ws
			}
			return nil
		})
	})
	return out, err
}

// TurnShown records that the thread now shows how turn id ended, in the
// message where names (empty if no message does). It never waits for
// the disk: the mark is written with the next flush.
func (s *Store) TurnShown(id uint64, where string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.ended[id]; t != nil {
		t.Unshown, t.ShownIn = false, where
		s.markLocked(id, false)
		return
	}
	s.shown[id] = where // already written, or being written: marked after it
	s.kickLocked()
}

// MarkReported records that an interrupted turn's thread was told.
func (s *Store) MarkReported(id uint64) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketTurns)
		v := b.Get(key(id))
		if v == nil {
			return nil
		}
		var t Turn
		if err := json.Unmarshal(v, &t); err != nil {
			return err
		}
		t.Reported = true
		nv, err := json.Marshal(&t)
		if err != nil {
			return err
		}
		return b.Put(key(id), nv)
	})
}

// TurnQueued records a new turn and returns its id.
func (s *Store) TurnQueued(thread, ref, title, author string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	id := s.nextID
	now := s.opts.Now().UTC()
	s.active[id] = &Turn{ID: id, Thread: thread, Ref: ref, Title: title, Author: author, State: Queued, Queued: now}
	if t := s.threads[thread]; t != nil {
		t.Updated = now // a thread in use is not idle
		s.dirtyThr[thread] = true
	}
	s.markLocked(id, true)
	return id
}

// TurnStarted records that the turn's prompt is about to go to the
// agent, and returns once that is on disk (or SyncTimeout passed): a turn
// the agent has seen is always found by Recover after a crash.
func (s *Store) TurnStarted(id uint64) {
	s.mu.Lock()
	t := s.active[id]
	if t == nil {
		s.mu.Unlock()
		return
	}
	t.State, t.Started = Running, s.opts.Now().UTC()
	s.markLocked(id, true)
	gen := s.nextGen
	s.mu.Unlock()
	s.waitFlushed(gen)
}

// ToolCall records a tool call's state in a running turn. Calls that end
// (completed, failed) are dropped from the record.
func (s *Store) ToolCall(id uint64, toolCallID, title, status string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.active[id]
	if t == nil {
		return
	}
	if status == "completed" || status == "failed" {
		delete(t.Tools, toolCallID)
	} else {
		if t.Tools == nil {
			t.Tools = map[string]*Tool{}
		}
		tc := t.Tools[toolCallID]
		if tc == nil {
			tc = &Tool{Status: "pending"}
			t.Tools[toolCallID] = tc
		}
		if title != "" {
			tc.Title = title
		}
		if status != "" {
			tc.Status = status
		}
		tc.Updated = s.opts.Now().UTC()
	}
	s.markLocked(id, false)
}

// TurnEnded records a turn's final state (Done, Failed, Cancelled or
// Interrupted, by name) and cause.
func (s *Store) TurnEnded(id uint64, state, cause string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.active[id]
	if t == nil {
		return
	}
	delete(s.active, id)
	t.State, t.Cause, t.Ended, t.Tools, t.Unshown = State(state), cause, s.opts.Now().UTC(), nil, true
	s.ended[id] = t
	s.markLocked(id, true)
}

// markLocked queues a turn for writing; urgent writes go out at once.
func (s *Store) markLocked(id uint64, urgent bool) {
	s.dirty[id] = true
	if urgent {
		s.kickLocked()
	}
}

// Turn returns a turn: a live one from memory, else from disk.
func (s *Store) Turn(id uint64) (Turn, bool) {
	s.mu.Lock()
	if t := s.active[id]; t != nil {
		c := *t
		s.mu.Unlock()
		return c, true
	}
	for _, m := range []map[uint64]*Turn{s.ended, s.writing} {
		if t := m[id]; t != nil {
			c := *t
			s.mu.Unlock()
			return c, true
		}
	}
	s.mu.Unlock()
	var t Turn
	var found bool
	_ = s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketTurns).Get(key(id)); v != nil {
			found = json.Unmarshal(v, &t) == nil
		}
		return nil
	})
	return t, found
}
