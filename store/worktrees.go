package store

import (
	"encoding/json"
	"sort"

	bolt "go.etcd.io/bbolt"
)

// Worktree is a git worktree made for a thread, kept until it is removed:
// what removing it needs, whatever the configuration says by then (its
// profile may be gone, renamed or pointed elsewhere).
type Worktree struct {
	// Dir is the worktree's directory; it identifies the record.
	Dir     string `json:"dir"`
	Thread  string `json:"thread"`
	Profile string `json:"profile,omitempty"`
	// Repo is the repository it is a worktree of; Root the directory
	// holding the profile's worktrees, Dir's parent.
	Repo string `json:"repo"`
	Root string `json:"root"`
	// DeleteBranches: its branch goes with it.
	DeleteBranches bool `json:"delete_branches,omitempty"`
}

// WorktreeMade records a worktree made (or made again) for a thread,
// replacing what was recorded for its Dir.
func (s *Store) WorktreeMade(w Worktree) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.worktrees[w.Dir] = w
	s.dirtyWt[w.Dir] = true
	s.kickLocked()
}

// WorktreeRemoved forgets the worktree at dir. Safe to call twice.
func (s *Store) WorktreeRemoved(dir string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.worktrees[dir]; !ok {
		return
	}
	delete(s.worktrees, dir)
	s.dirtyWt[dir] = true
	s.kickLocked()
}

// Worktrees returns every worktree recorded and not yet removed, by Dir.
func (s *Store) Worktrees() []Worktree {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Worktree, 0, len(s.worktrees))
	for _, w := range s.worktrees {
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Dir < out[j].Dir })
	return out
}

// loadWorktrees reads the worktree records. tx is the load's.
func (s *Store) loadWorktrees(tx *bolt.Tx) error {
	b, err := tx.CreateBucketIfNotExists(bucketWorktrees)
	if err != nil {
		return err
	}
	return b.ForEach(func(k, v []byte) error {
		var w Worktree
		if err := json.Unmarshal(v, &w); err != nil || w.Dir != string(k) {
			s.log.Warn().Err(err).Str("dir", string(k)).Msg("unreadable worktree record skipped")
			return nil
		}
		s.worktrees[w.Dir] = w
		return nil
	})
}

// worktreeChangesLocked takes the worktree records to write: each dirty Dir's
// record, nil for one removed. s.mu must be held.
func (s *Store) worktreeChangesLocked() map[string][]byte {
	out := make(map[string][]byte, len(s.dirtyWt))
	for dir := range s.dirtyWt {
		if w, ok := s.worktrees[dir]; ok {
			out[dir], _ = json.Marshal(w)
		} else {
			out[dir] = nil
		}
	}
	s.dirtyWt = map[string]bool{}
	return out
}

// putWorktrees writes what worktreeChangesLocked took.
func putWorktrees(tx *bolt.Tx, changes map[string][]byte) error {
	b := tx.Bucket(bucketWorktrees)
	for dir, v := range changes {
		var err error
		if v == nil {
			err = b.Delete([]byte(dir))
		} else {
			err = b.Put([]byte(dir), v)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
