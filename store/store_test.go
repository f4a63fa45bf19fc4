package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a settable time source.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func open(t *testing.T, dir string, opts Options) *Store {
	t.Helper()
	opts.Dir = dir
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Turns left queued or running by a process that died are interrupted at
// the next start, reported once, and never stay live.
func TestStore_RecoveryInterruptsLeftoversAndReportsThemOnce(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	done := s.TurnQueued("t1", "msg-1", "finished one", "alice")
	s.TurnStarted(done)
	s.TurnEnded(done, string(Done), "")
	s.TurnShown(done, "msg-1-answer")
	running := s.TurnQueued("t2", "msg-2", "build the thing", "bob")
	s.TurnStarted(running)
	s.ToolCall(running, "call-1", "cargo build", "in_progress")
	queued := s.TurnQueued("t2", "msg-3", "and then test it", "bob")
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	s.Close() // as if the process died: nothing more is written

	s2 := open(t, dir, Options{})
	left, err := s2.Recover()
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 || left[0].ID != running || left[1].ID != queued {
		t.Fatalf("recovered %+v, want turns %d and %d", left, running, queued)
	}
	for _, tr := range left {
		if tr.State != Interrupted || tr.Ended.IsZero() || tr.Tools != nil || tr.Title == "" || tr.Ref == "" {
			t.Fatalf("recovered turn %+v", tr)
		}
	}
	if st := s2.Stats(); st.ActiveTurns != 0 || st.FinishedTurns != 3 {
		t.Fatalf("stats after recovery = %+v", st)
	}
	if err := s2.MarkReported(running); err != nil {
		t.Fatal(err)
	}
	s2.Close()

	s3 := open(t, dir, Options{})
	again, _ := s3.Recover()
	if len(again) != 1 || again[0].ID != queued {
		t.Fatalf("after reporting one, recovery returns %+v, want only the unreported turn %d", again, queued)
	}
	if tr, ok := s3.Turn(done); !ok || tr.State != Done {
		t.Fatalf("finished turn = %+v", tr)
	}
}

// A second broker on the same directory is refused with a clear error
// instead of sharing the database.
func TestStore_SecondOpenOfTheDirectoryIsRefused(t *testing.T) {
	dir := t.TempDir()
	open(t, dir, Options{})
	start := time.Now()
	_, err := Open(Options{Dir: dir, LockTimeout: 200 * time.Millisecond})
	if !errors.Is(err, ErrLocked) || time.Since(start) > 5*time.Second {
		t.Fatalf("second Open = %v after %s, want ErrLocked", err, time.Since(start))
	}
}

// The refusal names the process holding the state, so whoever meets it
// knows which broker to stop.
func TestStore_SecondOpenNamesThePIDHoldingTheLock(t *testing.T) {
	dir := t.TempDir()
	open(t, dir, Options{})
	_, err := Open(Options{Dir: dir, LockTimeout: 100 * time.Millisecond})
	if want := fmt.Sprintf("pid %d holds its lock", os.Getpid()); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("second Open = %v, want it to say %q", err, want)
	}
	_, err = ReadDecisions(dir, DecisionFilter{}, 100*time.Millisecond)
	if want := fmt.Sprintf("pid %d", os.Getpid()); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("ReadDecisions while held = %v, want it to say %q", err, want)
	}
}

// A running turn's tool calls are kept with their last update time until
// they end.
func TestStore_ToolCallsOfRunningTurnsAreKeptWithTheirUpdateTime(t *testing.T) {
	clk := &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	s := open(t, t.TempDir(), Options{Now: clk.Now})
	id := s.TurnQueued("t", "m", "x", "u")
	s.TurnStarted(id)
	s.ToolCall(id, "a", "Run tests", "pending")
	clk.advance(time.Minute)
	s.ToolCall(id, "a", "", "in_progress")
	s.ToolCall(id, "b", "Read file", "in_progress")
	s.ToolCall(id, "b", "", "completed")
	tr, _ := s.Turn(id)
	if len(tr.Tools) != 1 || tr.Tools["a"].Title != "Run tests" || tr.Tools["a"].Status != "in_progress" || !tr.Tools["a"].Updated.Equal(clk.Now()) {
		t.Fatalf("tools = %+v", tr.Tools)
	}
	s.TurnEnded(id, string(Failed), "timed out after 30m")
	s.Flush()
	tr, _ = s.Turn(id)
	if tr.State != Failed || tr.Cause != "timed out after 30m" || tr.Tools != nil {
		t.Fatalf("ended turn = %+v", tr)
	}
}

// Thread sessions survive a restart, with whether the agent can load
// them, and a forgotten one is gone.
func TestStore_ThreadSessionsSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	s.RememberSession("t1", "sess-1", true)
	s.RememberSession("t2", "sess-2", false)
	s.RememberSession("t3", "sess-3", false)
	s.PutThreadChat("t1", []byte(`{"starter":"u1"}`))
	s.ForgetSession("t2")
	s.Close()
	s2 := open(t, dir, Options{})
	if sess, ok := s2.Session("t1"); sess != "sess-1" || !ok {
		t.Fatalf("t1 session = %+v, %v", sess, ok)
	}
	if sess, ok := s2.Session("t3"); sess != "sess-3" || ok {
		t.Fatalf("t3 session = %+v, %v", sess, ok)
	}
	if th, _ := s2.Thread("t1"); string(th.Chat) != `{"starter":"u1"}` {
		t.Fatalf("t1 chat record = %s", th.Chat)
	}
	if sess, _ := s2.Session("t2"); sess != "" {
		t.Fatalf("forgotten session came back: %+v", sess)
	}
}

// A thread's agent profile survives a restart, and a reset of its
// session does not take it away.
func TestStore_ThreadProfileSurvivesARestartAndAReset(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	s.SetThreadProfile("t1", "reviewer")
	s.RememberSession("t1", "sess-1", true)
	s.ForgetSession("t1")
	s.Close()
	s2 := open(t, dir, Options{})
	if got := s2.ThreadProfile("t1"); got != "reviewer" {
		t.Fatalf("t1 profile after a restart = %q", got)
	}
	if got := s2.ThreadProfile("t2"); got != "" {
		t.Fatalf("a thread never given a profile has %q", got)
	}
}

// Finished turns older than the retention are pruned, and so are the
// oldest beyond MaxFinished; running turns never are.
func TestStore_PruneByAgeAndCount(t *testing.T) {
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := open(t, t.TempDir(), Options{Now: clk.Now, Retention: 24 * time.Hour, MaxFinished: 3})
	var ids []uint64
	for i := range 5 {
		id := s.TurnQueued("t", fmt.Sprint(i), "", "")
		s.TurnEnded(id, string(Done), "")
		ids = append(ids, id)
	}
	live := s.TurnQueued("t", "live", "", "")
	s.TurnStarted(live)
	s.Flush()
	s.Prune()
	for i, id := range ids {
		_, ok := s.Turn(id)
		if want := i >= 2; ok != want {
			t.Fatalf("turn %d kept=%v, want %v (only the newest 3 finished)", i, ok, want)
		}
	}
	clk.advance(25 * time.Hour)
	s.Prune()
	for _, id := range ids {
		if _, ok := s.Turn(id); ok {
			t.Fatalf("turn %d older than the retention was kept", id)
		}
	}
	if tr, ok := s.Turn(live); !ok || tr.State != Running {
		t.Fatalf("a running turn was pruned: %+v", tr)
	}
	if st := s.Stats(); st.FinishedTurns != 0 || st.Pruned != 5 {
		t.Fatalf("stats = %+v", st)
	}
}

// The store stays bounded: after 10,000 turns (each with tool calls) the
// file is about the size it had after the first 5,000, and holds no more
// finished turns than MaxFinished.
func TestStore_SizeBoundedAfterTenThousandTurns(t *testing.T) {
	s := open(t, t.TempDir(), Options{MaxFinished: 1000})
	run := func(n int) {
		for i := range n {
			id := s.TurnQueued(fmt.Sprintf("thread-%d", i%50), fmt.Sprintf("guild/channel/%d", i), "please refactor the parser and run the tests", "user-1")
			for j := range 3 {
				s.ToolCall(id, fmt.Sprint(j), "Run cargo test --workspace", "in_progress")
			}
			s.TurnEnded(id, string(Done), "")
			if i%500 == 499 {
				s.Flush()
				s.Prune()
			}
		}
		s.Flush()
		s.Prune()
	}
	run(5000)
	half := s.Stats().FileBytes
	run(5000)
	st := s.Stats()
	if st.FinishedTurns > 1000 || st.ActiveTurns != 0 {
		t.Fatalf("stats after 10,000 turns = %+v", st)
	}
	if st.FileBytes > half*3/2 || st.FileBytes > 16<<20 {
		t.Fatalf("file grew from %d bytes after 5,000 turns to %d after 10,000", half, st.FileBytes)
	}
	t.Logf("file size after 5,000 turns: %d bytes; after 10,000: %d bytes; %d finished turns kept", half, st.FileBytes, st.FinishedTurns)
}

func BenchmarkStore_ToolCallUpdate(b *testing.B) {
	s, err := Open(Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	id := s.TurnQueued("t", "m", "", "")
	s.TurnStarted(id)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.ToolCall(id, "call", "Run", "in_progress")
	}
}

// The agents recorded alive are handed back once at the next start, and
// an agent recorded gone is not.
func TestStore_LeftoverAgentsAreReturnedOnce(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	s.AgentStarted(100, 5)
	s.AgentStarted(200, 6)
	s.AgentGone(100)
	s.Flush()
	s.Close()
	s2 := open(t, dir, Options{})
	left, err := s2.Leftovers()
	if err != nil || len(left) != 1 || left[0] != (Agent{PID: 200, StartTicks: 6}) {
		t.Fatalf("leftovers = %+v, %v", left, err)
	}
	if again, _ := s2.Leftovers(); len(again) != 0 {
		t.Fatalf("leftovers returned twice: %+v", again)
	}
}

// TurnStarted returns only once the running turn is on disk, so a crash
// right after the prompt is sent still finds it.
func TestStore_TurnStartedIsOnDiskWhenItReturns(t *testing.T) {
	s := open(t, t.TempDir(), Options{FlushInterval: time.Hour})
	id := s.TurnQueued("t", "m", "", "")
	s.TurnStarted(id)
	var tr Turn
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketTurns).Get(key(id))
		if v == nil {
			return errors.New("not on disk")
		}
		return json.Unmarshal(v, &tr)
	})
	if err != nil || tr.State != Running {
		t.Fatalf("on disk after TurnStarted: %+v, %v", tr, err)
	}
}

// Two flushes never commit out of order: a flush holding an older
// snapshot cannot overwrite the newer state another flush wrote.
func TestStore_FlushesCommitInOrder(t *testing.T) {
	s := open(t, t.TempDir(), Options{FlushInterval: time.Hour})
	id := s.TurnQueued("t", "m", "", "")
	s.Flush()
	s.mu.Lock()
	s.active[id].State = Running // TurnStarted without waiting for the disk
	s.dirty[id] = true
	held, release := make(chan struct{}), make(chan struct{})
	first := true
	s.beforeCommit = func() {
		if first {
			first = false
			close(held)
			<-release
		}
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { s.Flush() }) // snapshots "running", then is held
	<-held
	s.TurnEnded(id, string(Cancelled), "x")
	wg.Go(func() { s.Flush() })        // "cancelled"
	time.Sleep(100 * time.Millisecond) // let the second flush commit, if it can
	close(release)
	wg.Wait()
	var tr Turn
	s.db.View(func(tx *bolt.Tx) error { return json.Unmarshal(tx.Bucket(bucketTurns).Get(key(id)), &tr) })
	if tr.State != Cancelled {
		t.Fatalf("on disk the turn is %s; the older snapshot overwrote the newer", tr.State)
	}
}

// A turn's ending is what Turn reads from the moment it is recorded,
// also while a flush is writing it: the disk still holds the turn as
// running until that write commits.
func TestStore_AnEndedTurnReadsEndedWhileItIsWritten(t *testing.T) {
	s := open(t, t.TempDir(), Options{FlushInterval: time.Hour})
	id := s.TurnQueued("t", "m", "", "")
	s.TurnStarted(id) // on disk: running
	s.TurnEnded(id, string(Done), "")
	var during Turn
	s.mu.Lock()
	s.beforeCommit = func() { during, _ = s.Turn(id) }
	s.mu.Unlock()
	s.Flush()
	if during.State != Done {
		t.Fatalf("while its ending was written the turn read %q, want %q", during.State, Done)
	}
	if after, _ := s.Turn(id); after.State != Done {
		t.Fatalf("once written the turn reads %q", after.State)
	}
}

// A turn that ended but whose thread did not show it yet when the process
// died is reported at the next start, with its ending, and with where
// its thread shows the earlier turns' outcomes (the thread's, in order;
// not other threads'); once shown, before or after a flush, it is not.
func TestStore_AnEndedTurnNotYetShownIsReported(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	shownEarly := s.TurnQueued("t1", "msg-1", "shown before the flush", "bob")
	s.TurnStarted(shownEarly)
	s.TurnEnded(shownEarly, string(Done), "")
	s.TurnShown(shownEarly, "answer-1")
	other := s.TurnQueued("t2", "msg-2", "another thread's", "bob")
	s.TurnStarted(other)
	s.TurnEnded(other, string(Done), "")
	s.TurnShown(other, "answer-2")
	shownLate := s.TurnQueued("t1", "msg-3", "shown after the flush", "bob")
	s.TurnStarted(shownLate)
	s.TurnEnded(shownLate, string(Done), "")
	unshown := s.TurnQueued("t1", "msg-4", "answered", "alice")
	s.TurnStarted(unshown)
	s.TurnEnded(unshown, string(Failed), "agent exited with status 3")
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	s.TurnShown(shownLate, "answer-3")
	s.Close()

	s2 := open(t, dir, Options{})
	left, err := s2.Recover()
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].ID != unshown || left[0].State != Failed || left[0].Cause != "agent exited with status 3" ||
		!slices.Equal(left[0].Elsewhere, []string{"answer-1", "answer-3"}) {
		t.Fatalf("recovered %+v, want only turn %d, failed, with its cause and the thread's answers 1 and 3", left, unshown)
	}
}
