package adapter

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"acpbroker/pool"
)

func (r *rig) answer(thread, text string) string {
	r.t.Helper()
	o := r.prompt(thread, text).wait(r.t, 20*time.Second)
	if o.Err != nil {
		r.t.Fatalf("%q: %v", text, o.Err)
	}
	return o.Text
}

func ctx20(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Sessions lists what the agent lists of this thread's workspace;
// Resume takes one up with session/resume, and the thread's turns go on
// in it; the thread's own session, one not listed, and a busy thread are
// refused.
func TestResume_ContinuesASessionTheAgentLists(t *testing.T) {
	r := newRig(t, []string{"-list-sessions", "-resume-session", "-close-session"}, pool.Config{}, Config{})
	r.answer("t", "title First steps")
	first := r.pool.SessionOf("t")
	r.engine.Reset("t", CancelledBy("test"))
	r.answer("t", "stream 1")
	second := r.pool.SessionOf("t")

	list, err := r.engine.Sessions(ctx20(t), "t")
	if err != nil {
		t.Fatal(err)
	}
	if !list.FromAgent || list.Current != second || len(list.Sessions) != 2 || list.Sessions[1].ID != first || list.Sessions[1].Title != "First steps" {
		t.Fatalf("sessions: %+v, want the agent's two, the first titled", list)
	}
	if _, err := r.engine.Resume(ctx20(t), "t", second); !errors.Is(err, ErrSameSession) {
		t.Errorf("resuming the thread's own session: %v", err)
	}
	if _, err := r.engine.Resume(ctx20(t), "t", "sess-elsewhere"); !errors.Is(err, ErrNoSuchSession) {
		t.Errorf("resuming a session not listed: %v", err)
	}
	res, err := r.engine.Resume(ctx20(t), "t", first)
	if err != nil {
		t.Fatal(err)
	}
	if res.SessionID != first || res.Method != "session/resume" || res.Title != "First steps" {
		t.Errorf("resumed %+v", res)
	}
	if got := r.answer("t", "session"); !strings.HasPrefix(got, "session "+first+" (resumed); 1 earlier prompts; last: title First steps") {
		t.Errorf("the next turn: %q", got)
	}

	hold := r.prompt("t", "hang")
	hold.waitWorking(t)
	if _, err := r.engine.Resume(ctx20(t), "t", second); !errors.Is(err, ErrThreadBusy) {
		t.Errorf("resuming while a turn runs: %v, want ErrThreadBusy", err)
	}
	r.engine.Cancel("t", CancelledBy("test"))
	hold.wait(t, 20*time.Second)
}

// An agent that does not list its sessions has the broker's records
// listed instead (with the titles the agent gave), and one that can
// neither resume nor load is refused plainly.
func TestSessions_ListsTheBrokersRecordsWhenTheAgentListsNone(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{})
	r.answer("t", "title Early work")
	first := r.pool.SessionOf("t")
	r.engine.Reset("t", CancelledBy("test"))
	r.answer("t", "stream 1")
	list, err := r.engine.Sessions(ctx20(t), "t")
	if err != nil {
		t.Fatal(err)
	}
	if list.FromAgent || len(list.Sessions) != 2 || list.Sessions[1].ID != first || list.Sessions[1].Title != "Early work" || list.Sessions[1].Thread != "t" {
		t.Fatalf("sessions: %+v, want the broker's two records", list)
	}
	if _, err := r.engine.Resume(ctx20(t), "t", first); !errors.Is(err, ErrCannotResume) {
		t.Errorf("resume with an agent that can neither resume nor load: %v", err)
	}
	if r.engine.Stats().RecordedThreads != 1 {
		t.Errorf("recorded threads: %d", r.engine.Stats().RecordedThreads)
	}
}

// Fork starts a thread from another's session in its own agent: the
// fork has the parent's history, profile and usage; the parent goes on.
func TestFork_StartsAThreadFromAnothersSession(t *testing.T) {
	r := newRig(t, []string{"-fork-session"}, pool.Config{PerThreadDir: true}, Config{})
	if err := r.engine.CanFork(ctx20(t), "parent"); !errors.Is(err, ErrNoSession) {
		t.Errorf("forking a thread with no session: %v", err)
	}
	r.answer("parent", "usage")
	parent := r.pool.SessionOf("parent")
	if err := r.engine.CanFork(ctx20(t), "parent"); err != nil {
		t.Fatal(err)
	}
	f, err := r.engine.Fork(ctx20(t), "parent", "child")
	if err != nil {
		t.Fatal(err)
	}
	if f.From != parent || f.SessionID == parent || !strings.HasSuffix(f.Dir, "child") {
		t.Fatalf("forked %+v", f)
	}
	if st := r.engine.Status("child"); st.Usage == nil || st.Usage.Used != 45000 || st.SessionID != f.SessionID {
		t.Errorf("the fork's status: %+v, want the parent's usage and its own session", st)
	}
	if got, want := r.answer("child", "session"), "session "+f.SessionID+" (forked from "+parent+"); 1 earlier prompts; last: usage"; got != want {
		t.Errorf("the fork says %q, want %q", got, want)
	}
	if a, b := r.pool.Lookup("child"), r.pool.Lookup("parent"); a == nil || b == nil || a.Proc.PID() == b.Proc.PID() {
		t.Error("the fork does not have an agent of its own")
	}

	plain := newRig(t, nil, pool.Config{}, Config{})
	plain.answer("p", "stream 1")
	if err := plain.engine.CanFork(ctx20(t), "p"); !errors.Is(err, ErrNoFork) || !strings.Contains(err.Error(), "session/fork") {
		t.Errorf("CanFork without the capability: %v, want ErrNoFork", err)
	}
	if _, err := plain.engine.Fork(ctx20(t), "p", "c"); !errors.Is(err, ErrNoFork) {
		t.Errorf("Fork without the capability: %v, want ErrNoFork", err)
	}
}
