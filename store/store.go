// Package store keeps what the broker must not forget across a restart in
// an embedded bbolt database: each thread's agent session, and each
// turn's state with the tool calls of running turns.
package store

import (
	"acpbroker/pool"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
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
}

// Tool is the last known state of a tool call of a running turn.
type Tool struct {
	Title   string    `json:"title,omitempty"`
	Status  string    `json:"status"`
	Updated time.Time `json:"updated"`
}

// Thread is what a thread needs to resume its agent session.
type Thread struct {
	ID        string `json:"id"`
	SessionID string `json:"session,omitempty"`
	// LoadSession: the agent that created the session advertised
	// loadSession, so the session can be resumed in a new process.
	LoadSession bool `json:"load_session,omitempty"`
	// Chat is the chat layer's own record of the conversation.
	Chat    json.RawMessage `json:"chat,omitempty"`
	Updated time.Time       `json:"updated"`
}

// Options configure a Store.
type Options struct {
	// Dir holds the database file (state.db).
	Dir string
	// Retention is how long finished turns and idle threads are kept
	// (default 7 days).
	Retention time.Duration
	// MaxFinished bounds the finished turns kept (default 5,000).
	MaxFinished int
	// FlushInterval is the longest a tool-call update waits to be written
	// (default 200ms); state changes are written at once.
	FlushInterval time.Duration
	// SyncTimeout bounds how long TurnStarted waits for the disk (default
	// 2s); past it the turn goes on and the write follows.
	SyncTimeout time.Duration
	// LockTimeout bounds the wait for another process's lock (default 1s).
	LockTimeout time.Duration
	Logger      zerolog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

var (
	bucketTurns   = []byte("turns")
	bucketThreads = []byte("threads")
	bucketAgents  = []byte("agents")
)

// ErrLocked means another process holds the state directory.
var ErrLocked = errors.New("is in use by another broker process")

// Store is the broker's durable state. Its write methods never wait for
// the disk: they change memory and a flusher goroutine writes. It is safe
// for concurrent use; Close flushes and releases the file.
type Store struct {
	opts Options
	log  zerolog.Logger
	db   *bolt.DB
	path string

	// flushMu orders flushes: each writes a snapshot taken after the one
	// before it committed, so an older snapshot never overwrites a newer.
	flushMu sync.Mutex

	mu       sync.Mutex
	nextID   uint64
	active   map[uint64]*Turn // queued and running turns
	dirty    map[uint64]bool  // turns to write (active or just ended)
	ended    map[uint64]*Turn // ended, not yet written
	threads  map[string]*Thread
	dirtyThr map[string]bool
	agents   map[int]uint64  // live agent pid -> start ticks, to write
	goneAgts map[int]bool    // agent pids to delete
	shown    map[uint64]bool // ended turns written unshown, now shown
	finished int             // finished turns on disk
	stats    Stats
	closed   bool
	// Flush generations: a change made while nextGen is g is on disk once
	// doneGen >= g; flushed is closed and replaced after every flush.
	nextGen, doneGen uint64
	flushed          chan struct{}

	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	// beforeCommit, if set, runs in each flush between taking its snapshot
	// and writing it (tests use it to hold a flush there).
	beforeCommit func()
}

// Stats describe the store.
type Stats struct {
	ActiveTurns   int
	FinishedTurns int
	Threads       int
	FileBytes     int64
	Flushes       uint64
	WriteErrors   uint64
	Pruned        uint64
	LastError     string
}

// Open opens (creating) the database in opts.Dir and locks it.
func Open(opts Options) (*Store, error) {
	if opts.Retention <= 0 {
		opts.Retention = 7 * 24 * time.Hour
	}
	if opts.MaxFinished <= 0 {
		opts.MaxFinished = 5000
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = 200 * time.Millisecond
	}
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = time.Second
	}
	if opts.SyncTimeout <= 0 {
		opts.SyncTimeout = 2 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("state.dir: %w", err)
	}
	path := filepath.Join(opts.Dir, "state.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: opts.LockTimeout})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("state.dir %s %w", opts.Dir, ErrLocked)
	}
	if err != nil {
		return nil, fmt.Errorf("state.dir: open %s: %w", path, err)
	}
	s := &Store{
		opts: opts, log: opts.Logger, db: db, path: path,
		active: map[uint64]*Turn{}, dirty: map[uint64]bool{}, ended: map[uint64]*Turn{},
		threads: map[string]*Thread{}, dirtyThr: map[string]bool{},
		agents: map[int]uint64{}, goneAgts: map[int]bool{}, shown: map[uint64]bool{},
		nextGen: 1, flushed: make(chan struct{}),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	if err := s.load(); err != nil {
		db.Close()
		return nil, err
	}
	go s.flusher()
	return s, nil
}

// load reads the threads and counts the turns.
func (s *Store) load() error {
	return s.db.Update(func(tx *bolt.Tx) error {
		turns, err := tx.CreateBucketIfNotExists(bucketTurns)
		if err != nil {
			return err
		}
		threads, err := tx.CreateBucketIfNotExists(bucketThreads)
		if err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(bucketAgents); err != nil {
			return err
		}
		if k, _ := turns.Cursor().Last(); k != nil {
			s.nextID = binary.BigEndian.Uint64(k)
		}
		if err := turns.ForEach(func(k, v []byte) error {
			var t Turn
			if json.Unmarshal(v, &t) == nil && t.State.Final() {
				s.finished++
			}
			return nil
		}); err != nil {
			return err
		}
		return threads.ForEach(func(k, v []byte) error {
			var t Thread
			if err := json.Unmarshal(v, &t); err != nil {
				s.log.Warn().Err(err).Str("thread", string(k)).Msg("unreadable thread record skipped")
				return nil
			}
			s.threads[t.ID] = &t
			return nil
		})
	})
}

// Recover ends the turns a previous process left queued or running: they
// become Interrupted. It returns every interrupted turn whose thread has
// not been told yet; call MarkReported once it has.
func (s *Store) Recover() ([]Turn, error) {
	now := s.opts.Now().UTC()
	var out []Turn
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
				out = append(out, t)
			}
			return nil
		})
	})
	return out, err
}

// Agent is an agent process a broker recorded as started.
type Agent struct {
	PID        int    `json:"pid"`
	StartTicks uint64 `json:"start"`
}

// Leftovers returns the agent processes the previous broker recorded as
// alive, and forgets them: the caller kills those still running.
func (s *Store) Leftovers() ([]Agent, error) {
	var out []Agent
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAgents)
		var keys [][]byte
		if err := b.ForEach(func(k, v []byte) error {
			var a Agent
			if json.Unmarshal(v, &a) == nil {
				out = append(out, a)
			}
			keys = append(keys, append([]byte(nil), k...))
			return nil
		}); err != nil {
			return err
		}
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// AgentStarted records a live agent process (pool.Registry).
func (s *Store) AgentStarted(pid int, startTicks uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.goneAgts, pid)
	s.agents[pid] = startTicks
	s.kickLocked()
}

// AgentGone records that an agent process ended (pool.Registry).
func (s *Store) AgentGone(pid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.agents, pid)
	s.goneAgts[pid] = true
	s.kickLocked()
}

func (s *Store) kickLocked() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// TurnShown records that the thread now shows how turn id ended. It
// never waits for the disk: the mark is written with the next flush.
func (s *Store) TurnShown(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.ended[id]; t != nil {
		t.Unshown = false
		s.markLocked(id, false)
		return
	}
	s.shown[id] = true // already written, or being written: marked after it
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

func key(id uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], id)
	return k[:]
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

// waitFlushed waits until the flush of generation gen is done, for at
// most SyncTimeout.
func (s *Store) waitFlushed(gen uint64) {
	timeout := time.NewTimer(s.opts.SyncTimeout)
	defer timeout.Stop()
	for {
		s.mu.Lock()
		done, flushed, closed := s.doneGen >= gen, s.flushed, s.closed
		s.mu.Unlock()
		if done || closed {
			return
		}
		select {
		case <-flushed:
		case <-timeout.C:
			s.log.Warn().Dur("waited", s.opts.SyncTimeout).Msg("state write is slow; the turn goes on before it is on disk")
			return
		}
	}
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

// TurnEnded records a turn's final state and cause.
func (s *Store) TurnEnded(id uint64, state State, cause string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.active[id]
	if t == nil {
		return
	}
	delete(s.active, id)
	t.State, t.Cause, t.Ended, t.Tools, t.Unshown = state, cause, s.opts.Now().UTC(), nil, true
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
	if t := s.ended[id]; t != nil {
		c := *t
		s.mu.Unlock()
		return c, true
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

// Thread returns what is kept of a thread.
func (s *Store) Thread(id string) (Thread, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.threads[id]; t != nil {
		return *t, true
	}
	return Thread{}, false
}

// Threads returns every thread kept.
func (s *Store) Threads() []Thread {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Thread, 0, len(s.threads))
	for _, t := range s.threads {
		out = append(out, *t)
	}
	return out
}

// PutThreadChat stores the chat layer's record of a thread.
func (s *Store) PutThreadChat(id string, chat json.RawMessage) {
	s.updateThread(id, func(t *Thread) { t.Chat = append(json.RawMessage(nil), chat...) })
}

// Session returns the agent session a thread had (pool.SessionBook).
func (s *Store) Session(thread string) (pool.Session, bool) {
	t, ok := s.Thread(thread)
	return pool.Session{ID: t.SessionID, Loadable: t.LoadSession}, ok && t.SessionID != ""
}

// RememberSession records a thread's agent session (pool.SessionBook).
func (s *Store) RememberSession(thread string, sess pool.Session) {
	s.updateThread(thread, func(t *Thread) { t.SessionID, t.LoadSession = sess.ID, sess.Loadable })
}

// ForgetSession drops a thread's agent session (pool.SessionBook).
func (s *Store) ForgetSession(thread string) {
	s.updateThread(thread, func(t *Thread) { t.SessionID, t.LoadSession = "", false })
}

func (s *Store) updateThread(id string, f func(*Thread)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.threads[id]
	if t == nil {
		t = &Thread{ID: id}
		s.threads[id] = t
	}
	f(t)
	t.Updated = s.opts.Now().UTC()
	s.dirtyThr[id] = true
	s.kickLocked()
}

// flusher writes what changed: at once after a state change, at most
// pruneEvery is how often the flusher prunes: retention is counted in
// hours and days, and a prune walks every record.
const pruneEvery = time.Minute

// FlushInterval after a tool-call update, and prunes once a minute.
func (s *Store) flusher() {
	defer close(s.done)
	tick := time.NewTicker(s.opts.FlushInterval)
	defer tick.Stop()
	lastPrune := s.opts.Now()
	for {
		select {
		case <-s.kick:
		case <-tick.C:
		case <-s.stop:
			s.flush()
			return
		}
		s.flush()
		if now := s.opts.Now(); now.Sub(lastPrune) >= pruneEvery {
			s.Prune()
			lastPrune = now
		}
	}
}

// Flush writes every pending change now.
func (s *Store) Flush() error { return s.flush() }

func (s *Store) flush() error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.Lock()
	gen := s.nextGen
	s.nextGen++
	if len(s.dirty) == 0 && len(s.dirtyThr) == 0 && len(s.agents) == 0 && len(s.goneAgts) == 0 && len(s.shown) == 0 {
		s.doneLocked(gen)
		s.mu.Unlock()
		return nil
	}
	agents, gone, shown := s.agents, s.goneAgts, s.shown
	s.agents, s.goneAgts, s.shown = map[int]uint64{}, map[int]bool{}, map[uint64]bool{}
	turns := make(map[uint64][]byte, len(s.dirty))
	for id := range s.dirty {
		t := s.active[id]
		if t == nil {
			t = s.ended[id]
		}
		if t != nil {
			turns[id], _ = json.Marshal(t)
		}
	}
	threads := make(map[string][]byte, len(s.dirtyThr))
	for id := range s.dirtyThr {
		if t := s.threads[id]; t != nil {
			threads[id], _ = json.Marshal(t)
		}
	}
	ended := s.ended
	s.dirty, s.dirtyThr, s.ended = map[uint64]bool{}, map[string]bool{}, map[uint64]*Turn{}
	hook := s.beforeCommit
	s.mu.Unlock()
	if hook != nil {
		hook()
	}

	// Counts change inside the transaction: bbolt runs one writer at a
	// time, so a concurrent Prune sees them consistent with the disk.
	err := s.db.Update(func(tx *bolt.Tx) error {
		tb, hb := tx.Bucket(bucketTurns), tx.Bucket(bucketThreads)
		for id, v := range turns {
			if err := tb.Put(key(id), v); err != nil {
				return err
			}
		}
		for id, v := range threads {
			if err := hb.Put([]byte(id), v); err != nil {
				return err
			}
		}
		ab := tx.Bucket(bucketAgents)
		for pid, ticks := range agents {
			v, _ := json.Marshal(Agent{PID: pid, StartTicks: ticks})
			if err := ab.Put([]byte(strconv.Itoa(pid)), v); err != nil {
				return err
			}
		}
		for pid := range gone {
			if err := ab.Delete([]byte(strconv.Itoa(pid))); err != nil {
				return err
			}
		}
		for id := range shown { // after the records written above
			v := tb.Get(key(id))
			var t Turn
			if v == nil || json.Unmarshal(v, &t) != nil || !t.Unshown {
				continue
			}
			t.Unshown = false
			nv, err := json.Marshal(&t)
			if err != nil {
				return err
			}
			if err := tb.Put(key(id), nv); err != nil {
				return err
			}
		}
		s.mu.Lock()
		s.finished += len(ended)
		s.mu.Unlock()
		return nil
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Flushes++
	s.doneLocked(gen)
	if err != nil {
		// Keep the changes for the next flush.
		s.stats.WriteErrors++
		s.stats.LastError = err.Error()
		for id := range turns {
			s.dirty[id] = true
		}
		for id := range threads {
			s.dirtyThr[id] = true
		}
		for id, t := range ended {
			s.ended[id] = t
		}
		for pid, ticks := range agents {
			if !s.goneAgts[pid] {
				s.agents[pid] = ticks
			}
		}
		for pid := range gone {
			if _, again := s.agents[pid]; !again {
				s.goneAgts[pid] = true
			}
		}
		s.finished -= len(ended)
		s.log.Error().Err(err).Msg("state not written; will retry")
		return err
	}
	s.stats.LastError = ""
	return nil
}

// doneLocked records that flush gen is over and wakes its waiters. After a
// failed write they stop waiting too: the change is retried, not lost.
func (s *Store) doneLocked(gen uint64) {
	s.doneGen = max(s.doneGen, gen)
	close(s.flushed)
	s.flushed = make(chan struct{})
}

// Prune deletes finished turns older than the retention, the oldest
// finished turns beyond MaxFinished, and threads idle past the retention.
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
		hb := tx.Bucket(bucketThreads)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.finished = len(finished) - int(pruned)
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

// Stats returns the store's gauges and counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	st := s.stats
	st.ActiveTurns = len(s.active)
	st.FinishedTurns = s.finished
	st.Threads = len(s.threads)
	s.mu.Unlock()
	if fi, err := os.Stat(s.path); err == nil {
		st.FileBytes = fi.Size()
	}
	return st
}

// Healthy reports whether the last write succeeded.
func (s *Store) Healthy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats.LastError == ""
}

// Close writes what is pending, stops the flusher and releases the file.
// Safe to call twice.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	<-s.done
	return s.db.Close()
}
