package store

import (
	"encoding/json"
	"time"

	bolt "go.etcd.io/bbolt"
)

// flusher writes what changed: at once after a state change, at most
// pruneEvery is how often the flusher prunes: retention is counted in
// hours and days, and a prune walks every record.
const pruneEvery = time.Minute

// Prune deletes finished turns older than the retention, the oldest
// finished turns beyond MaxFinished, threads idle past the retention, and
// permission decisions older than the retention or beyond MaxDecisions.
func (s *Store) Prune() {
	cutoff := s.opts.Now().Add(-s.opts.Retention)
	var pruned uint64
	err := s.db.Update(func(tx *bolt.Tx) error {
		tb := tx.Bucket(bucketTurns)
		type entry struct {
			k   []byte
			old bool
		}
		var finished []entry
		c := tb.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			var t Turn
			if json.Unmarshal(v, &t) != nil {
				finished = append(finished, entry{append([]byte(nil), k...), true})
				continue
			}
			if t.State.Final() {
				finished = append(finished, entry{append([]byte(nil), k...), t.Ended.Before(cutoff)})
			}
		}
		over := len(finished) - s.opts.MaxFinished
		for i, e := range finished { // oldest first: keys increase
			if i < over || e.old {
				if err := tb.Delete(e.k); err != nil {
					return err
				}
				pruned++
			}
		}
		kept, dropped, err := pruneDecisions(tx, cutoff, s.opts.MaxDecisions)
		if err != nil {
			return err
		}
		pruned += dropped
		records, err := pruneRecords(tx, cutoff)
		if err != nil {
			return err
		}
		hb := tx.Bucket(bucketThreads)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.finished = len(finished) - int(pruned-dropped)
		pruned += records
		s.kept = kept
		for id, t := range s.threads {
			if t.Updated.Before(cutoff) && !s.dirtyThr[id] && !s.threadBusyLocked(id) {
				if err := hb.Delete([]byte(id)); err != nil {
					return err
				}
				delete(s.threads, id)
			}
		}
		return nil
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.stats.WriteErrors++
		s.stats.LastError = err.Error()
		return
	}
	s.stats.Pruned += pruned
}

func (s *Store) threadBusyLocked(id string) bool {
	for _, t := range s.active {
		if t.Thread == id {
			return true
		}
	}
	return false
}
