package store

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// Schedules' states and runs and the API's prompts are read back as
// written, before the flusher writes them and after a restart; runs
// left running are marked interrupted at the next start.
func TestRecords_AreKeptAcrossARestart(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	due := time.Date(2026, 3, 1, 2, 30, 0, 0, time.UTC)
	s.PutScheduleState(ScheduleState{Name: "nightly", Paused: true, PausedBy: "alice", LastDue: due})
	id := s.PutScheduleRun(ScheduleRun{Schedule: "nightly", Due: due, By: "schedule", Outcome: "running", Thread: "discord:5"})
	done := s.PutScheduleRun(ScheduleRun{Schedule: "other", Due: due, By: "schedule", Outcome: "done"})
	if id == 0 || done != id+1 {
		t.Fatalf("run ids %d, %d", id, done)
	}
	answer := "the answer"
	s.PutPrompt(Prompt{ID: "p1", Token: "ci", Key: "k", Thread: "9", State: "done", Created: due}, &answer)
	if st, ok := s.ScheduleState("nightly"); !ok || !st.Paused || !st.LastDue.Equal(due) {
		t.Errorf("pending state read as %+v, %v", st, ok)
	}
	if p, a, ok, err := s.Prompt("p1"); !ok || err != nil || p.Token != "ci" || a != "the answer" {
		t.Errorf("pending prompt read as %+v %q %v %v", p, a, ok, err)
	}
	s.Close()

	s = open(t, dir, Options{})
	defer s.Close()
	if st, ok := s.ScheduleState("nightly"); !ok || !st.Paused || st.PausedBy != "alice" {
		t.Errorf("state after a restart: %+v, %v", st, ok)
	}
	left, err := s.InterruptScheduleRuns()
	if err != nil || len(left) != 1 || left[0].ID != id || left[0].Outcome != "interrupted" {
		t.Fatalf("interrupted runs: %+v, %v", left, err)
	}
	runs, err := s.ScheduleRuns(RunFilter{Schedule: "nightly"})
	if err != nil || len(runs) != 1 || runs[0].Outcome != "interrupted" {
		t.Errorf("nightly's runs: %+v, %v", runs, err)
	}
	if next := s.PutScheduleRun(ScheduleRun{Schedule: "nightly", Due: due.Add(time.Hour), Outcome: "skipped"}); next != done+1 {
		t.Errorf("the next run after a restart is %d, want %d", next, done+1)
	}
	if p, a, ok, _ := s.Prompt("p1"); !ok || p.Key != "k" || a != "the answer" {
		t.Errorf("prompt after a restart: %+v %q", p, a)
	}
	if ps, err := s.Prompts(); err != nil || len(ps) != 1 {
		t.Errorf("prompts: %+v, %v", ps, err)
	}
	s.DeleteScheduleState("nightly")
	if _, ok := s.ScheduleState("nightly"); ok {
		t.Error("a deleted state is still read")
	}
	s.Flush()
	runs, err = ReadScheduleRuns(dir, RunFilter{}, 10*time.Millisecond)
	if err == nil {
		t.Errorf("the state was read while the store held it: %d runs", len(runs))
	}
}

// Runs and prompts past the retention are pruned; a run still running
// is kept.
func TestRecords_ArePruned(t *testing.T) {
	now := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	s := open(t, t.TempDir(), Options{Retention: 24 * time.Hour, Now: func() time.Time { return now }})
	defer s.Close()
	old := now.Add(-48 * time.Hour)
	s.PutScheduleRun(ScheduleRun{Schedule: "a", Due: old, Outcome: "done"})
	s.PutScheduleRun(ScheduleRun{Schedule: "a", Due: now, Outcome: "done"})
	s.PutPrompt(Prompt{ID: "old", Created: old, Ended: old, State: "done"}, nil)
	s.PutPrompt(Prompt{ID: "new", Created: now, State: "running"}, nil)
	s.Flush()
	s.Prune()
	runs, _ := s.ScheduleRuns(RunFilter{})
	ps, _ := s.Prompts()
	if len(runs) != 1 || !runs[0].Due.Equal(now) || len(ps) != 1 || ps[0].ID != "new" {
		t.Errorf("after pruning: runs %+v, prompts %+v", runs, ps)
	}
}

// An answer longer than MaxAnswerBytes is kept as its start and its
// end, cut between characters.
func TestRecords_LongAnswerIsClipped(t *testing.T) {
	long := "BEGIN" + strings.Repeat("é", MaxAnswerBytes) + "END"
	got := ClipAnswer(long)
	if len(got) > MaxAnswerBytes+100 || !strings.HasPrefix(got, "BEGIN") || !strings.HasSuffix(got, "END") ||
		!utf8.ValidString(got) || !strings.Contains(got, "bytes left out") {
		t.Errorf("clipped to %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
	if ClipAnswer("short") != "short" {
		t.Error("a short answer was changed")
	}
}
