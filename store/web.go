package store

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// The web front end's bounds, as its hub keeps them: the threads, the
// turns of each (the oldest go first) and the recent failures.
const (
	MaxWebThreads  = 1024
	MaxWebTurns    = 32
	MaxWebFailures = 64
)

var (
	// bucketWeb holds a bucket for each of the web front end's
	// threads, by platform and id (webKey).
	bucketWeb = []byte("web")
	// bucketWebFailures holds its recent failures, under one key.
	bucketWebFailures = []byte("webfailures")
	keyWebFailures    = []byte("recent")
)

// WebThread is a thread as the web front end shows it: when it changed
// and its turns, each as the web encodes it, in the order of their Seq.
type WebThread struct {
	Platform, Thread string
	Changed          time.Time
	Turns            []WebTurn
}

// WebTurn is one turn of a WebThread. Seq orders a thread's turns; a
// turn saved again under its Seq replaces the one kept.
type WebTurn struct {
	Seq  uint64
	Data json.RawMessage
}

// webPending is what is to be written of a thread: its record, the
// turns changed (by Seq), whether what is on disk goes first (reset) or
// the thread goes altogether (gone).
type webPending struct {
	platform, thread string
	changed          time.Time
	turns            map[uint64]json.RawMessage
	reset, gone      bool
}

// webMeta is a thread's record on disk, beside its turns.
type webMeta struct {
	Platform, Thread string
	Changed          time.Time
}

// keyWebMeta is the key of a thread's webMeta in its bucket; its turns'
// are their Seq, 8 bytes.
var keyWebMeta = []byte("meta")

// WebFailure is a failed turn as the operator's view shows it.
type WebFailure struct {
	Platform, Thread string
	Title, Prompt    string
	At               time.Time
	Cause            string
}

func webKey(platform, thread string) string { return platform + "\x00" + thread }

// SaveWebThread records when t changed and the turns it holds, new or
// changed; of a thread's turns the MaxWebTurns of the highest Seq are
// kept. Past MaxWebThreads, the least recently changed thread goes. It
// never waits for the disk: the flusher writes it.
func (s *Store) SaveWebThread(t WebThread) {
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
		s.webDirty[oldest] = &webPending{gone: true}
	}
	s.webChanged[k] = t.Changed
	p := s.webDirty[k]
	if p == nil || p.gone {
		p = &webPending{reset: p != nil, turns: map[uint64]json.RawMessage{}}
		s.webDirty[k] = p
	}
	p.platform, p.thread, p.changed = t.Platform, t.Thread, t.Changed
	for _, tu := range t.Turns {
		p.turns[tu.Seq] = tu.Data
	}
	if over := len(p.turns) - MaxWebTurns; over > 0 {
		seqs := slices.Sorted(maps.Keys(p.turns))
		for _, seq := range seqs[:over] {
			delete(p.turns, seq)
		}
	}
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
// first, and its recent failures, oldest first, as last saved. It reads
// the disk: the broker calls it once, as it starts.
func (s *Store) WebState() ([]WebThread, []WebFailure, error) {
	s.mu.Lock()
	pending := make(map[string]webPending, len(s.webDirty))
	for k, p := range s.webDirty {
		pending[k] = webPending{platform: p.platform, thread: p.thread, changed: p.changed,
			turns: maps.Clone(p.turns), reset: p.reset, gone: p.gone}
	}
	failures := s.webFailures
	s.mu.Unlock()
	var threads []WebThread
	err := s.db.View(func(tx *bolt.Tx) error {
		wb := tx.Bucket(bucketWeb)
		if err := wb.ForEachBucket(func(k []byte) error {
			p, ok := pending[string(k)]
			if ok && (p.gone || p.reset) {
				return nil
			}
			tb := wb.Bucket(k)
			var m webMeta
			if err := json.Unmarshal(tb.Get(keyWebMeta), &m); err != nil {
				s.log.Warn().Err(err).Msg("unreadable web thread record skipped")
				return nil
			}
			t := WebThread{Platform: m.Platform, Thread: m.Thread, Changed: m.Changed}
			_ = tb.ForEach(func(k, v []byte) error {
				if len(k) == 8 {
					t.Turns = append(t.Turns, WebTurn{Seq: binary.BigEndian.Uint64(k), Data: slices.Clone(v)})
				}
				return nil
			})
			if ok {
				delete(pending, string(k))
				t = p.over(t)
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
	for _, p := range pending {
		if !p.gone {
			threads = append(threads, p.over(WebThread{}))
		}
	}
	slices.SortFunc(threads, func(a, b WebThread) int { return a.Changed.Compare(b.Changed) })
	return threads, slices.Clone(failures), err
}

// over is t, as on disk, with p written over it.
func (p webPending) over(t WebThread) WebThread {
	t.Platform, t.Thread, t.Changed = p.platform, p.thread, p.changed
	for seq, d := range p.turns {
		i, found := slices.BinarySearchFunc(t.Turns, seq, func(tu WebTurn, seq uint64) int { return cmp.Compare(tu.Seq, seq) })
		if found {
			t.Turns[i].Data = d
		} else {
			t.Turns = slices.Insert(t.Turns, i, WebTurn{Seq: seq, Data: d})
		}
	}
	if n := len(t.Turns); n > MaxWebTurns {
		t.Turns = t.Turns[n-MaxWebTurns:]
	}
	return t
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
	return wb.ForEachBucket(func(k []byte) error {
		var m webMeta
		if json.Unmarshal(wb.Bucket(k).Get(keyWebMeta), &m) != nil {
			return nil
		}
		s.webChanged[string(k)] = m.Changed
		return nil
	})
}

// webChangesLocked takes the web's changes to write: each thread's (by
// webKey) and the failures (nil: unchanged).
func (s *Store) webChangesLocked() (map[string]*webPending, []WebFailure) {
	threads, failures := s.webDirty, s.webFailures
	s.webDirty, s.webFailures = map[string]*webPending{}, nil
	return threads, failures
}

// webRetryLocked keeps what a failed flush took for the next, beneath
// the changes made since.
func (s *Store) webRetryLocked(threads map[string]*webPending, failures []WebFailure) {
	for k, p := range threads {
		cur := s.webDirty[k]
		switch {
		case cur == nil:
			s.webDirty[k] = p
		case cur.gone || cur.reset:
			// What is on disk goes anyway.
		default:
			cur.reset = p.reset || p.gone
			if p.gone {
				continue
			}
			for seq, d := range p.turns {
				if _, newer := cur.turns[seq]; !newer {
					cur.turns[seq] = d
				}
			}
		}
	}
	if s.webFailures == nil {
		s.webFailures = failures
	}
}

// putWeb writes what webChangesLocked took: a thread's record and
// changed turns in its own bucket, past MaxWebTurns the lowest Seq going.
func putWeb(tx *bolt.Tx, threads map[string]*webPending, failures []WebFailure) error {
	wb := tx.Bucket(bucketWeb)
	for k, p := range threads {
		if p.gone || p.reset {
			if err := wb.DeleteBucket([]byte(k)); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
				return err
			}
		}
		if p.gone {
			continue
		}
		tb, err := wb.CreateBucketIfNotExists([]byte(k))
		if err != nil {
			return err
		}
		meta, err := json.Marshal(webMeta{Platform: p.platform, Thread: p.thread, Changed: p.changed})
		if err != nil {
			return err
		}
		if err := tb.Put(keyWebMeta, meta); err != nil {
			return err
		}
		for seq, d := range p.turns {
			if err := tb.Put(key(seq), d); err != nil {
				return err
			}
		}
		var seqs [][]byte
		c := tb.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if len(k) == 8 {
				seqs = append(seqs, slices.Clone(k)) // valid past the deletes
			}
		}
		for _, seq := range seqs[:max(len(seqs)-MaxWebTurns, 0)] {
			if err := tb.Delete(seq); err != nil {
				return err
			}
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
