// Package store keeps what the broker must not forget across a restart in
// an embedded bbolt database: each thread's agent session, each turn's
// state with the tool calls of running turns, the worktrees made for
// threads, the audit trail of permission decisions, and what the web
// front end's pages show.
package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Options configure a Store.
type Options struct {
	// Dir holds the database file (state.db).
	Dir string
	// Retention is how long finished turns and idle threads are kept
	// (default 7 days).
	Retention time.Duration
	// MaxFinished bounds the finished turns kept (default 5,000).
	MaxFinished int
	// MaxDecisions bounds the permission decisions kept (default 20,000);
	// they are kept for Retention, like turns.
	MaxDecisions int
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
	// RenameThread, if set, gives the id a thread recorded by an earlier
	// broker has now. Open rewrites every id it changes, once: in the
	// threads, their turns, the decisions and the worktrees recorded;
	// the file then says so, and later Opens do not look again.
	RenameThread func(id string) string
}

var (
	bucketTurns   = []byte("turns")
	bucketThreads = []byte("threads")
	bucketAgents  = []byte("agents")
	// bucketDecisions holds the permission decisions, by a sequence
	// number in the order they were recorded.
	bucketDecisions = []byte("decisions")
	// bucketWorktrees holds the worktrees made for threads, by directory.
	bucketWorktrees = []byte("worktrees")
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
	writing  map[uint64]*Turn // ended, being written: read from here until on disk
	threads  map[string]*Thread
	dirtyThr map[string]bool
	agents   map[int]uint64    // live agent pid -> start ticks, to write
	goneAgts map[int]bool      // agent pids to delete
	shown    map[uint64]string // ended turns written unshown, now shown: where
	decided  []Decision        // permission decisions to write, in order
	// worktrees are the worktrees recorded and not removed, by Dir;
	// dirtyWt the Dirs to write (or delete).
	worktrees map[string]Worktree
	dirtyWt   map[string]bool
	// webChanged is when each of the web's threads kept changed, by
	// webKey; webDirty the threads to write (nil: to delete), and
	// webFailures the failures to write (nil: unchanged). See web.go.
	webChanged  map[string]time.Time
	webDirty    map[string]*webPending
	webFailures []WebFailure
	// records are the schedules' and the API's records to write, in
	// order (see records.go); lastRun the last schedule run's ID, found
	// on disk once (runSeq).
	records  []pendingRecord
	lastRun  uint64
	runSeq   sync.Once
	finished int // finished turns on disk
	kept     int // decisions on disk
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
	// Decisions are the permission decisions kept; DroppedDecisions those
	// lost because the disk failed for too long.
	Decisions        int
	DroppedDecisions uint64
	// Worktrees are the threads' worktrees recorded and not yet removed.
	Worktrees int
}

// Open opens (creating) the database in opts.Dir and locks it.
func Open(opts Options) (*Store, error) {
	if opts.Retention <= 0 {
		opts.Retention = 7 * 24 * time.Hour
	}
	if opts.MaxFinished <= 0 {
		opts.MaxFinished = 5000
	}
	if opts.MaxDecisions <= 0 {
		opts.MaxDecisions = 20000
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
		return nil, lockedError(opts.Dir, path)
	}
	if err != nil {
		return nil, fmt.Errorf("state.dir: open %s: %w", path, err)
	}
	s := &Store{
		opts: opts, log: opts.Logger, db: db, path: path,
		active: map[uint64]*Turn{}, dirty: map[uint64]bool{}, ended: map[uint64]*Turn{},
		threads: map[string]*Thread{}, dirtyThr: map[string]bool{},
		agents: map[int]uint64{}, goneAgts: map[int]bool{}, shown: map[uint64]string{},
		worktrees: map[string]Worktree{}, dirtyWt: map[string]bool{},
		webChanged: map[string]time.Time{}, webDirty: map[string]*webPending{},
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
		decisions, err := tx.CreateBucketIfNotExists(bucketDecisions)
		if err != nil {
			return err
		}
		if err := s.renameThreads(tx); err != nil {
			return fmt.Errorf("state.dir: renaming the threads of an earlier broker: %w", err)
		}
		s.kept = decisions.Stats().KeyN
		if err := s.loadWorktrees(tx); err != nil {
			return err
		}
		if err := s.loadWeb(tx); err != nil {
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

func key(id uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], id)
	return k[:]
}

// Options returns what the store was opened with.
func (s *Store) Options() Options { return s.opts }

// Stats returns the store's gauges and counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	st := s.stats
	st.ActiveTurns = len(s.active)
	st.FinishedTurns = s.finished
	st.Threads = len(s.threads)
	st.Decisions = s.kept + len(s.decided)
	st.Worktrees = len(s.worktrees)
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
