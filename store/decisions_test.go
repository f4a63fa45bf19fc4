package store

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// Decisions are recorded in order, survive a restart, and are listed by
// time and thread.
func TestDecisions_RecordedAndListedBySinceAndThread(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	s := open(t, dir, Options{})
	for i := range 6 {
		thread := []string{"t1", "t2"}[i%2]
		s.Decided(Decision{Time: t0.Add(time.Duration(i) * time.Hour), Thread: thread, Tool: fmt.Sprintf("Read f%d", i), ToolKind: "read",
			OptionID: "allow", OptionKind: "allow_once", Outcome: "allowed", Via: "rule", By: "rule 1", ByName: "kind read"})
	}
	// Listed before and after they are written.
	for _, flushed := range []bool{false, true} {
		if flushed {
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		all, err := s.Decisions(DecisionFilter{})
		if err != nil || len(all) != 6 {
			t.Fatalf("flushed %v: %d decisions (%v), want 6", flushed, len(all), err)
		}
		for i, d := range all {
			if d.Tool != fmt.Sprintf("Read f%d", i) {
				t.Fatalf("flushed %v: decision %d is %q: not in the order recorded", flushed, i, d.Tool)
			}
		}
	}
	s.Close()

	s = open(t, dir, Options{})
	got, err := s.Decisions(DecisionFilter{Since: t0.Add(2 * time.Hour), Thread: "t2"})
	if err != nil || len(got) != 2 || got[0].Tool != "Read f3" || got[1].Tool != "Read f5" {
		t.Fatalf("t2 since 14:00 after a restart: %+v (%v), want f3 and f5", got, err)
	}
	if got[0].ID == 0 || got[1].ID <= got[0].ID || got[0].By != "rule 1" || got[0].OptionKind != "allow_once" {
		t.Fatalf("records %+v", got)
	}
	if st := s.Stats(); st.Decisions != 6 {
		t.Fatalf("stats = %+v, want 6 decisions", st)
	}
}

// Decisions are kept for the retention, like turns, and no more than
// MaxDecisions of them.
func TestDecisions_PrunedWithTheTurnsRetention(t *testing.T) {
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := open(t, t.TempDir(), Options{Now: clk.Now, Retention: 24 * time.Hour, MaxDecisions: 4})
	for i := range 6 {
		s.Decided(Decision{Time: clk.Now().Add(time.Duration(i) * time.Hour), Thread: "t", Tool: fmt.Sprint(i), Outcome: "cancelled", Via: "timeout"})
	}
	s.Flush()
	s.Prune()
	got, _ := s.Decisions(DecisionFilter{})
	if len(got) != 4 || got[0].Tool != "2" {
		t.Fatalf("kept %+v, want the newest 4", got)
	}
	clk.advance(24*time.Hour + 3*time.Hour + time.Minute) // past 0:00..3:00 + 24h
	s.Prune()
	got, _ = s.Decisions(DecisionFilter{})
	if len(got) != 2 || got[0].Tool != "4" || got[1].Tool != "5" {
		t.Fatalf("kept %+v, want those recorded less than 24h ago", got)
	}
	if st := s.Stats(); st.Decisions != 2 {
		t.Fatalf("stats = %+v", st)
	}
	clk.advance(3 * time.Hour)
	s.Prune()
	if got, _ = s.Decisions(DecisionFilter{}); len(got) != 0 {
		t.Fatalf("kept %+v past the retention", got)
	}
}

// The audit trail is read from a stopped broker's state; while a broker
// holds the state, reading it fails in words within the lock timeout.
func TestDecisions_ReadOnlyWhileNoBrokerHoldsTheState(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadDecisions(dir, DecisionFilter{}, 0); err == nil {
		t.Fatal("read a state directory with no database")
	}
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s.Decided(Decision{Time: time.Now(), Thread: "t", Tool: "Run make", Outcome: "allowed", Via: "user", By: "201", ByName: "alice"})
	s.Flush()
	start := time.Now()
	_, err = ReadDecisions(dir, DecisionFilter{}, 200*time.Millisecond)
	if !errors.Is(err, ErrLocked) || time.Since(start) > 5*time.Second {
		t.Fatalf("read while held = %v after %s, want ErrLocked", err, time.Since(start))
	}
	s.Close()
	got, err := ReadDecisions(dir, DecisionFilter{Thread: "t"}, 0)
	if err != nil || len(got) != 1 || got[0].ByName != "alice" {
		t.Fatalf("read %+v, %v", got, err)
	}
	// Reading did not take the state from the next broker.
	s2 := open(t, dir, Options{LockTimeout: 200 * time.Millisecond})
	s2.Close()
}

// Decisions waiting for the disk are bounded: past the bound the oldest
// is dropped and counted.
func TestDecisions_PendingAreBounded(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	s.flushMu.Lock() // as if a write were stuck
	s.mu.Lock()
	for i := range maxPendingDecisions {
		s.decided = append(s.decided, Decision{Thread: "t", Tool: fmt.Sprint(i)})
	}
	s.mu.Unlock()
	s.Decided(Decision{Thread: "t", Tool: "last"})
	s.mu.Lock()
	n, dropped, first, last := len(s.decided), s.stats.DroppedDecisions, s.decided[0].Tool, s.decided[len(s.decided)-1].Tool
	s.mu.Unlock()
	s.flushMu.Unlock()
	if n != maxPendingDecisions || dropped != 1 || first != "1" || last != "last" {
		t.Fatalf("%d pending (%s..%s), %d dropped; want the oldest dropped", n, first, last, dropped)
	}
}
