package pool_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"acpbroker/internal/agenttest"
	"acpbroker/internal/eventually"
	"acpbroker/internal/metricstest"
	"acpbroker/pool"

	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
)

// launches records the agent processes a pool starts, in order.
type launches struct {
	mu   sync.Mutex
	pids []int
	at   []time.Time
}

func (l *launches) launch(spec pool.ProcessSpec) (pool.Proc, error) {
	l.mu.Lock()
	l.at = append(l.at, time.Now())
	l.mu.Unlock()
	proc, err := pool.Exec(spec)
	if err == nil {
		l.mu.Lock()
		l.pids = append(l.pids, proc.PID())
		l.mu.Unlock()
	}
	return proc, err
}

func (l *launches) started() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.pids)
}

func (l *launches) times() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.at)
}

// syncBuffer is a log the pool writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// warmPool starts a pool of profiles whose agents (fake ones, unless a
// profile names its command) share one directory each, recording what
// it launches; it is closed when the test ends.
func warmPool(t *testing.T, cfg pool.Config) (*pool.Pool, *launches, *syncBuffer) {
	t.Helper()
	for _, prof := range cfg.Profiles {
		if prof.Command == "" {
			prof.Command = fakeAgent
		}
		if prof.WorkDir == "" && prof.Workspace == nil {
			prof.WorkDir = t.TempDir()
		}
	}
	l := &launches{}
	log := &syncBuffer{}
	cfg.Launch = l.launch
	cfg.Logger = zerolog.New(zerolog.MultiLevelWriter(log, zerolog.NewTestWriter(t))).Level(zerolog.InfoLevel)
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = 4
	}
	if cfg.ExitGrace == 0 {
		cfg.ExitGrace = 500 * time.Millisecond
	}
	p := pool.New(cfg)
	t.Cleanup(p.Close)
	return p, l, log
}

func warmReady(p *pool.Pool, profile string) int { return p.Stats().Profiles[profile].Warm }

// awaitWarm waits until profile has n warm agents ready.
func awaitWarm(t *testing.T, p *pool.Pool, profile string, n int) {
	t.Helper()
	eventually.True(t, "warm agents ready", func() bool { return warmReady(p, profile) == n })
}

// A new thread's first turn, with a warm agent ready, is answered by a
// process started before the thread asked: no process is started for it,
// the thread's session is remembered, it counts as a claim, and the pool
// starts a replacement.
func TestWarm_NewThreadTakesAReadyAgentAndItIsReplaced(t *testing.T) {
	book := pool.NewMemoryBook(10)
	p, l, _ := warmPool(t, pool.Config{Sessions: book, Profiles: map[string]*pool.Profile{"w": {Warm: 1}}})
	awaitWarm(t, p, "w", 1)
	before := l.started()

	a := acquireProfile(t, p, "t1", "w")
	if !slices.Contains(before, a.Proc.PID()) {
		t.Fatalf("the thread's agent is pid %d, started for it; warm agents were %v", a.Proc.PID(), before)
	}
	if got := prompt(t, a, "hello"); !strings.Contains(got, "You said: hello") {
		t.Fatalf("first answer = %q", got)
	}
	if sess, _ := book.Session("t1"); sess != a.SessionID || a.Thread != "t1" || a.Resumed || a.Lost != "" {
		t.Fatalf("thread t1 has session %q in the book, agent %+v", sess, a)
	}
	p.Release(a, false)
	if again := acquireProfile(t, p, "t1", "w"); again != a {
		t.Fatal("the thread's next turn did not get its agent back")
	} else {
		p.Release(again, false)
	}

	awaitWarm(t, p, "w", 1) // the replacement
	if n := len(l.started()); n != 2 {
		t.Fatalf("%d agents started, want the first warm one and its replacement", n)
	}
	s := p.Stats()
	if s.WarmClaims["w"] != 1 || s.ColdStarts["w"] != 0 || s.Live != 1 || s.Warm != 1 {
		t.Fatalf("stats = %+v: want 1 claim, no cold start, 1 live and 1 warm", s)
	}
	got := metricstest.Scrape(t, p)
	metricstest.Expect(t, got, dto.MetricType_GAUGE, map[string]float64{`acp_broker_profile_agents_warm{profile="w"}`: 1})
	metricstest.Expect(t, got, dto.MetricType_COUNTER, map[string]float64{`acp_broker_agent_warm_claims_total{profile="w"}`: 1})
}

// Profile.Warm is consumed: warm = 2 keeps two agents ready, warm = 0
// none, and a profile's max_sessions bounds its warm agents too.
func TestWarm_KnobKeepsThatManyReady(t *testing.T) {
	p, l, _ := warmPool(t, pool.Config{Profiles: map[string]*pool.Profile{
		"two": {Warm: 2}, "zero": {Warm: 0}, "capped": {Warm: 2, MaxSessions: 1},
	}})
	awaitWarm(t, p, "two", 2)
	awaitWarm(t, p, "capped", 1)
	// Every profile was looked at in the pass that started those: none
	// is started for "zero", and no second for "capped".
	s := p.Stats()
	if z := s.Profiles["zero"]; z.Warm != 0 || z.Starting != 0 || z.Live != 0 {
		t.Fatalf("profile with warm = 0: %+v", z)
	}
	if c := s.Profiles["capped"]; c.Starting != 0 {
		t.Fatalf("profile with max_sessions 1: %+v", c)
	}
	if n := len(l.started()); n != 3 {
		t.Fatalf("%d agents started, want 3", n)
	}
}

// Warm agents count against pool.max_sessions and never push out a
// person's agent: with max_sessions 2 full of warm agents, a thread of
// another profile gets a slot, a warm agent stopped for it; and the next
// such thread stops the remaining warm agent, not the first one's idle
// agent. While the pool is full nothing is warmed again.
func TestWarm_AgentsGiveTheirSlotsToThreadsFirst(t *testing.T) {
	p, l, _ := warmPool(t, pool.Config{MaxSessions: 2, Profiles: map[string]*pool.Profile{"w": {Warm: 2}, "other": {}}})
	awaitWarm(t, p, "w", 2)

	o1 := acquireProfile(t, p, "o1", "other")
	p.Release(o1, false)
	o2 := acquireProfile(t, p, "o2", "other")
	defer p.Release(o2, false)
	if p.Lookup("o1") != o1 || !agenttest.Running(o1.Proc.PID()) {
		t.Fatal("the idle agent of o1 was stopped for o2, with a warm agent to stop")
	}
	s := p.Stats()
	if s.Stopped[pool.StopWarm] != 2 || s.Stopped[pool.StopLRU] != 0 || s.Warm != 0 {
		t.Fatalf("stats = %+v: want 2 warm agents stopped for the threads, none of theirs", s)
	}
	if n := len(l.started()); n != 4 {
		t.Fatalf("%d agents started, want 2 warm and 2 for the threads", n)
	}
}

// A thread waiting for a slot taken by a warm agent being started does
// not wait for the start: it is given up.
func TestWarm_AStartInTheWayOfAThreadIsGivenUp(t *testing.T) {
	p, _, _ := warmPool(t, pool.Config{MaxSessions: 1, Profiles: map[string]*pool.Profile{
		"slow": {Warm: 1, Args: []string{"-init-delay", "30s"}}, "other": {},
	}})
	eventually.True(t, "the warm start", func() bool { return p.Stats().Starting == 1 })
	start := time.Now()
	a := acquireProfile(t, p, "o", "other")
	defer p.Release(a, false)
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the thread waited %s for its slot", took)
	}
	if s := p.Stats(); s.SpawnFailed != 0 {
		t.Fatalf("a start given up for a thread counted as a failure: %+v", s)
	}
}

// A thread with a session its agent can take up starts cold, and resumes
// it; a warm agent stays ready for another thread.
func TestWarm_AThreadThatMustResumeStartsCold(t *testing.T) {
	book := pool.NewMemoryBook(10)
	p, l, _ := warmPool(t, pool.Config{Sessions: book, Profiles: map[string]*pool.Profile{"w": {Warm: 1, Args: []string{"--load-session"}}}})
	awaitWarm(t, p, "w", 1)
	a := acquireProfile(t, p, "t", "w")
	prompt(t, a, "remember me")
	p.Release(a, true)
	awaitWarm(t, p, "w", 1)
	before := l.started()
	b := acquireProfile(t, p, "t", "w")
	defer p.Release(b, false)
	if slices.Contains(before, b.Proc.PID()) || !b.Resumed || b.SessionID != a.SessionID {
		t.Fatalf("the thread's second agent (pid %d, resumed %v, session %q) is not a cold start resuming %q", b.Proc.PID(), b.Resumed, b.SessionID, a.SessionID)
	}
	if s := p.Stats(); s.Warm != 1 || s.ColdStarts["w"] != 1 || s.WarmClaims["w"] != 1 {
		t.Fatalf("stats = %+v", s)
	}
}

// A warm agent that dies while it waits is noticed and replaced; a
// profile whose agent cannot start is tried again after a pause that
// doubles, and the log says why.
func TestWarm_DeadAgentIsReplacedAndFailuresPause(t *testing.T) {
	t.Run("dies waiting", func(t *testing.T) {
		p, l, log := warmPool(t, pool.Config{Profiles: map[string]*pool.Profile{"w": {Warm: 1}}})
		awaitWarm(t, p, "w", 1)
		first := l.started()[0]
		syscall.Kill(first, syscall.SIGKILL)
		eventually.True(t, "a replacement", func() bool { return len(l.started()) == 2 && warmReady(p, "w") == 1 })
		if !agenttest.WaitGone(first, 5*time.Second) {
			t.Fatal("the dead warm agent is still running")
		}
		if s := p.Stats(); s.Stopped[pool.StopCrashed] != 1 {
			t.Fatalf("stats = %+v", s)
		}
		if !strings.Contains(log.String(), "the warm agent exited while waiting for a thread") {
			t.Fatalf("the log does not say why:\n%s", log)
		}
	})
	t.Run("cannot start", func(t *testing.T) {
		p, l, log := warmPool(t, pool.Config{Profiles: map[string]*pool.Profile{
			"broken": {Warm: 1, Command: "/bin/sh", Args: []string{"-c", "echo 'no API key configured' >&2; exit 3"}},
		}})
		eventually.Within(t, 15*time.Second, "three failed tries", func() bool { return p.Stats().SpawnFailed >= 3 })
		at := l.times()
		if d := at[1].Sub(at[0]); d < time.Second {
			t.Fatalf("tried again after %s", d)
		}
		if d := at[2].Sub(at[1]); d < 2*time.Second {
			t.Fatalf("tried a third time after %s, want the pause doubled", d)
		}
		if out := log.String(); !strings.Contains(out, "warming this profile pauses") || !strings.Contains(out, "no API key configured") {
			t.Fatalf("the log does not say why warming pauses:\n%s", out)
		}
		if s := p.Stats(); s.Warm != 0 {
			t.Fatalf("stats = %+v", s)
		}
	})
}

// A warm agent unused for pool.idle_timeout is stopped, and replaced.
func TestWarm_IdleTimeoutRetiresAWarmAgent(t *testing.T) {
	p, l, _ := warmPool(t, pool.Config{IdleTimeout: 300 * time.Millisecond, Profiles: map[string]*pool.Profile{"w": {Warm: 1}}})
	awaitWarm(t, p, "w", 1)
	first := l.started()[0]
	ready := time.Now()
	if !agenttest.WaitGone(first, 10*time.Second) {
		t.Fatal("the unused warm agent still runs")
	}
	if took := time.Since(ready); took < 300*time.Millisecond {
		t.Fatalf("stopped after %s, before the idle timeout", took)
	}
	eventually.True(t, "a replacement", func() bool { return len(l.started()) >= 2 })
	if s := p.Stats(); s.Stopped[pool.StopIdle] < 1 {
		t.Fatalf("stats = %+v", s)
	}
}

// Shutdown stops the warm agents with the others.
func TestWarm_ShutdownStopsWarmAgents(t *testing.T) {
	p, l, _ := warmPool(t, pool.Config{Profiles: map[string]*pool.Profile{"w": {Warm: 2}}})
	awaitWarm(t, p, "w", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.Shutdown(ctx)
	for _, pid := range l.started() {
		if agenttest.Running(pid) {
			t.Fatalf("warm agent %d still runs after Shutdown", pid)
		}
	}
	if s := p.Stats(); s.Warm != 0 || s.Stopped[pool.StopShutdown] != 2 {
		t.Fatalf("stats = %+v", s)
	}
}

// A reload that changes a profile retires its warm agents, started from
// the old definition, and new ones are started from the new; one that
// changes nothing keeps them.
func TestWarm_ChangedProfileRetiresItsWarmAgents(t *testing.T) {
	dir := t.TempDir()
	def := func(env string) map[string]*pool.Profile {
		return map[string]*pool.Profile{"w": {Command: fakeAgent, WorkDir: dir, Env: []string{"MARK=" + env}, Warm: 1}}
	}
	p, l, _ := warmPool(t, pool.Config{Profiles: def("old")})
	awaitWarm(t, p, "w", 1)
	old := l.started()[0]

	p.SetProfiles(def("old"), "")
	if s := p.Stats(); s.Warm != 1 || s.Stopped[pool.StopWarm] != 0 {
		t.Fatalf("a reload that changed nothing: %+v", s)
	}
	p.SetProfiles(def("new"), "")
	if !agenttest.WaitGone(old, 10*time.Second) {
		t.Fatal("the warm agent of the old definition still runs")
	}
	awaitWarm(t, p, "w", 1)
	a := acquireProfile(t, p, "t", "w")
	defer p.Release(a, false)
	if got := envLine(t, a, "MARK"); got != "new" {
		t.Fatalf("the thread's agent has MARK=%q, want the new definition's", got)
	}
}

// A profile whose agents each have a directory of their own is not
// warmed, and the log says so.
func TestWarm_PerThreadDirectoriesAreNotWarmed(t *testing.T) {
	p, l, log := warmPool(t, pool.Config{Profiles: map[string]*pool.Profile{
		"own": {WorkDir: t.TempDir(), PerThreadDir: true, Warm: 2},
		"worktree": {Warm: 1, Workspace: func(ctx context.Context, thread string) (string, error) {
			return "", errors.New("not used")
		}},
		"shared": {Warm: 1},
	}})
	awaitWarm(t, p, "shared", 1)
	if n := len(l.started()); n != 1 {
		t.Fatalf("%d agents started, want only the shared profile's", n)
	}
	if err := pool.WarmRefusal(p.Profile("own")); !errors.Is(err, pool.ErrNotWarmable) {
		t.Fatalf("WarmRefusal(per-thread directories) = %v", err)
	}
	out := log.String()
	for _, name := range []string{`"profile":"own"`, `"profile":"worktree"`} {
		if !strings.Contains(out, name) || !strings.Contains(out, "warm agents are not kept") {
			t.Fatalf("the log does not say %s is not warmed:\n%s", name, out)
		}
	}
}

// A thread whose session its agent cannot take up would lose it with a
// cold start too: it takes a warm agent, told which session it lost.
func TestWarm_ASessionThatCannotBeTakenUpIsLostToAWarmAgent(t *testing.T) {
	book := pool.NewMemoryBook(10)
	book.RememberSession("t", "sess-gone", false)
	p, l, _ := warmPool(t, pool.Config{Sessions: book, Profiles: map[string]*pool.Profile{"w": {Warm: 1}}})
	awaitWarm(t, p, "w", 1)
	before := l.started()
	a := acquireProfile(t, p, "t", "w")
	defer p.Release(a, false)
	if !slices.Contains(before, a.Proc.PID()) || a.Lost != "sess-gone" || a.Resumed {
		t.Fatalf("agent pid %d (warm were %v), lost %q, resumed %v", a.Proc.PID(), before, a.Lost, a.Resumed)
	}
	if sess, _ := book.Session("t"); sess != a.SessionID {
		t.Fatalf("the book has %q for the thread, want its new session %q", sess, a.SessionID)
	}
}

// A reload that lowers a profile's warm stops the warm agents past it;
// their definition unchanged, the rest stay.
func TestWarm_FewerWarmAgentsAfterAReload(t *testing.T) {
	dir := t.TempDir()
	def := func(warm int) map[string]*pool.Profile {
		return map[string]*pool.Profile{"w": {Command: fakeAgent, WorkDir: dir, Warm: warm}}
	}
	p, l, _ := warmPool(t, pool.Config{Profiles: def(2)})
	awaitWarm(t, p, "w", 2)
	p.SetProfiles(def(1), "")
	if s := p.Stats(); s.Warm != 1 || s.Stopped[pool.StopWarm] != 1 {
		t.Fatalf("after warm 2 → 1: %+v", s)
	}
	p.SetProfiles(def(0), "")
	for _, pid := range l.started() {
		if !agenttest.WaitGone(pid, 10*time.Second) {
			t.Fatalf("warm agent %d still runs with warm = 0", pid)
		}
	}
	if n := len(l.started()); n != 2 {
		t.Fatalf("%d agents started, want the first two only", n)
	}
}

// Through a launcher, a warm agent is started under a name of its own,
// and the stop command names that, not the thread that took it: the
// runtime knows it by the name it started it with.
func TestWarm_ALaunchersStopCommandNamesWhatItStarted(t *testing.T) {
	dir := t.TempDir()
	record := filepath.Join(dir, "runtime.log")
	runtime := filepath.Join(dir, "fake-runtime")
	script := "#!/bin/sh\n" +
		"echo \"$*\" >> " + record + "\n" +
		"if [ \"$1\" = run ]; then shift 3; exec \"$@\"; fi\n"
	if err := os.WriteFile(runtime, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	p, _, _ := warmPool(t, pool.Config{Profiles: map[string]*pool.Profile{"w": {Warm: 1}}, Sandbox: pool.Sandbox{
		Launcher:     []string{runtime, "run", "--name", "agent-{thread}"},
		LauncherStop: []string{runtime, "stop", "agent-{thread}"},
	}})
	awaitWarm(t, p, "w", 1)
	a := acquireProfile(t, p, "t1", "w")
	prompt(t, a, "hello")
	p.Release(a, true)
	eventually.True(t, "the stop command", func() bool {
		b, _ := os.ReadFile(record)
		return strings.Contains(string(b), "stop ")
	})
	b, _ := os.ReadFile(record)
	if !strings.Contains(string(b), "run --name agent-warm-w-1 ") || !strings.Contains(string(b), "stop agent-warm-w-1\n") {
		t.Fatalf("the runtime was called with:\n%s\nwant the warm agent's name in both run and stop", b)
	}
}
