package store

import (
	"encoding/json"
	"maps"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The web front end's bounds, as its hub keeps them: the threads, the
// turns of each (the oldest go first) and the recent failures.
const (
	MaxWebThreads  = 1024
	MaxWebTurns    = 32
	MaxWebFailures = 64
)

var (
	// bucketWeb holds the web front end's threads, by platform and id
	// (webKey).
	bucketWeb = []byte("web")
	// bucketWebFailures holds its recent failures, under one key.
	bucketWebFailures = []byte("webfailures")
	keyWebFailures    = []byte("recent")
)

// WebThread is a thread's recent turns as the web front end shows them:
// each turn as the web encodes it, the oldest first.
type WebThread struct {
	Platform, Thread string
	Changed          time.Time
	Turns            []json.RawMessage
}

// WebFailure is a failed turn as the operator's view shows it.
type WebFailure struct {
	Platform, Thread string
	Title, Prompt    string
	At               time.Time
	Cause            string
}

func webKey(platform, thread string) string { return platform + "\x00" + thread }

// SaveWebThread records t, its oldest turns past MaxWebTurns left out;
// past MaxWebThreads, the least recently changed thread goes. It never
// waits for the disk: the flusher writes it.
func (s *Store) SaveWebThread(t WebThread) {
	if n := len(t.Turns); n > MaxWebTurns {
		t.Turns = t.Turns[n-MaxWebTurns:]
	}
	k := webKey(t.Platform, t.Thread)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.webChanged[k]; !ok && len(s.webChanged) >= MaxWebThreads {
		oldest, at := "", time.Time{}
		for ok, c := range s.webChanged {
			if oldest == "" || c.Before(at) {
				oldest, at = ok, c
			}
		}
		delete(s.webChanged, oldest)
		s.webDirty[oldest] = nil
	}
	s.webChanged[k] = t.Changed
	s.webDirty[k] = &t
	s.kickLocked()
}

// SaveWebFailures records the recent failures, oldest first; past
// MaxWebFailures the oldest are left out.
func (s *Store) SaveWebFailures(f []WebFailure) {
	if n := len(f); n > MaxWebFailures {
		f = f[n-MaxWebFailures:]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.webFailures = slices.Clone(f)
	if s.webFailures == nil {
		s.webFailures = []WebFailure{}
	}
	s.kickLocked()
}

// WebState reads the web front end's threads, least recently changed
// first, and its recent failures, oldest first, as last written. It
// reads the disk: the broker calls it once, as it starts.
func (s *Store) WebState() ([]WebThread, []WebFailure, error) {
	s.mu.Lock()
	pending := maps.Clone(s.webDirty)
	failures := s.webFailures
	s.mu.Unlock()
	var threads []WebThread
	err := s.db.View(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketWeb).ForEach(func(k, v []byte) error {
			if _, ok := pending[string(k)]; ok {
				return nil
			}
			var t WebThread
			if err := json.Unmarshal(v, &t); err != nil {
				s.log.Warn().Err(err).Msg("unreadable web thread record skipped")
				return nil
			}
			threads = append(threads, t)
			return nil
		}); err != nil {
			return err
		}
		if failures != nil {
			return nil
		}
		if v := tx.Bucket(bucketWebFailures).Get(keyWebFailures); v != nil {
			if err := json.Unmarshal(v, &failures); err != nil {
				s.log.Warn().Err(err).Msg("unreadable web failures record skipped")
			}
		}
		return nil
	})
	for _, t := range pending {
		if t != nil {
			threads = append(threads, *t)
		}
	}
	slices.SortFunc(threads, func(a, b WebThread) int { return a.Changed.Compare(b.Changed) })
	return threads, slices.Clone(failures), err
}

// loadWeb makes the web's buckets and reads when each thread changed.
func (s *Store) loadWeb(tx *bolt.Tx) error {
	wb, err := tx.CreateBucketIfNotExists(bucketWeb)
	if err != nil {
		return err
	}
	if _, err := tx.CreateBucketIfNotExists(bucketWebFailures); err != nil {
		return err
	}
	return wb.ForEach(func(k, v []byte) error {
		var t struct{ Changed time.Time }
		if json.Unmarshal(v, &t) != nil {
			return nil
		}
		s.webChanged[string(k)] = t.Changed
		return nil
	})
}

// webChangesLocked takes the web's records to write: each thread (nil:
// delete it) and the failures (nil: unchanged).
func (s *Store) webChangesLocked() (map[string]*WebThread, []WebFailure) {
	threads, failures := s.webDirty, s.webFailures
	s.webDirty, s.webFailures = map[string]*WebThread{}, nil
	return threads, failures
}

// webRetryLocked keeps what a failed flush took for the next, unless
// newer changes came since.
func (s *Store) webRetryLocked(threads map[string]*WebThread, failures []WebFailure) {
	for k, t := range threads {
		if _, newer := s.webDirty[k]; !newer {
			s.webDirty[k] = t
		}
	}
	if s.webFailures == nil {
		s.webFailures = failures
	}
}

// putWeb writes what webChangesLocked took.
func putWeb(tx *bolt.Tx, threads map[string]*WebThread, failures []WebFailure) error {
	wb := tx.Bucket(bucketWeb)
	for k, t := range threads {
		if t == nil {
			if err := wb.Delete([]byte(k)); err != nil {
				return err
			}
			continue
		}
		v, err := json.Marshal(t)
		if err != nil {
			return err
		}
		if err := wb.Put([]byte(k), v); err != nil {
			return err
		}
	}
	if failures != nil {
		v, err := json.Marshal(failures)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketWebFailures).Put(keyWebFailures, v)
	}
	return nil
}
