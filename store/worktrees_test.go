package store

import (
	"slices"
	"testing"
)

// Worktree records outlive the process and the thread's own record: they
// are kept across a restart and after the thread is pruned, until the
// worktree is removed; the count returns to zero.
func TestStore_WorktreesAreKeptUntilRemoved(t *testing.T) {
	dir := t.TempDir()
	c := &clock{}
	s := open(t, dir, Options{Now: c.Now, Retention: 2})
	a := Worktree{Dir: "/w/worktrees/rev/a", Thread: "a", Profile: "rev", Repo: "/repo", Root: "/w/worktrees/rev"}
	b := Worktree{Dir: "/w/worktrees/old/b", Thread: "b", Profile: "old", Repo: "/repo2", Root: "/w/worktrees/old", DeleteBranches: true}
	s.SetThreadProfile("a", "rev")
	s.WorktreeMade(a)
	s.WorktreeMade(b)
	s.WorktreeMade(b) // made again, when its agent started again
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	s.Close()

	c.advance(10)
	s = open(t, dir, Options{Now: c.Now, Retention: 2})
	s.Prune()
	if s.ThreadKept("a") {
		t.Fatal("the thread was not pruned; the test shows nothing")
	}
	if got := s.Worktrees(); !slices.Equal(got, []Worktree{b, a}) || s.Stats().Worktrees != 2 {
		t.Fatalf("after a restart and a prune: %+v", got)
	}
	s.WorktreeRemoved(a.Dir)
	s.WorktreeRemoved(a.Dir)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = open(t, dir, Options{Now: c.Now, Retention: 2})
	if got := s.Worktrees(); !slices.Equal(got, []Worktree{b}) {
		t.Fatalf("after removing one: %+v", got)
	}
	s.WorktreeRemoved(b.Dir)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := s.Stats().Worktrees; n != 0 {
		t.Fatalf("%d worktrees kept after every one was removed", n)
	}
}
