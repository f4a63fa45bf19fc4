package store

import (
	"encoding/json"
	"strconv"

	bolt "go.etcd.io/bbolt"
)

// bucketMeta holds what the file says of itself: the version of its
// records.
var (
	bucketMeta = []byte("meta")
	keyVersion = []byte("version")
)

// threadIDsVersion is the version from which the file's thread ids are
// those Options.RenameThread gives.
const threadIDsVersion = 2

// renameThreads rewrites, once, every thread id in the file that
// RenameThread changes: the threads' keys and records, and the threads
// named by turns, decisions and worktrees. Every other field of a record
// is kept as written. The file then records threadIDsVersion, so that a
// later Open does not look again.
func (s *Store) renameThreads(tx *bolt.Tx) error {
	rename := s.opts.RenameThread
	if rename == nil {
		return nil
	}
	meta, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return err
	}
	if v, _ := strconv.Atoi(string(meta.Get(keyVersion))); v >= threadIDsVersion {
		return nil
	}
	renamed := 0
	for _, name := range [][]byte{bucketTurns, bucketDecisions, bucketWorktrees} {
		b := tx.Bucket(name)
		if b == nil {
			continue
		}
		n, err := renameField(b, "thread", rename)
		if err != nil {
			return err
		}
		renamed += n
	}
	threads := tx.Bucket(bucketThreads)
	type move struct{ from, to, v []byte }
	var moves []move
	err = threads.ForEach(func(k, v []byte) error {
		to := rename(string(k))
		if to == string(k) {
			return nil
		}
		rec, ok := renamedRecord(v, "id", rename)
		if !ok {
			rec = v // unreadable: moved as it is, and skipped at load as before
		}
		moves = append(moves, move{from: append([]byte(nil), k...), to: []byte(to), v: rec})
		return nil
	})
	if err != nil {
		return err
	}
	for _, m := range moves {
		if err := threads.Delete(m.from); err != nil {
			return err
		}
		if err := threads.Put(m.to, m.v); err != nil {
			return err
		}
	}
	renamed += len(moves)
	if renamed > 0 {
		s.log.Info().Int("records", renamed).Msg("thread ids written by an earlier broker renamed in the state file")
	}
	return meta.Put(keyVersion, []byte(strconv.Itoa(threadIDsVersion)))
}

// renameField rewrites the string field of each JSON record of b that
// rename changes, and returns how many it rewrote.
func renameField(b *bolt.Bucket, field string, rename func(string) string) (int, error) {
	type put struct{ k, v []byte }
	var puts []put
	err := b.ForEach(func(k, v []byte) error {
		if rec, ok := renamedRecord(v, field, rename); ok {
			puts = append(puts, put{append([]byte(nil), k...), rec})
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, p := range puts {
		if err := b.Put(p.k, p.v); err != nil {
			return 0, err
		}
	}
	return len(puts), nil
}

// renamedRecord is the JSON object v with its string field renamed, and
// whether rename changed it (an unreadable record is left alone).
func renamedRecord(v []byte, field string, rename func(string) string) ([]byte, bool) {
	var rec map[string]json.RawMessage
	if json.Unmarshal(v, &rec) != nil {
		return nil, false
	}
	var old string
	if json.Unmarshal(rec[field], &old) != nil {
		return nil, false
	}
	to := rename(old)
	if to == old {
		return nil, false
	}
	rec[field], _ = json.Marshal(to)
	out, err := json.Marshal(rec)
	return out, err == nil
}
