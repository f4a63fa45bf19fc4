package pool_test

import (
	"acpbroker/internal/eventually"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/acp/host"
	"acpbroker/internal/agenttest"
	"acpbroker/pool"
)

// countingHost is a *host.Host that counts the files it reads, to show
// whose host serves an agent's requests.
type countingHost struct {
	*host.Host
	reads atomic.Int32
}

func (h *countingHost) ReadTextFile(ctx context.Context, p *acp.ReadTextFileParams) (*acp.ReadTextFileResult, error) {
	h.reads.Add(1)
	return h.Host.ReadTextFile(ctx, p)
}

// fakeHost is an agent host in the test's process: it starts the fake
// agent as a real subprocess in a directory of its own, as a host would in
// the workspace on its disk.
type fakeHost struct {
	t      *testing.T
	dir    string
	starts atomic.Int32
	host   *countingHost
}

func newFakeHost(t *testing.T) *fakeHost {
	return &fakeHost{t: t, dir: t.TempDir()}
}

func (f *fakeHost) start(ctx context.Context, thread string, prof *pool.Profile, onWait func()) (pool.Remote, error) {
	f.starts.Add(1)
	dir := filepath.Join(f.dir, thread)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return pool.Remote{}, err
	}
	proc, err := pool.Exec(pool.ProcessSpec{Command: prof.Command, Args: prof.Args, Dir: dir, Env: []string{"PATH=" + os.Getenv("PATH")}, Logger: testLogger(f.t)})
	if err != nil {
		return pool.Remote{}, err
	}
	f.host = &countingHost{Host: host.New(host.Options{Logger: testLogger(f.t)})}
	return pool.Remote{Proc: proc, Host: f.host, Dir: dir, Where: "host-1"}, nil
}

// With Config.Remote, the agent runs where Remote starts it: its turns
// work, it works in Remote's directory, its files are served by Remote's
// host, the pool makes no directory of its own, and the agent says where
// it runs.
func TestRemote_AgentStartedElsewhereServesATurnAndItsFiles(t *testing.T) {
	fh := newFakeHost(t)
	work := filepath.Join(t.TempDir(), "never-made")
	p := newPool(t, pool.Config{WorkDir: work, Remote: fh.start})
	a := acquire(t, p, "t1")
	if a.Where != "host-1" || a.Dir != filepath.Join(fh.dir, "t1") {
		t.Fatalf("agent runs at %q in %q, want host-1 in %q", a.Where, a.Dir, filepath.Join(fh.dir, "t1"))
	}
	if got := prompt(t, a, "stream 2"); got != "chunk 1\nchunk 2\n" {
		t.Fatalf("turn answered %q", got)
	}
	file := filepath.Join(a.Dir, "notes.txt")
	if err := os.WriteFile(file, []byte("on the host's disk"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := prompt(t, a, "fs-read "+file); !strings.Contains(got, "on the host's disk") {
		t.Fatalf("fs-read answered %q", got)
	}
	if n := fh.host.reads.Load(); n != 1 {
		t.Fatalf("Remote's host read %d files, want 1", n)
	}
	if _, err := os.Stat(work); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the pool made its own working directory %s (%v)", work, err)
	}
	pid := a.Proc.PID()
	p.Release(a, true)
	if !agenttest.WaitGone(pid, 10*time.Second) {
		t.Fatalf("agent %d still runs after its release", pid)
	}
	if s := p.Stats(); s.Spawned != 1 || s.Stopped[pool.StopUntrusted] != 1 {
		t.Fatalf("stats %+v: want one spawned, one stopped", s)
	}
}

// A Remote that fails gives its error in words, and the slot back.
func TestRemote_FailureGivesTheErrorAndTheSlotBack(t *testing.T) {
	p := newPool(t, pool.Config{MaxSessions: 1, Remote: func(ctx context.Context, thread string, prof *pool.Profile, onWait func()) (pool.Remote, error) {
		return pool.Remote{}, errors.New("no agent host offers profile default")
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 { // the second would wait for the slot if the first kept it
		_, err := p.Acquire(ctx, "t1", "", nil)
		if err == nil || err.Error() != "agent failed to start: no agent host offers profile default" {
			t.Fatalf("Acquire: %v", err)
		}
	}
	if s := p.Stats(); s.SpawnFailed != 2 || s.Starting != 0 || s.Live != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// A Remote that waits for a host says so through Acquire's onWait, as
// WaitHost, and the wait ends with the caller's context.
func TestRemote_WaitForAHostIsToldAndAbortable(t *testing.T) {
	waiting := make(chan struct{})
	p := newPool(t, pool.Config{Remote: func(ctx context.Context, thread string, prof *pool.Profile, onWait func()) (pool.Remote, error) {
		onWait()
		<-ctx.Done()
		return pool.Remote{}, context.Cause(ctx)
	}})
	ctx, cancel := context.WithCancelCause(context.Background())
	var told []pool.Wait
	done := make(chan error, 1)
	go func() {
		_, err := p.Acquire(ctx, "t1", "", func(w pool.Wait) {
			told = append(told, w)
			close(waiting)
		})
		done <- err
	}()
	select {
	case <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("onWait was not called")
	}
	gone := errors.New("the message was withdrawn")
	cancel(gone)
	select {
	case err := <-done:
		if !errors.Is(err, gone) {
			t.Fatalf("Acquire: %v, want the caller's cause", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire did not end with its context")
	}
	if len(told) != 1 || told[0] != pool.WaitHost {
		t.Fatalf("onWait got %v, want [WaitHost]", told)
	}
}

// A fork is refused with a clear error while agents run on agent hosts.
func TestRemote_ForkIsRefused(t *testing.T) {
	fh := newFakeHost(t)
	p := newPool(t, pool.Config{Remote: fh.start})
	_, err := p.AcquireFork(context.Background(), "child", "", pool.Fork{Thread: "parent", Session: "s1"}, nil)
	if !errors.Is(err, pool.ErrRemoteFork) {
		t.Fatalf("AcquireFork: %v, want ErrRemoteFork", err)
	}
	if n := fh.starts.Load(); n != 0 {
		t.Fatalf("Remote was asked %d times for a fork", n)
	}
}

// reportingProc is an agent on a host that says what it uses.
type reportingProc struct {
	pool.Proc
	usage pool.Usage
}

func (r reportingProc) Usage() (pool.Usage, error) { return r.usage, nil }

// What an agent on a host uses is what its host says, never what this
// machine's /proc says of a process with the same pid; a host that says
// nothing gives an error in words, not a stranger's figures.
func TestRemote_UsageIsWhatTheHostSays(t *testing.T) {
	fh := newFakeHost(t)
	said := pool.Usage{Memory: 123 << 20, MemoryMax: 1 << 30, CPU: 3 * time.Second, CPUCounted: true, Source: pool.UsageCgroup}
	reporting := func(ctx context.Context, thread string, prof *pool.Profile, onWait func()) (pool.Remote, error) {
		r, err := fh.start(ctx, thread, prof, onWait)
		if err == nil && thread == "t1" {
			r.Proc = reportingProc{Proc: r.Proc, usage: said}
		}
		return r, err
	}
	p := newPool(t, pool.Config{Remote: reporting})
	a, b := acquire(t, p, "t1"), acquire(t, p, "t2")
	us, errs := pool.Usages([]*pool.Agent{a, b})
	if errs[0] != nil || us[0] != said {
		t.Errorf("the host said %+v; the pool says %+v, %v", said, us[0], errs[0])
	}
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "host-1") {
		t.Errorf("a host that says nothing: %+v, %v", us[1], errs[1])
	}
}

// turnCountingProc counts the turns it was told had ended.
type turnCountingProc struct {
	pool.Proc
	ended *atomic.Int32
}

func (p turnCountingProc) TurnEnded() { p.ended.Add(1) }

// An agent on a host is told each time its thread's turn ends (Release),
// for what its host does then.
func TestRemote_TheHostIsToldEachTurnsEnd(t *testing.T) {
	fh := newFakeHost(t)
	var ended atomic.Int32
	p := newPool(t, pool.Config{Remote: func(ctx context.Context, thread string, prof *pool.Profile, onWait func()) (pool.Remote, error) {
		r, err := fh.start(ctx, thread, prof, onWait)
		r.Proc = turnCountingProc{Proc: r.Proc, ended: &ended}
		return r, err
	}})
	for i := range 3 {
		a := acquire(t, p, "t1")
		prompt(t, a, "stream 1")
		p.Release(a, false)
		if got := ended.Load(); got != int32(i+1) {
			t.Fatalf("after %d turns the host was told of %d ends", i+1, got)
		}
	}
}

// With agents on hosts, warm agents are kept there too: a new thread
// takes one (no start of its own) and is placed where it runs; a thread
// whose workspace is on another host goes back there instead.
func TestRemote_WarmAgentsOnHostsAreForNewThreads(t *testing.T) {
	fh := newFakeHost(t)
	var mu sync.Mutex
	placed := map[string]string{}
	// Warm agents need a directory shared by the profile's agents.
	shared := &pool.Profile{Name: "shared", Command: fakeAgent, WorkDir: t.TempDir(), Warm: 1}
	p := newPool(t, pool.Config{Remote: fh.start, Profiles: map[string]*pool.Profile{"shared": shared}, DefaultProfile: "shared",
		Placed: func(thread, where string) {
			mu.Lock()
			placed[thread] = where
			mu.Unlock()
		},
		PlacedOn: func(thread string) string {
			if thread == "t2" {
				return "host-2" // its workspace is on another host
			}
			return ""
		}})
	eventually.True(t, "a warm agent on the host", func() bool { return p.Stats().Warm == 1 })
	// The warm agent taken is replaced at once, so the start count may
	// already hold its successor: the claims say which agent t1 got.
	a := acquire(t, p, "t1")
	if claims := p.Stats().WarmClaims["shared"]; claims != 1 || a.Where != "host-1" {
		t.Errorf("the new thread's agent: %d warm claims, on %q; want the warm one, on host-1", claims, a.Where)
	}
	p.Release(a, false)
	eventually.True(t, "a warm agent again", func() bool { return p.Stats().Warm == 1 && fh.starts.Load() == 2 })
	b := acquire(t, p, "t2")
	if claims, starts := p.Stats().WarmClaims["shared"], fh.starts.Load(); claims != 1 || starts != 3 || p.Stats().Warm != 1 {
		t.Errorf("a thread whose workspace is on another host took a warm agent (claims %d, starts %d, warm %d)", claims, starts, p.Stats().Warm)
	}
	p.Release(b, false)
	mu.Lock()
	defer mu.Unlock()
	if len(placed) != 2 || placed["t1"] != "host-1" || placed["t2"] != "host-1" {
		t.Errorf("placed: %v, want t1 and t2 on host-1, and no warm agent's name", placed)
	}
}

// An idle agent whose host was lost (its Proc ended) is not handed to the
// thread's next message: a new one is started, on another host.
func TestRemote_AnIdleAgentOfALostHostIsReplaced(t *testing.T) {
	fh := newFakeHost(t)
	p := newPool(t, pool.Config{Remote: fh.start})
	a := acquire(t, p, "t1")
	p.Release(a, false)
	a.Proc.Kill() // its host is lost: the stand-in's Proc ends
	b := acquire(t, p, "t1")
	if b == a || fh.starts.Load() != 2 {
		t.Fatalf("the thread got the dead agent again (%d starts)", fh.starts.Load())
	}
	if got := prompt(t, b, "stream 1"); got != "chunk 1\n" {
		t.Fatalf("the new agent answered %q", got)
	}
}

// An agent host that defines the profile's MCP servers has its
// definition given to the agent's session, not the broker's: the host
// runs its own definition of the profile, and its sandbox shows the
// programs of its own list.
func TestRemote_TheHostsMCPServersAreTheSessions(t *testing.T) {
	fh := newFakeHost(t)
	hostMCP := []acp.MCPServer{{Name: "host-tool", Command: "/bin/true"}}
	for _, tc := range []struct {
		name         string
		host         bool
		want, absent string
	}{
		{"the host's", true, "host-tool", "broker-tool"},
		{"a host that says none", false, "broker-tool", "host-tool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPool(t, pool.Config{MCPServers: []acp.MCPServer{{Name: "broker-tool", Command: "/bin/false"}},
				Remote: func(ctx context.Context, thread string, prof *pool.Profile, onWait func()) (pool.Remote, error) {
					r, err := fh.start(ctx, thread, prof, onWait)
					if tc.host {
						r.HostMCP, r.MCPServers = true, hostMCP
					}
					return r, err
				}})
			a := acquire(t, p, "t-"+tc.name)
			got := prompt(t, a, "mcp-servers")
			if !strings.Contains(got, tc.want) || strings.Contains(got, tc.absent) {
				t.Fatalf("the session was given %s; want %s, not %s", got, tc.want, tc.absent)
			}
			p.Release(a, false)
		})
	}
}
