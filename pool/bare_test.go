package pool_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/cgroup"
	"acpbroker/internal/agenttest"
	"acpbroker/pool"
)

// bare starts thread's bare agent, failing the test if it cannot.
func bare(t *testing.T, p *pool.Pool, thread string) *pool.BareAgent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := p.Bare(ctx, thread, "")
	if err != nil {
		t.Fatalf("Bare(%q): %v", thread, err)
	}
	return b
}

// speak is what a broker does with a bare agent across the wire: a Conn
// on its stdio, with its Host serving its files, and a session in its
// directory. It returns the agent as a turn sees it.
func speak(t *testing.T, b *pool.BareAgent) *pool.Agent {
	t.Helper()
	conn := acp.NewConn(b.Proc.Stdout(), b.Proc.Stdin(), acp.Options{Host: b.Host, Logger: testLogger(t)})
	b.Proc.Monitor(conn.Done())
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := conn.Initialize(ctx); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	sid, _, err := conn.NewSession(ctx, b.Dir, nil)
	if err != nil {
		t.Fatalf("session/new: %v", err)
	}
	return &pool.Agent{Conn: conn, SessionID: sid, Proc: b.Proc, Dir: b.Dir}
}

// A bare agent, plain or in the sandbox, speaks ACP over its stdio to
// whoever asked for it, works in its thread's directory, has its files
// served by its Host, counts as a live agent, and is gone once released.
func TestBare_AgentSpeaksOverItsStdioAndIsGoneOnceReleased(t *testing.T) {
	for _, sandboxed := range []bool{false, true} {
		name := "plain"
		if sandboxed {
			name = "bwrap"
		}
		t.Run(name, func(t *testing.T) {
			cfg := pool.Config{Env: []string{"PATH=/usr/bin:/bin"}}
			if sandboxed {
				needBwrap(t)
				cfg.Sandbox = pool.Sandbox{Bwrap: "bwrap"}
			}
			work := t.TempDir()
			cfg.WorkDir = work
			p := newPool(t, cfg)
			b := bare(t, p, "t1")
			if b.Dir != filepath.Join(work, "t1") {
				t.Fatalf("bare agent works in %s, want %s", b.Dir, filepath.Join(work, "t1"))
			}
			if s := p.Stats(); s.Live != 1 || s.Spawned != 1 || s.Profiles["default"].Live != 1 {
				t.Fatalf("stats with a bare agent: %+v", s)
			}
			if sandboxed {
				cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(b.Proc.PID()), "cmdline"))
				if err != nil || !strings.Contains(string(cmdline), "bwrap") {
					t.Fatalf("the bare agent runs as %q (%v), not in bubblewrap", cmdline, err)
				}
			}
			a := speak(t, b)
			file := filepath.Join(b.Dir, "notes.txt")
			if err := os.WriteFile(file, []byte("in the workspace"), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := prompt(t, a, "fs-read "+file); !strings.Contains(got, "in the workspace") {
				t.Fatalf("fs-read answered %q", got)
			}
			pid := b.Proc.PID()
			p.ReleaseBare(b)
			if agenttest.Running(pid) {
				t.Fatalf("bare agent %d still runs after ReleaseBare returned", pid)
			}
			p.ReleaseBare(b) // a second release is nothing
			if s := p.Stats(); s.Live != 0 || s.Stopping != 0 || s.Stopped[pool.StopReleased] != 1 {
				t.Fatalf("stats after the release: %+v", s)
			}
		})
	}
}

// Bare agents take the pool's slots: past MaxSessions a Bare waits, until
// its context ends or a release frees a slot; a thread gets one at most.
func TestBare_SlotsBoundBareAgents(t *testing.T) {
	p := newPool(t, pool.Config{MaxSessions: 1})
	b1 := bare(t, p, "t1")
	if _, err := p.Bare(context.Background(), "t1", ""); !errors.Is(err, pool.ErrLive) {
		t.Fatalf("a second Bare for t1: %v, want ErrLive", err)
	}
	full := errors.New("no slot")
	ctx, cancel := context.WithTimeoutCause(context.Background(), 200*time.Millisecond, full)
	defer cancel()
	if _, err := p.Bare(ctx, "t2", ""); !errors.Is(err, full) {
		t.Fatalf("Bare past max_sessions: %v, want the context's cause", err)
	}
	got := make(chan *pool.BareAgent, 1)
	go func() {
		b, err := p.Bare(context.Background(), "t3", "")
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	select {
	case <-got:
		t.Fatal("a Bare past max_sessions started an agent")
	case <-time.After(200 * time.Millisecond):
	}
	if s := p.Stats(); s.Waiting != 1 || s.Live != 1 {
		t.Fatalf("stats with one bare agent and one waiting: %+v", s)
	}
	p.ReleaseBare(b1)
	select {
	case b3 := <-got:
		if b3 == nil {
			t.FailNow()
		}
		p.ReleaseBare(b3)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting Bare did not get the freed slot")
	}
}

// A bare agent runs in a control group of its own, which ReleaseBare
// removes.
func TestBare_ReleaseRemovesItsControlGroup(t *testing.T) {
	m := openCgroups(t)
	p := newPool(t, pool.Config{Cgroups: m, Profiles: limited(t, cgroup.Limits{MemoryMax: 256 << 20, PidsMax: 64})})
	b := bare(t, p, "t1")
	speak(t, b)
	for _, dir := range theGroup(t, m) {
		if procs := procsOf(t, dir); len(procs) == 0 || procs[0] != b.Proc.PID() {
			t.Fatalf("group %s holds %v, want the agent %d", dir, procs, b.Proc.PID())
		}
	}
	if s := p.Stats(); s.Cgroups != 1 {
		t.Fatalf("%d control groups counted, want 1", s.Cgroups)
	}
	p.ReleaseBare(b)
	awaitNoGroups(t, m)
}

// The pool's shutdown stops the bare agents still held, whether or not
// anyone spoke to them.
func TestBare_ShutdownStopsThem(t *testing.T) {
	p := newPool(t, pool.Config{})
	spoken, silent := bare(t, p, "t1"), bare(t, p, "t2")
	speak(t, spoken)
	done := make(chan struct{})
	go func() {
		p.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return")
	}
	for _, b := range []*pool.BareAgent{spoken, silent} {
		if agenttest.Running(b.Proc.PID()) {
			t.Fatalf("bare agent %d runs after Close", b.Proc.PID())
		}
	}
	if s := p.Stats(); s.Live != 0 || s.Stopped[pool.StopShutdown] != 2 {
		t.Fatalf("stats after Close: %+v", s)
	}
	p.ReleaseBare(spoken) // after Close: nothing
}

// A bare agent works where its profile's Workspace hook says (a worktree
// profile's worktree), as a thread's agent does.
func TestBare_WorksInItsProfilesWorkspace(t *testing.T) {
	ws := t.TempDir()
	var asked []string
	p := newPool(t, pool.Config{Profiles: map[string]*pool.Profile{"wt": {Command: fakeAgent, Env: []string{"PATH=/usr/bin:/bin"},
		Workspace: func(ctx context.Context, thread string) (string, error) {
			asked = append(asked, thread)
			return ws, nil
		}}}})
	b := bare(t, p, "t1")
	defer p.ReleaseBare(b)
	if b.Dir != ws || len(asked) != 1 || asked[0] != "t1" {
		t.Fatalf("bare agent in %s after the hook was asked for %v, want %s for t1", b.Dir, asked, ws)
	}
	cwd, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(b.Proc.PID()), "cwd"))
	if err != nil || cwd != ws {
		t.Fatalf("the agent process runs in %q (%v), want %s", cwd, err, ws)
	}
}
