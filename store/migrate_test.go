package store

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"
)

// A file written before thread ids named their platform is renamed once,
// whole, at the Open that asks: each thread keeps its session, profile,
// choices and chat record under its new id, its running turn is
// recovered under it, and its decisions and worktrees name it. The file
// then says so: a later Open renames nothing, whatever it asks.
func TestStore_RenameThreadRenamesEveryRecordOnce(t *testing.T) {
	dir := t.TempDir()
	old, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	old.RememberSession("123", "sess-1", true)
	old.SetThreadProfile("123", "reviewer")
	old.SetThreadOption("123", "model", "fast")
	old.SetThreadMode("123", "plan")
	old.PutThreadChat("123", json.RawMessage(`{"parent":"9","starter":"201","agent":"reviewer"}`))
	old.RememberSession("p:456", "sess-2", false) // already named
	turn := old.TurnQueued("123", "1/9/123", "build it", "alice")
	old.TurnStarted(turn)
	old.Decided(Decision{Time: time.Now(), Thread: "123", Tool: "Run make", Outcome: "allowed", Via: "user", By: "201"})
	old.WorktreeMade(Worktree{Dir: "/w/reviewer/123", Thread: "123", Profile: "reviewer", Repo: "/r", Root: "/w/reviewer"})
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	rename := func(id string) string {
		if strings.Contains(id, ":") {
			return id
		}
		return "p:" + id
	}
	s, err := Open(Options{Dir: dir, RenameThread: rename})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Thread("123"); ok {
		t.Error("the thread is still kept under its old id")
	}
	th, ok := s.Thread("p:123")
	if !ok || th.ID != "p:123" || th.SessionID != "sess-1" || !th.LoadSession || th.Profile != "reviewer" ||
		!maps.Equal(th.Options, map[string]string{"model": "fast"}) || th.Mode != "plan" || string(th.Chat) != `{"parent":"9","starter":"201","agent":"reviewer"}` {
		t.Fatalf("the renamed thread: %+v (kept: %v)", th, ok)
	}
	if th, ok := s.Thread("p:456"); !ok || th.SessionID != "sess-2" {
		t.Errorf("a thread already named: %+v (kept: %v)", th, ok)
	}
	turns, err := s.Recover()
	if err != nil {
		t.Fatal(err)
	}
	if len(turns) != 1 || turns[0].ID != turn || turns[0].Thread != "p:123" || turns[0].Ref != "1/9/123" || turns[0].State != Interrupted {
		t.Fatalf("recovered %+v", turns)
	}
	decisions, err := s.Decisions(DecisionFilter{Thread: "p:123"})
	if err != nil || len(decisions) != 1 || decisions[0].Tool != "Run make" {
		t.Fatalf("the renamed thread's decisions: %+v, %v", decisions, err)
	}
	if wt := s.Worktrees(); len(wt) != 1 || wt[0].Thread != "p:123" || wt[0].Dir != "/w/reviewer/123" {
		t.Fatalf("worktrees: %+v", wt)
	}
	if !s.ThreadKept("p:123") || s.ThreadKept("123") {
		t.Fatal("the store keeps the old id, or not the new one")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	again, err := Open(Options{Dir: dir, RenameThread: func(id string) string { return "q:" + id }})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if _, ok := again.Thread("p:123"); !ok || len(again.Threads()) != 2 {
		t.Fatalf("a second Open renamed again: threads %+v", again.Threads())
	}
}
