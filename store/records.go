package store

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Records of the schedules and of the HTTP API's prompts: written by the
// flusher like everything else, read from what is pending and then from
// the disk.
var (
	// bucketSchedules holds each schedule's state, by its name.
	bucketSchedules = []byte("schedules")
	// bucketRuns holds the schedules' runs, by a sequence number in the
	// order they began.
	bucketRuns = []byte("schedule_runs")
	// bucketPrompts holds the API's prompts by id; bucketAnswers their
	// final answers, apart, so that listing prompts reads no answer.
	bucketPrompts = []byte("prompts")
	bucketAnswers = []byte("prompt_answers")
)

// Bounds of the records kept, besides state.retention.
const (
	maxRuns    = 20000
	maxPrompts = 5000
	// MaxAnswerBytes bounds a prompt's answer as kept: its start and its
	// end, the middle left out.
	MaxAnswerBytes = 256 << 10
)

// pendingRecord is a record to write (value nil: to delete).
type pendingRecord struct {
	bucket []byte
	key    string
	value  []byte
}

// putRecordLocked queues a record for the flusher. s.mu must be held.
func (s *Store) putRecordLocked(bucket []byte, key string, v any) {
	var b []byte
	if v != nil {
		b, _ = json.Marshal(v)
	}
	s.records = append(s.records, pendingRecord{bucket: bucket, key: key, value: b})
	s.kickLocked()
}

// pendingLocked is the last pending write of a record: its value (nil:
// deleted) and whether there is one. s.mu must be held.
func (s *Store) pendingLocked(bucket []byte, key string) ([]byte, bool) {
	for i := len(s.records) - 1; i >= 0; i-- {
		if r := s.records[i]; string(r.bucket) == string(bucket) && r.key == key {
			return r.value, true
		}
	}
	return nil, false
}

// putRecords writes records, in order.
func putRecords(tx *bolt.Tx, list []pendingRecord) error {
	for _, r := range list {
		b, err := tx.CreateBucketIfNotExists(r.bucket)
		if err != nil {
			return err
		}
		if r.value == nil {
			err = b.Delete([]byte(r.key))
		} else {
			err = b.Put([]byte(r.key), r.value)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// record reads one record into v, pending or on disk; ok false if there
// is none.
func (s *Store) record(bucket []byte, key string, v any) (ok bool, err error) {
	s.flushMu.Lock() // nothing moves from pending to disk meanwhile
	defer s.flushMu.Unlock()
	s.mu.Lock()
	b, pending := s.pendingLocked(bucket, key)
	s.mu.Unlock()
	if !pending {
		err = s.db.View(func(tx *bolt.Tx) error {
			if bk := tx.Bucket(bucket); bk != nil {
				b = slices.Clone(bk.Get([]byte(key)))
			}
			return nil
		})
	}
	if err != nil || b == nil {
		return false, err
	}
	return true, json.Unmarshal(b, v)
}

// each calls f with every record of bucket, pending writes over what is
// on disk, in key order.
func (s *Store) each(bucket []byte, f func(key string, value []byte)) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	all := map[string][]byte{}
	err := s.db.View(func(tx *bolt.Tx) error {
		if bk := tx.Bucket(bucket); bk != nil {
			return bk.ForEach(func(k, v []byte) error {
				all[string(k)] = slices.Clone(v)
				return nil
			})
		}
		return nil
	})
	s.mu.Lock()
	for _, r := range s.records {
		if string(r.bucket) == string(bucket) {
			all[r.key] = r.value
		}
	}
	s.mu.Unlock()
	keys := make([]string, 0, len(all))
	for k, v := range all {
		if v != nil {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		f(k, all[k])
	}
	return err
}

// ScheduleState is what the broker keeps of one schedule across
// restarts.
type ScheduleState struct {
	Name string `json:"name"`
	// Paused by an approver: its runs are skipped until resumed.
	Paused   bool   `json:"paused,omitempty"`
	PausedBy string `json:"paused_by,omitempty"`
	// LastDue is the last time a run was due (run or skipped), for
	// catch_up to tell a missed one.
	LastDue time.Time `json:"last_due"`
	// Last is its last run that began.
	Last ScheduleRun `json:"last"`
}

// ScheduleRun is one run of a schedule, or one that was skipped.
type ScheduleRun struct {
	// ID orders runs as they began; set by PutScheduleRun.
	ID       uint64    `json:"id"`
	Schedule string    `json:"schedule"`
	Due      time.Time `json:"due"`
	Started  time.Time `json:"started,omitzero"`
	Ended    time.Time `json:"ended,omitzero"`
	// By says what started it: "schedule", "catch-up", or who ran it now.
	By     string `json:"by"`
	Thread string `json:"thread,omitempty"`
	// Outcome is running, done, failed, cancelled, skipped, refused or
	// interrupted; Cause says why in words.
	Outcome string `json:"outcome"`
	Cause   string `json:"cause,omitempty"`
}

// RunFilter selects schedule runs; its zero value selects all.
type RunFilter struct {
	Since    time.Time
	Schedule string
}

func (f RunFilter) match(r *ScheduleRun) bool {
	return !r.Due.Before(f.Since) && (f.Schedule == "" || r.Schedule == f.Schedule)
}

// ScheduleState is what is kept of the schedule name.
func (s *Store) ScheduleState(name string) (ScheduleState, bool) {
	var st ScheduleState
	ok, err := s.record(bucketSchedules, name, &st)
	if err != nil {
		s.log.Warn().Err(err).Str("schedule", name).Msg("schedule's state not read")
	}
	return st, ok && err == nil
}

// PutScheduleState records a schedule's state. It never waits for the
// disk.
func (s *Store) PutScheduleState(st ScheduleState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.putRecordLocked(bucketSchedules, st.Name, st)
}

// DeleteScheduleState forgets a schedule no longer configured.
func (s *Store) DeleteScheduleState(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.putRecordLocked(bucketSchedules, name, nil)
}

// PutScheduleRun records a run: a new one (ID 0), numbered here, or one
// already recorded, changed. It returns the run's ID and never waits for
// the disk.
func (s *Store) PutScheduleRun(r ScheduleRun) uint64 {
	if r.ID == 0 {
		s.runSeq.Do(s.loadRunSeq)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.ID == 0 {
		s.lastRun++
		r.ID = s.lastRun
	}
	s.putRecordLocked(bucketRuns, runKey(r.ID), r)
	return r.ID
}

// runKey orders runs by ID as bbolt orders keys.
func runKey(id uint64) string {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], id)
	return string(k[:])
}

// loadRunSeq finds the last run's ID on disk.
func (s *Store) loadRunSeq() {
	var last uint64
	s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketRuns); b != nil {
			if k, _ := b.Cursor().Last(); len(k) == 8 {
				last = binary.BigEndian.Uint64(k)
			}
		}
		return nil
	})
	s.mu.Lock()
	s.lastRun = max(s.lastRun, last)
	s.mu.Unlock()
}

// ScheduleRuns returns the runs f selects, oldest first.
func (s *Store) ScheduleRuns(f RunFilter) ([]ScheduleRun, error) {
	var out []ScheduleRun
	err := s.each(bucketRuns, func(_ string, v []byte) {
		var r ScheduleRun
		if json.Unmarshal(v, &r) == nil && f.match(&r) {
			out = append(out, r)
		}
	})
	return out, err
}

// InterruptScheduleRuns marks the runs an earlier broker left running
// as interrupted, and returns them.
func (s *Store) InterruptScheduleRuns() ([]ScheduleRun, error) {
	runs, err := s.ScheduleRuns(RunFilter{})
	now := s.opts.Now().UTC()
	var out []ScheduleRun
	for _, r := range runs {
		if r.Outcome == "running" {
			r.Outcome, r.Ended, r.Cause = "interrupted", now, "the broker stopped while it ran"
			s.PutScheduleRun(r)
			out = append(out, r)
		}
	}
	return out, err
}

// ReadScheduleRuns opens the state in dir read-only and returns the runs
// f selects, oldest first, as ReadDecisions does for decisions.
func ReadScheduleRuns(dir string, f RunFilter, lockTimeout time.Duration) ([]ScheduleRun, error) {
	var out []ScheduleRun
	err := viewStopped(dir, lockTimeout, func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketRuns); b != nil {
			return b.ForEach(func(_, v []byte) error {
				var r ScheduleRun
				if json.Unmarshal(v, &r) == nil && f.match(&r) {
					out = append(out, r)
				}
				return nil
			})
		}
		return nil
	})
	return out, err
}

// Prompt is a prompt a client of the HTTP API started.
type Prompt struct {
	ID string `json:"id"`
	// Token is the name of the token that started it; Key its
	// Idempotency-Key ("" if none) and Digest what identifies its body.
	Token  string `json:"token"`
	Key    string `json:"key,omitempty"`
	Digest string `json:"digest,omitempty"`
	// Platform and Thread are where it runs (the platform's own thread
	// id; Platform "" without a chat); Link a link to it for people.
	Platform string    `json:"platform,omitempty"`
	Thread   string    `json:"thread"`
	Link     string    `json:"link,omitempty"`
	Created  time.Time `json:"created"`
	Started  time.Time `json:"started,omitzero"`
	Ended    time.Time `json:"ended,omitzero"`
	// State is queued, running, waiting_for_permission, done, cancelled
	// or failed.
	State      string `json:"state"`
	StopReason string `json:"stop_reason,omitempty"`
	Error      string `json:"error,omitempty"`
	Summary    string `json:"summary,omitempty"`
	// AnswerBytes is the length of the whole answer; Answer (kept apart)
	// its first and last MaxAnswerBytes/2.
	AnswerBytes int64           `json:"answer_bytes,omitempty"`
	Usage       json.RawMessage `json:"usage,omitempty"`
}

// PutPrompt records a prompt (answer: its final answer, once it has
// one). It never waits for the disk.
func (s *Store) PutPrompt(p Prompt, answer *string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.putRecordLocked(bucketPrompts, p.ID, p)
	if answer != nil {
		s.putRecordLocked(bucketAnswers, p.ID, ClipAnswer(*answer))
	}
}

// ClipAnswer is an answer as a prompt's record keeps it: its first and
// last MaxAnswerBytes/2 bytes, with a line between saying how much is
// left out.
func ClipAnswer(a string) string {
	if len(a) <= MaxAnswerBytes {
		return a
	}
	half := MaxAnswerBytes / 2
	cut, start := half, len(a)-half
	for cut > 0 && !isRuneStart(a[cut]) {
		cut--
	}
	for start < len(a) && !isRuneStart(a[start]) {
		start++
	}
	head, tail := a[:cut], a[start:]
	return fmt.Sprintf("%s\n\n[… %d bytes left out …]\n\n%s", head, len(a)-len(head)-len(tail), tail)
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// Prompt is the prompt id as recorded, with its answer ("" until it has
// one).
func (s *Store) Prompt(id string) (p Prompt, answer string, ok bool, err error) {
	if ok, err = s.record(bucketPrompts, id, &p); !ok || err != nil {
		return p, "", ok, err
	}
	_, err = s.record(bucketAnswers, id, &answer)
	return p, answer, true, err
}

// Prompts are every prompt recorded, without their answers.
func (s *Store) Prompts() ([]Prompt, error) {
	var out []Prompt
	err := s.each(bucketPrompts, func(_ string, v []byte) {
		var p Prompt
		if json.Unmarshal(v, &p) == nil {
			out = append(out, p)
		}
	})
	return out, err
}

// pruneRecords deletes the runs and prompts ended before cutoff, and the
// oldest beyond their bounds.
func pruneRecords(tx *bolt.Tx, cutoff time.Time) (pruned uint64, err error) {
	if b := tx.Bucket(bucketRuns); b != nil {
		n := b.Stats().KeyN
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.First() {
			var r ScheduleRun
			if json.Unmarshal(v, &r) == nil && n <= maxRuns && (r.Outcome == "running" || !r.Due.Before(cutoff)) {
				break
			}
			if err := b.Delete(k); err != nil {
				return pruned, err
			}
			n--
			pruned++
		}
	}
	b := tx.Bucket(bucketPrompts)
	if b == nil {
		return pruned, nil
	}
	type entry struct {
		k       string
		created time.Time
		old     bool
	}
	var all []entry
	b.ForEach(func(k, v []byte) error {
		var p Prompt
		e := entry{k: string(k), old: true}
		if json.Unmarshal(v, &p) == nil {
			e.created, e.old = p.Created, !p.Ended.IsZero() && p.Ended.Before(cutoff)
		}
		all = append(all, e)
		return nil
	})
	sort.Slice(all, func(i, j int) bool { return all[i].created.Before(all[j].created) })
	over := len(all) - maxPrompts
	answers := tx.Bucket(bucketAnswers)
	for i, e := range all {
		if i >= over && !e.old {
			continue
		}
		if err := b.Delete([]byte(e.k)); err != nil {
			return pruned, err
		}
		if answers != nil {
			if err := answers.Delete([]byte(e.k)); err != nil {
				return pruned, err
			}
		}
		pruned++
	}
	return pruned, nil
}
