package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Decision is one answered permission request of the audit trail.
type Decision struct {
	// ID orders decisions as recorded; set when written.
	ID      uint64    `json:"id"`
	Time    time.Time `json:"time"`
	Thread  string    `json:"thread"`
	Profile string    `json:"profile,omitempty"`
	// Turn is the turn's id in this store, 0 if unknown.
	Turn       uint64 `json:"turn,omitempty"`
	ToolCallID string `json:"tool_call_id,omitempty"`
	Tool       string `json:"tool"`
	ToolKind   string `json:"tool_kind,omitempty"`
	// OptionID and OptionKind are the option chosen; empty when the agent
	// was answered "cancelled".
	OptionID   string `json:"option_id,omitempty"`
	OptionKind string `json:"option_kind,omitempty"`
	// Outcome is allowed, rejected or cancelled.
	Outcome string `json:"outcome"`
	// Via says in one word who decided (user, rule, mode, timeout,
	// cancelled, unanswered); By is the user's id or the rule ("rule 2"),
	// ByName the user's name or the rule in words.
	Via    string `json:"via"`
	By     string `json:"by,omitempty"`
	ByName string `json:"by_name,omitempty"`
}

// DecisionFilter selects decisions; its zero value selects all.
type DecisionFilter struct {
	// Since: only decisions at or after it.
	Since time.Time
	// Thread: only this thread's.
	Thread string
}

func (f DecisionFilter) match(d *Decision) bool {
	return !d.Time.Before(f.Since) && (f.Thread == "" || d.Thread == f.Thread)
}

// maxPendingDecisions bounds the decisions held for a disk that keeps
// failing; past it the oldest are dropped, and counted.
const maxPendingDecisions = 10000

// Decided records a permission decision. It never waits for the disk:
// the record is written at once by the flusher.
func (s *Store) Decided(d Decision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d.ID = 0
	if len(s.decided) >= maxPendingDecisions {
		s.decided = s.decided[1:]
		s.stats.DroppedDecisions++
	}
	s.decided = append(s.decided, d)
	s.kickLocked()
}

// putDecisions writes decisions, numbering them in order.
func putDecisions(tx *bolt.Tx, list []Decision) error {
	b := tx.Bucket(bucketDecisions)
	for _, d := range list {
		id, err := b.NextSequence()
		if err != nil {
			return err
		}
		d.ID = id
		v, err := json.Marshal(&d)
		if err != nil {
			return err
		}
		if err := b.Put(key(id), v); err != nil {
			return err
		}
	}
	return nil
}

// pruneDecisions deletes, oldest first, decisions older than cutoff and
// those beyond max. Keys follow the order of recording, so the walk stops
// at the first decision kept.
func pruneDecisions(tx *bolt.Tx, cutoff time.Time, max int) (kept int, pruned uint64, err error) {
	b := tx.Bucket(bucketDecisions)
	n := b.Stats().KeyN
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.First() {
		var d Decision
		if json.Unmarshal(v, &d) == nil && n <= max && !d.Time.Before(cutoff) {
			break
		}
		if err := b.Delete(k); err != nil {
			return 0, pruned, err
		}
		n--
		pruned++
	}
	return n, pruned, nil
}

// Decisions returns the decisions f selects, oldest first, those not yet
// written included.
func (s *Store) Decisions(f DecisionFilter) ([]Decision, error) {
	// No flush moves a decision from memory to disk between the two reads.
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	var out []Decision
	err := s.db.View(func(tx *bolt.Tx) error {
		out = readDecisions(tx, f)
		return nil
	})
	s.mu.Lock()
	for _, d := range s.decided {
		if f.match(&d) {
			out = append(out, d)
		}
	}
	s.mu.Unlock()
	return out, err
}

func readDecisions(tx *bolt.Tx, f DecisionFilter) []Decision {
	var out []Decision
	b := tx.Bucket(bucketDecisions)
	if b == nil {
		return nil // a database from before the audit trail
	}
	b.ForEach(func(k, v []byte) error {
		var d Decision
		if json.Unmarshal(v, &d) == nil && f.match(&d) {
			out = append(out, d)
		}
		return nil
	})
	return out
}

// ReadDecisions opens the state in dir read-only, returns the decisions f
// selects, oldest first, and closes it. The running broker holds the
// state exclusively, so while it runs this waits lockTimeout (default
// 1s) and fails with ErrLocked: the audit trail is read with the broker
// stopped, and while it runs, from its log.
func ReadDecisions(dir string, f DecisionFilter, lockTimeout time.Duration) ([]Decision, error) {
	var out []Decision
	err := viewStopped(dir, lockTimeout, func(tx *bolt.Tx) error {
		out = readDecisions(tx, f)
		return nil
	})
	return out, err
}

// viewStopped opens the state in dir read-only, runs view in a read
// transaction and closes it: ReadDecisions and ReadScheduleRuns, for a
// broker that is stopped (see ReadDecisions).
func viewStopped(dir string, lockTimeout time.Duration, view func(*bolt.Tx) error) error {
	if lockTimeout <= 0 {
		lockTimeout = time.Second
	}
	path := filepath.Join(dir, "state.db")
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("state.dir %s holds no state.db: no broker has kept its state there: %w", dir, err)
		}
		return fmt.Errorf("state.dir: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: lockTimeout})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return lockedError(dir, path)
	}
	if err != nil {
		return fmt.Errorf("state.dir: open %s: %w", path, err)
	}
	defer db.Close()
	return db.View(view)
}
