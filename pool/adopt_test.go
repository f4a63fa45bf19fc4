package pool_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"acpbroker/acp"
	"acpbroker/pool"
)

// keepingProc is an agent on a host that keeps the notes it is given, as
// its host would.
type keepingProc struct {
	pool.Proc
	mu    *sync.Mutex
	notes *[][]byte
}

func (k keepingProc) Keep(note []byte) {
	k.mu.Lock()
	*k.notes = append(*k.notes, note)
	k.mu.Unlock()
}

// notesRig is a pool whose agents on a fake host keep notes.
type notesRig struct {
	fh    *fakeHost
	mu    sync.Mutex
	notes [][]byte
}

func (r *notesRig) start(ctx context.Context, thread string, prof *pool.Profile, onWait func()) (pool.Remote, error) {
	rem, err := r.fh.start(ctx, thread, prof, onWait)
	if err == nil {
		rem.Proc = keepingProc{Proc: rem.Proc, mu: &r.mu, notes: &r.notes}
	}
	return rem, err
}

func (r *notesRig) last() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.notes) == 0 {
		return nil
	}
	return r.notes[len(r.notes)-1]
}

// A later run of the broker takes up, from its note, an agent an earlier
// run set up: the thread's next turn goes to it, in its session, with no
// start of its own, and it says it was taken up.
func TestAdopt_ALaterPoolTakesUpTheAgentFromItsNote(t *testing.T) {
	book := pool.NewMemoryBook(16)
	rig := &notesRig{fh: newFakeHost(t)}
	first := newPool(t, pool.Config{Remote: rig.start, Sessions: book})
	a := acquire(t, first, "t1")
	busyNote := rig.last()
	prompt(t, a, "stream 1")
	first.Release(a, false)
	note := rig.last()
	if len(busyNote) == 0 || len(note) == 0 {
		t.Fatal("no note was kept beside the agent")
	}

	// The same agent, as a host hands it over: here, a process the
	// earlier pool's Conn never read from stands for it.
	later := newPool(t, pool.Config{Remote: rig.start, Sessions: book})
	startsBefore := rig.fh.starts.Load()
	r, err := rig.fh.start(t.Context(), "t1", later.Profile(""), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := later.Adopt(r, busyNote); !errors.Is(err, pool.ErrNotAdopted) {
		t.Fatalf("an agent whose turn ran when its broker stopped: %v, want ErrNotAdopted", err)
	}
	got, err := later.Adopt(r, note)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Adopted || got.SessionID != a.SessionID || got.Where != "host-1" {
		t.Fatalf("taken up: adopted %v, session %q (was %q), on %q", got.Adopted, got.SessionID, a.SessionID, got.Where)
	}
	b := acquire(t, later, "t1")
	if b != got || rig.fh.starts.Load() != startsBefore+1 {
		t.Fatalf("the thread's next turn did not go to the agent taken up (starts %d → %d)", startsBefore, rig.fh.starts.Load())
	}
	if answer := prompt(t, b, "stream 2"); answer != "chunk 1\nchunk 2\n" {
		t.Fatalf("the agent taken up answered %q", answer)
	}
	if caps := b.Conn.Capabilities(); caps != a.Conn.Capabilities() {
		t.Errorf("capabilities %+v, want the earlier run's %+v", caps, a.Conn.Capabilities())
	}
	later.Release(b, false)
	if s := later.Stats(); s.Adopted != 1 || s.Live != 1 || s.Spawned != 0 {
		t.Fatalf("stats: %d adopted, %d live, %d spawned; want 1, 1, 0", s.Adopted, s.Live, s.Spawned)
	}
}

// What does not match the thread, its session, its profile or the pool's
// room is refused, the agent left to the caller.
func TestAdopt_RefusesWhatIsNotTheThreadsAgentNow(t *testing.T) {
	book := pool.NewMemoryBook(16)
	rig := &notesRig{fh: newFakeHost(t)}
	first := newPool(t, pool.Config{Remote: rig.start, Sessions: book})
	a := acquire(t, first, "t1")
	first.Release(a, false)
	note := rig.last()
	r := pool.Remote{Proc: a.Proc, Host: a.Host, Dir: a.Dir, Where: a.Where}
	var fields map[string]any
	if err := json.Unmarshal(note, &fields); err != nil {
		t.Fatal(err)
	}
	fields["thread"] = ""
	noThread, _ := json.Marshal(fields)

	for _, tc := range []struct {
		name  string
		cfg   pool.Config
		note  []byte
		setup func(t *testing.T, p *pool.Pool)
		why   string
	}{
		{name: "a note naming no thread", note: noThread, why: "no thread"},
		{name: "the thread reset since", why: "another session", setup: func(t *testing.T, _ *pool.Pool) {
			book.ForgetSession("t1")
			t.Cleanup(func() { book.RememberSession("t1", a.SessionID, false) })
		}},
		{name: "its profile sets sessions up otherwise", why: "otherwise now", cfg: pool.Config{MCPServers: []acp.MCPServer{{Name: "m", Command: "/bin/true"}}}},
		{name: "no room", why: "no room", cfg: pool.Config{MaxSessions: 1}, setup: func(t *testing.T, p *pool.Pool) { acquire(t, p, "other") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Remote, cfg.Sessions = rig.start, book
			p := newPool(t, cfg)
			if tc.setup != nil {
				tc.setup(t, p)
			}
			n := note
			if tc.note != nil {
				n = tc.note
			}
			if _, err := p.Adopt(r, n); !errors.Is(err, pool.ErrNotAdopted) || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("Adopt: %v, want ErrNotAdopted saying %q", err, tc.why)
			}
			if s := p.Stats(); s.Adopted != 0 {
				t.Fatalf("%d adopted", s.Adopted)
			}
		})
	}
	if !a.Proc.Alive() {
		t.Fatal("a refusal stopped the agent: it is the caller's")
	}
}
