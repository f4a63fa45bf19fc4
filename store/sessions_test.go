package store

import (
	"fmt"
	"testing"
	"time"
)

// The sessions threads had are kept across a restart, with their titles,
// listed by profile and directory, the most recently used first; each
// thread keeps its last MaxThreadSessions.
func TestStore_SessionsAreKeptByProfileAndDirectory(t *testing.T) {
	dir := t.TempDir()
	c := &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	s := open(t, dir, Options{Now: c.Now})
	s.SessionUsed("t1", "claude", "/work", "s1")
	s.SessionTitled("t1", "s1", "Fix the build")
	c.advance(time.Minute)
	s.SessionUsed("t2", "claude", "/work", "s2")
	c.advance(time.Minute)
	s.SessionUsed("t1", "claude", "/work", "s1") // used again: keeps its title
	s.SessionUsed("t3", "codex", "/work", "s3")  // another profile
	s.SessionUsed("t4", "claude", "/elsewhere", "s4")
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = open(t, dir, Options{Now: c.Now})
	got := s.SessionsIn("t1", "claude", "")
	if len(got) != 2 || got[0].ID != "s1" || got[0].Thread != "t1" || got[0].Title != "Fix the build" || got[1].ID != "s2" || got[1].Thread != "t2" {
		t.Fatalf("sessions of claude in /work: %+v", got)
	}
	if got := s.SessionsIn("t9", "claude", ""); got != nil {
		t.Errorf("a thread with no session: %+v", got)
	}
	for i := range MaxThreadSessions + 3 {
		s.SessionUsed("t5", "p", "/d", fmt.Sprint("x", i))
	}
	if got := s.SessionsIn("t5", "p", "/d"); len(got) != MaxThreadSessions || got[0].ID != fmt.Sprint("x", MaxThreadSessions+2) {
		t.Errorf("kept %d of a thread's sessions, the newest %q", len(got), got[0].ID)
	}
}
