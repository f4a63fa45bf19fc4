package pool_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/internal/agenttest"
	"acpbroker/internal/eventually"
	"acpbroker/pool"
)

func ctx20(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// An agent stopped for idleness that offers session/close is told to
// close its session first; the thread's next agent takes the session up
// with session/resume, which replays nothing, where it offers it.
func TestPool_IdleStopClosesTheSessionAndTheNextAgentResumesIt(t *testing.T) {
	book := pool.NewMemoryBook(10)
	work := t.TempDir()
	p := newPool(t, pool.Config{Args: []string{"-close-session", "-resume-session", "-load-session"}, IdleTimeout: 300 * time.Millisecond, Sessions: book, WorkDir: work})
	a := acquire(t, p, "t")
	prompt(t, a, "stream 1")
	p.Release(a, false)
	if !agenttest.WaitGone(a.Proc.PID(), 10*time.Second) {
		t.Fatal("idle agent still running")
	}
	closed, err := os.ReadFile(filepath.Join(work, "t", ".fakeagent", "closed"))
	if err != nil || strings.TrimSpace(string(closed)) != a.SessionID {
		t.Fatalf("the agent closed %q (%v) before it stopped, want %s", closed, err, a.SessionID)
	}
	if s := p.Stats(); s.SessionsClosed != 1 {
		t.Errorf("SessionsClosed = %d, want 1", s.SessionsClosed)
	}
	if _, loadable := book.Session("t"); !loadable {
		t.Error("the book does not keep the session as one a new process may take up")
	}

	b := acquire(t, p, "t")
	defer p.Release(b, false)
	if b.SessionID != a.SessionID || !b.Resumed || b.ResumedWith != acp.MethodSessionResume {
		t.Fatalf("the next agent has session %q (resumed %v with %q), want %s with session/resume", b.SessionID, b.Resumed, b.ResumedWith, a.SessionID)
	}
	if got, want := prompt(t, b, "session"), "session "+a.SessionID+" (resumed); 1 earlier prompts; last: stream 1"; got != want {
		t.Errorf("the resumed session says %q, want %q", got, want)
	}
}

// Without session/close an idle agent is stopped as before, and without
// session/resume its session is taken up with session/load.
func TestPool_IdleStopWithoutCloseAndResumeWithoutResumeLoads(t *testing.T) {
	work := t.TempDir()
	p := newPool(t, pool.Config{Args: []string{"-load-session"}, IdleTimeout: 300 * time.Millisecond, WorkDir: work})
	a := acquire(t, p, "t")
	p.Release(a, false)
	if !agenttest.WaitGone(a.Proc.PID(), 10*time.Second) {
		t.Fatal("idle agent still running")
	}
	if _, err := os.Stat(filepath.Join(work, "t", ".fakeagent", "closed")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("session/close sent to an agent that does not offer it: %v", err)
	}
	b := acquire(t, p, "t")
	defer p.Release(b, false)
	if b.SessionID != a.SessionID || b.ResumedWith != acp.MethodSessionLoad {
		t.Errorf("resumed %q with %q, want %s with session/load", b.SessionID, b.ResumedWith, a.SessionID)
	}
}

// A forked thread's agent starts its session with session/fork from the
// parent's, in a copy of the parent's directory, and the parent goes on
// with its own.
func TestPool_AcquireForkStartsFromTheParentsSessionInACopy(t *testing.T) {
	work := t.TempDir()
	p := newPool(t, pool.Config{Args: []string{"-fork-session", "-load-session"}, WorkDir: work})
	parent := acquire(t, p, "parent")
	prompt(t, parent, "stream 1")
	if err := os.WriteFile(filepath.Join(parent.Dir, "notes.txt"), []byte("the parent's notes"), 0o644); err != nil {
		t.Fatal(err)
	}
	p.Release(parent, false)

	child, err := p.AcquireFork(ctx20(t), "child", "", pool.Fork{Thread: "parent", Session: parent.SessionID}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(child, false)
	if child.ForkedFrom != parent.SessionID || child.SessionID == parent.SessionID || child.Dir != filepath.Join(work, "child") {
		t.Fatalf("the fork has session %q forked from %q in %s", child.SessionID, child.ForkedFrom, child.Dir)
	}
	if b, err := os.ReadFile(filepath.Join(child.Dir, "notes.txt")); err != nil || string(b) != "the parent's notes" {
		t.Errorf("the fork's directory is not a copy of the parent's: %q, %v", b, err)
	}
	if got, want := prompt(t, child, "session"), "session "+child.SessionID+" (forked from "+parent.SessionID+"); 1 earlier prompts; last: stream 1"; got != want {
		t.Errorf("the fork says %q, want %q", got, want)
	}
	if got := p.SessionOf("child"); got != child.SessionID {
		t.Errorf("the thread's session is %q, want the fork's %q", got, child.SessionID)
	}
	if _, err := p.AcquireFork(ctx20(t), "child", "", pool.Fork{Thread: "parent", Session: parent.SessionID}, nil); !errors.Is(err, pool.ErrLive) {
		t.Errorf("forking into a thread with an agent: %v, want ErrLive", err)
	}
}

// An agent that does not offer session/fork fails the fork plainly, and
// the copy made for it is removed; a parent's directory larger than the
// bound is not copied at all.
func TestPool_AcquireForkRefusesWithoutTheCapabilityOrPastTheBound(t *testing.T) {
	work := t.TempDir()
	p := newPool(t, pool.Config{WorkDir: work})
	parent := acquire(t, p, "parent")
	p.Release(parent, false)
	_, err := p.AcquireFork(ctx20(t), "child", "", pool.Fork{Thread: "parent", Session: parent.SessionID}, nil)
	if !errors.Is(err, pool.ErrNoFork) || !strings.Contains(err.Error(), "session/fork") {
		t.Fatalf("fork without the capability: %v, want ErrNoFork", err)
	}
	if _, err := os.Stat(filepath.Join(work, "child")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the failed fork's copy is left: %v", err)
	}
	if p.Lookup("child") != nil {
		t.Error("the failed fork left an agent")
	}
	if caps, ok := p.Capabilities("nobody", ""); !ok || caps.Sessions.CanFork() {
		t.Errorf("the profile's capabilities as last seen: %+v, %v; want known, without fork", caps, ok)
	}

	small := newPool(t, pool.Config{Args: []string{"-fork-session"}, WorkDir: t.TempDir(),
		Profiles: nil})
	big := acquire(t, small, "big")
	if err := os.WriteFile(filepath.Join(big.Dir, "blob"), make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	small.Release(big, false)
	small.SetProfiles(map[string]*pool.Profile{"default": {Command: fakeAgent, Args: []string{"-fork-session"}, WorkDir: filepath.Dir(big.Dir), PerThreadDir: true, ForkMaxBytes: 1 << 20}}, "default")
	_, err = small.AcquireFork(ctx20(t), "copy", "", pool.Fork{Thread: "big", Session: big.SessionID}, nil)
	if !errors.Is(err, pool.ErrWorkspaceTooBig) || !strings.Contains(err.Error(), "2.0 MiB") {
		t.Fatalf("forking 2 MiB within 1 MiB: %v, want ErrTooBig saying how much", err)
	}
}

// Resume makes a thread's agent take up another of its sessions, with
// session/resume, and the thread keeps it; an agent that can neither
// resume nor load is refused plainly.
func TestPool_ResumeTakesUpAnotherSession(t *testing.T) {
	book := pool.NewMemoryBook(10)
	p := newPool(t, pool.Config{Args: []string{"-resume-session", "-list-sessions", "-close-session"}, Sessions: book})
	first := acquire(t, p, "t")
	prompt(t, first, "stream 1")
	p.Release(first, false)
	p.Reset("t") // the next message starts a fresh session
	eventually.Within(t, 10*time.Second, "reset agent gone", func() bool { return p.Lookup("t") == nil })

	second := acquire(t, p, "t")
	if second.SessionID == first.SessionID {
		t.Fatal("reset kept the session")
	}
	list, err := p.ListSessions(ctx20(t), second, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].SessionID != second.SessionID || list[1].SessionID != first.SessionID {
		t.Fatalf("listed %+v, want the new session, then the first", list)
	}
	back, err := p.Resume(ctx20(t), second, first.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(back, false)
	if back.SessionID != first.SessionID || back.ResumedWith != acp.MethodSessionResume || p.Lookup("t") != back {
		t.Fatalf("after Resume the agent has %q (with %q); the pool's is the same: %v", back.SessionID, back.ResumedWith, p.Lookup("t") == back)
	}
	if id, _ := book.Session("t"); id != first.SessionID {
		t.Errorf("the book keeps %q, want the resumed %s", id, first.SessionID)
	}
	if got := prompt(t, back, "session"); !strings.HasPrefix(got, "session "+first.SessionID+" (resumed); 1 earlier prompts") {
		t.Errorf("the resumed session says %q", got)
	}
	closed, _ := os.ReadFile(filepath.Join(second.Dir, ".fakeagent", "closed"))
	if strings.TrimSpace(string(closed)) != second.SessionID {
		t.Errorf("the session left was not closed: %q", closed)
	}

	plain := newPool(t, pool.Config{})
	a := acquire(t, plain, "t")
	defer plain.Release(a, false)
	if _, err := plain.Resume(ctx20(t), a, "sess-other"); !errors.Is(err, pool.ErrCannotResume) {
		t.Errorf("resume on an agent without resume or load: %v, want ErrCannotResume", err)
	}
	if _, err := plain.ListSessions(ctx20(t), a, 10); !errors.Is(err, pool.ErrCannotList) {
		t.Errorf("list on an agent without session/list: %v, want ErrCannotList", err)
	}
}
