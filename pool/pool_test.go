package pool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/internal/agenttest"
	"acpbroker/internal/eventually"
	"acpbroker/pool"

	"github.com/rs/zerolog"
)

var fakeAgent string

func TestMain(m *testing.M) { agenttest.Main(m, &fakeAgent) }

func testLogger(t *testing.T) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
}

// newPool starts a pool of fake agents that is closed when the test ends.
func newPool(t *testing.T, cfg pool.Config) *pool.Pool {
	t.Helper()
	if cfg.Command == "" {
		cfg.Command = fakeAgent
	}
	if cfg.WorkDir == "" {
		cfg.WorkDir = t.TempDir()
	}
	cfg.PerThreadDir = true
	if cfg.Logger.GetLevel() == zerolog.DebugLevel { // the zero Logger
		cfg.Logger = testLogger(t)
	}
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = 4
	}
	if cfg.ExitGrace == 0 {
		cfg.ExitGrace = 500 * time.Millisecond
	}
	p := pool.New(cfg)
	t.Cleanup(p.Close)
	return p
}

func acquire(t *testing.T, p *pool.Pool, thread string) *pool.Agent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := p.Acquire(ctx, thread, "", nil)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", thread, err)
	}
	return a
}

// prompt runs one turn on a and returns the answer text.
func prompt(t *testing.T, a *pool.Agent, text string) string {
	t.Helper()
	sub, err := a.Conn.Subscribe(a.SessionID, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	call, err := a.Conn.Prompt(context.Background(), a.SessionID, []acp.ContentBlock{acp.TextBlock(text)})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	add := func(u acp.Update) {
		if u.Kind == acp.UpdateMessageChunk && u.Content != nil {
			b.WriteString(u.Content.Text)
		}
	}
	timeout := time.After(20 * time.Second)
	for {
		select {
		case u := <-sub.Updates():
			add(u)
		case <-call.Done():
			for len(sub.Updates()) > 0 {
				add(<-sub.Updates())
			}
			if err := call.Result(nil); err != nil {
				t.Fatalf("prompt %q: %v", text, err)
			}
			return b.String()
		case <-timeout:
			t.Fatalf("prompt %q: no answer within 20s", text)
		}
	}
}

// firstChunk starts a turn on a and returns its first message chunk,
// leaving the turn running.
func firstChunk(t *testing.T, a *pool.Agent, text string) string {
	t.Helper()
	sub, err := a.Conn.Subscribe(a.SessionID, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	if _, err := a.Conn.Prompt(context.Background(), a.SessionID, []acp.ContentBlock{acp.TextBlock(text)}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(20 * time.Second)
	for {
		select {
		case u := <-sub.Updates():
			if u.Kind == acp.UpdateMessageChunk && u.Content != nil {
				return u.Content.Text
			}
		case <-timeout:
			t.Fatalf("prompt %q: no chunk within 20s", text)
		}
	}
}

// The agent's environment holds PATH, HOME, USER, LANG and what agent.env
// names (expanded from the broker's environment), and nothing else: the
// broker's token and systemd's socket never reach it.
func TestSpawn_AgentEnvironmentIsClearedAndCarriesNoBrokerSecrets(t *testing.T) {
	broker := map[string]string{
		"PATH": os.Getenv("PATH"), "HOME": "/home/broker", "USER": "broker", "LANG": "C.UTF-8",
		"BROKER_DISCORD_TOKEN": "tok-secret", "NOTIFY_SOCKET": "/run/systemd/notify", "WATCHDOG_USEC": "30000000",
		"AWS_SECRET_ACCESS_KEY": "aws-secret", "MODEL_KEY": "k-123",
	}
	lookup := func(k string) (string, bool) { v, ok := broker[k]; return v, ok }
	env, err := pool.BuildEnv(lookup, map[string]string{"API_KEY": "${MODEL_KEY}", "MODE": "test"})
	if err != nil {
		t.Fatal(err)
	}
	p := newPool(t, pool.Config{Env: env})
	a := acquire(t, p, "t")
	got := strings.Split(prompt(t, a, "env"), "\n")
	want := []string{"API_KEY=k-123", "HOME=/home/broker", "LANG=C.UTF-8", "MODE=test", "PATH=" + os.Getenv("PATH"), "USER=broker"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("agent environment:\n%s\nwant exactly:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestBuildEnv_NamingABrokerSecretIsAnErrorThatNamesTheKey(t *testing.T) {
	lookup := func(k string) (string, bool) { return "secret-value", true }
	for _, extra := range []map[string]string{
		{"TOKEN": "${BROKER_DISCORD_TOKEN}"},
		{"SOCK": "$NOTIFY_SOCKET"},
		{"BROKER_DISCORD_TOKEN": "x"},
		{"W": "${WATCHDOG_USEC}"},
	} {
		env, err := pool.BuildEnv(lookup, extra)
		if err == nil || !strings.Contains(err.Error(), "agent.env.") {
			t.Fatalf("BuildEnv(%v) = %v, %v; want an error naming agent.env.<key>", extra, env, err)
		}
		if strings.Contains(strings.Join(env, " "), "secret-value") {
			t.Fatalf("secret leaked into %v", env)
		}
	}
}

// logLines decodes a JSON log, one entry per line.
func logLines(log string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(log, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// stderr is always drained (an agent writing far more than a pipe holds
// does not block), each line becomes a log entry capped in length and
// tagged with thread and pid, and a bounded tail is kept.
func TestProcess_StderrIsDrainedIntoCappedTaggedLogLines(t *testing.T) {
	var logs agenttest.Buffer
	p := newPool(t, pool.Config{Logger: zerolog.New(&logs)})
	a := acquire(t, p, "thread-9")
	if got := prompt(t, a, "stderr 50"); got != "ok" {
		t.Fatalf("answer %q: the agent was blocked by its stderr", got)
	}
	a.Conn.Close()
	p.Release(a, true)
	<-a.Proc.Reaped()
	var stderrLines, truncated int
	for _, m := range logLines(logs.String()) {
		if m["stream"] != "stderr" {
			continue
		}
		stderrLines++
		if m["thread"] != "thread-9" || m["pid"] != float64(a.Proc.PID()) {
			t.Fatalf("stderr line not tagged with thread and pid: %v", m)
		}
		if n := len(m["message"].(string)); n > 2048 {
			t.Fatalf("a stderr log line is %d bytes, over the 2 KiB cap", n)
		}
		if m["truncated"] == true {
			truncated++
		}
	}
	if stderrLines < 51 || truncated != 1 {
		t.Fatalf("stderr lines logged = %d (want ≥ 51), truncated = %d (want 1)", stderrLines, truncated)
	}
	if n := len(a.Proc.StderrTail()); n == 0 || n > 2048+1 {
		t.Fatalf("stderr tail is %d bytes, want 1..2049", n)
	}
}

// An agent that floods its stderr is not blocked, and adds at most 100
// lines a second to the broker's log (which, under systemd, would
// otherwise spend the journal's rate limit for the broker's own lines);
// its tail, kept for errors, still ends with its last line.
func TestProcess_AnAgentCannotFloodTheLogWithItsStderr(t *testing.T) {
	var logs agenttest.Buffer
	p := newPool(t, pool.Config{Logger: zerolog.New(&logs)})
	a := acquire(t, p, "thread-9")
	start := time.Now()
	if got := prompt(t, a, "stderr 5000"); got != "ok" {
		t.Fatalf("answer %q: the agent was blocked by its stderr", got)
	}
	a.Conn.Close()
	p.Release(a, true)
	<-a.Proc.Reaped()
	took := time.Since(start)
	stderrLines := 0
	for _, m := range logLines(logs.String()) {
		if m["stream"] == "stderr" {
			stderrLines++
		}
	}
	if most := 100 * (int(took/time.Second) + 1); stderrLines > most || stderrLines == 0 {
		t.Fatalf("%d of 5,001 stderr lines logged in %v, want 1..%d", stderrLines, took, most)
	}
	if tail := a.Proc.StderrTail(); !strings.HasSuffix(tail, "stdin closed\n") {
		t.Fatalf("the stderr tail ends %q, want its last line", tail[max(0, len(tail)-60):])
	}
}

// A crash is noticed at once, and the exit error says the status and the
// end of stderr.
func TestProcess_ExitIsNoticedAtOnceWithStatusAndStderr(t *testing.T) {
	p := newPool(t, pool.Config{})
	a := acquire(t, p, "t")
	sub, _ := a.Conn.Subscribe(a.SessionID, nil)
	defer sub.Close()
	if _, err := a.Conn.Prompt(context.Background(), a.SessionID, []acp.ContentBlock{acp.TextBlock("crash 3")}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Proc.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("exit not noticed")
	}
	<-a.Proc.Reaped()
	err := a.Proc.ExitErr()
	if err == nil || !strings.Contains(err.Error(), "exited with status 3") || !strings.Contains(err.Error(), "simulated crash") {
		t.Fatalf("exit error = %v", err)
	}
	if a.Proc.Alive() {
		t.Fatal("Alive after exit")
	}
	p.Release(a, false)
	if p.Lookup("t") != nil {
		t.Fatal("a dead agent stayed in the pool")
	}
}

// Stop escalates: stdin closed, then SIGTERM to the group, then SIGKILL;
// an agent and its child that both ignore SIGTERM are gone after two
// graces, and nothing is left running.
func TestProcess_StopEscalatesToSIGKILLAndLeavesNoOrphans(t *testing.T) {
	grace := 300 * time.Millisecond
	p := newPool(t, pool.Config{Args: []string{"--ignore-term", "--no-exit-on-eof"}})
	a := acquire(t, p, "t")
	child, err := strconv.Atoi(strings.TrimPrefix(firstChunk(t, a, "spawn-child"), "child:"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	a.Proc.Stop(grace)
	took := time.Since(start)
	if took < 2*grace || took > 2*grace+5*time.Second {
		t.Fatalf("Stop took %s, want two graces (%s) and then the kill", took, 2*grace)
	}
	for _, pid := range []int{a.Proc.PID(), child} {
		if !agenttest.WaitGone(pid, 5*time.Second) {
			t.Fatalf("process %d still running after Stop", pid)
		}
	}
	a.Conn.Close()
	p.Release(a, true)
}

// An agent that exits when its stdin closes stops without waiting out the
// grace; its child, which ignores SIGTERM, is still killed with the group.
func TestProcess_StopOfAPoliteAgentIsQuickAndStillKillsItsGroup(t *testing.T) {
	grace := 3 * time.Second
	p := newPool(t, pool.Config{})
	a := acquire(t, p, "t")
	child, err := strconv.Atoi(strings.TrimPrefix(firstChunk(t, a, "spawn-child"), "child:"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	a.Proc.Stop(grace)
	if took := time.Since(start); took >= grace {
		t.Fatalf("Stop took %s; an agent that exits on EOF should not wait out the grace", took)
	}
	if !agenttest.WaitGone(child, 5*time.Second) {
		t.Fatalf("child %d outlived its agent", child)
	}
	a.Conn.Close()
	p.Release(a, true)
}

// A full pool stops its least recently used idle agent to make room; that
// thread's next prompt resumes its session with session/load.
func TestPool_FullPoolEvictsLeastRecentlyUsedIdleAgentAndResumesIt(t *testing.T) {
	book := pool.NewMemoryBook(10)
	p := newPool(t, pool.Config{Args: []string{"--load-session"}, MaxSessions: 2, Sessions: book})
	a := acquire(t, p, "a")
	prompt(t, a, "hello from a")
	if sess, loadable := book.Session("a"); sess != a.SessionID || !loadable {
		t.Fatalf("the book keeps %q (loadable %v), want %q, loadable", sess, loadable, a.SessionID)
	}
	p.Release(a, false)
	b := acquire(t, p, "b")
	p.Release(b, false)
	c := acquire(t, p, "c")
	if p.Lookup("a") != nil || p.Lookup("b") == nil {
		t.Fatal("evicted the wrong agent: want a (least recently used) gone, b kept")
	}
	if !agenttest.WaitGone(a.Proc.PID(), 5*time.Second) {
		t.Fatal("evicted agent still running")
	}
	p.Release(c, false)
	a2 := acquire(t, p, "a")
	if !a2.Resumed || a2.SessionID != a.SessionID || a2.Lost != "" {
		t.Fatalf("a came back with session %q (resumed %v), want %q resumed", a2.SessionID, a2.Resumed, a.SessionID)
	}
	if got := prompt(t, a2, "again"); !strings.HasPrefix(got, "(resumed) You said: again") {
		t.Fatalf("answer after resume = %q", got)
	}
	if s := p.Stats(); s.Evicted != 2 || s.Live != 2 {
		t.Fatalf("stats = %+v, want 2 evictions and 2 live", s)
	}
	p.Release(a2, false)
}

// A thread whose session cannot be resumed gets a new one and learns which
// session it lost: when the agent cannot load sessions, and when it
// refuses a stale id.
func TestPool_UnresumableSessionFallsBackToANewOne(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"agent without loadSession", nil},
		{"stale session id", []string{"--load-session"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := t.TempDir()
			p := newPool(t, pool.Config{Args: tc.args, MaxSessions: 1, WorkDir: work})
			a := acquire(t, p, "a")
			p.Release(a, true)
			os.RemoveAll(filepath.Join(work, "a", ".fakeagent")) // the agent forgets its sessions
			a2 := acquire(t, p, "a")
			defer p.Release(a2, false)
			if a2.Resumed || a2.Lost != a.SessionID || a2.SessionID == "" || a2.SessionID == a.SessionID {
				t.Fatalf("after losing %q: session %q resumed=%v lost=%q", a.SessionID, a2.SessionID, a2.Resumed, a2.Lost)
			}
		})
	}
}

// When every slot is busy, Acquire waits in line (saying so once) until a
// slot frees, and gives up with its context's cause.
func TestPool_BusyPoolWaitsInLineBoundedByTheCallersDeadline(t *testing.T) {
	p := newPool(t, pool.Config{MaxSessions: 1})
	a := acquire(t, p, "a")

	waiting := make(chan struct{})
	got := make(chan *pool.Agent, 1)
	go func() {
		b, err := p.Acquire(context.Background(), "b", "", func(pool.Wait) { close(waiting) })
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	<-waiting
	if s := p.Stats(); s.Waiting != 1 {
		t.Fatalf("waiting = %d, want 1", s.Waiting)
	}

	cause := errors.New("no slot within 300ms")
	start := time.Now() // before the deadline's clock starts
	ctx, cancel := context.WithTimeoutCause(context.Background(), 300*time.Millisecond, cause)
	defer cancel()
	if _, err := p.Acquire(ctx, "c", "", nil); !errors.Is(err, cause) {
		t.Fatalf("Acquire with a deadline = %v, want its cause", err)
	}
	if took := time.Since(start); took < 300*time.Millisecond || took > 5*time.Second {
		t.Fatalf("gave up after %s", took)
	}

	p.Release(a, false)
	select {
	case b := <-got:
		if b == nil {
			t.Fatal("no agent for b")
		}
		p.Release(b, false)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting Acquire never got the freed slot")
	}
}

// pool.idle_timeout is consumed: with 300ms an idle agent is stopped soon
// after, and its session is kept for resume.
func TestPool_IdleTimeoutKnobStopsIdleAgents(t *testing.T) {
	book := pool.NewMemoryBook(10)
	p := newPool(t, pool.Config{IdleTimeout: 300 * time.Millisecond, Sessions: book})
	a := acquire(t, p, "t")
	released := time.Now()
	p.Release(a, false)
	if !agenttest.WaitGone(a.Proc.PID(), 10*time.Second) {
		t.Fatal("idle agent still running")
	}
	if took := time.Since(released); took < 300*time.Millisecond {
		t.Fatalf("stopped after %s, before the idle timeout", took)
	}
	if s := p.Stats(); s.Live != 0 {
		t.Fatalf("stats = %+v, want 0 live", s)
	}
	if sess, loadable := book.Session("t"); sess != a.SessionID || loadable {
		t.Fatalf("session kept for resume = %q (loadable %v); want %q, not loadable", sess, loadable, a.SessionID)
	}
}

// agent.start_timeout is consumed: a program that never answers initialize
// fails to start after it, and is not left running.
func TestPool_StartTimeoutKnobBoundsAnAgentThatNeverAnswers(t *testing.T) {
	p := newPool(t, pool.Config{Command: "/bin/sh", Args: []string{"-c", "echo started >&2; exec sleep 60"}, StartTimeout: 500 * time.Millisecond})
	start := time.Now()
	_, err := p.Acquire(context.Background(), "t", "", nil)
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "did not start within 500ms") {
		t.Fatalf("Acquire = %v", err)
	}
	if took < 500*time.Millisecond || took > 5*time.Second {
		t.Fatalf("failed after %s, want about 500ms", took)
	}
	if s := p.Stats(); s.Live != 0 || s.Starting != 0 {
		t.Fatalf("stats after a failed start = %+v", s)
	}
}

func TestPool_AgentThatExitsAtStartIsReportedWithItsStderr(t *testing.T) {
	p := newPool(t, pool.Config{Command: "/bin/sh", Args: []string{"-c", "echo 'no API key configured' >&2; exit 3"}})
	_, err := p.Acquire(context.Background(), "t", "", nil)
	if err == nil || !strings.Contains(err.Error(), "status 3") || !strings.Contains(err.Error(), "no API key configured") {
		t.Fatalf("Acquire = %v, want the exit status and stderr", err)
	}
}

// Close stops every agent in parallel, each with its own escalation, so
// six agents that ignore EOF and SIGTERM take about as long as one.
func TestPool_CloseStopsAllAgentsInParallel(t *testing.T) {
	grace := 400 * time.Millisecond
	p := pool.New(pool.Config{Command: fakeAgent, Args: []string{"--ignore-term", "--no-exit-on-eof"}, WorkDir: t.TempDir(),
		MaxSessions: 6, ExitGrace: grace, Logger: testLogger(t)})
	var pids []int
	for i := range 6 {
		a := acquire(t, p, "t"+strconv.Itoa(i))
		pids = append(pids, a.Proc.PID())
		p.Release(a, false)
	}
	start := time.Now()
	p.Close()
	took := time.Since(start)
	// One agent needs two graces; six in a row would need twelve.
	if took > 6*grace {
		t.Fatalf("Close took %s for six agents, want about %s (parallel)", took, 2*grace)
	}
	for _, pid := range pids {
		if agenttest.Running(pid) {
			t.Fatalf("agent %d still running after Close", pid)
		}
	}
	if _, err := p.Acquire(context.Background(), "late", "", nil); !errors.Is(err, pool.ErrClosed) {
		t.Fatalf("Acquire after Close = %v", err)
	}
}

// Reset during a turn takes effect when the turn releases the agent: the
// process is stopped and the session forgotten, not resumed.
func TestPool_ResetOfABusyAgentDiscardsItOnRelease(t *testing.T) {
	p := newPool(t, pool.Config{Args: []string{"--load-session"}})
	a := acquire(t, p, "t")
	p.Reset("t")
	if p.Lookup("t") != a {
		t.Fatal("a busy agent was taken away from its turn")
	}
	p.Release(a, false)
	if !agenttest.WaitGone(a.Proc.PID(), 5*time.Second) {
		t.Fatal("reset agent still running")
	}
	a2 := acquire(t, p, "t")
	defer p.Release(a2, false)
	if a2.Resumed || a2.Lost != "" || a2.SessionID == a.SessionID {
		t.Fatalf("after reset: session %q resumed=%v lost=%q, want a fresh session", a2.SessionID, a2.Resumed, a2.Lost)
	}
}

// A shutdown deadline bounds the stop: agents that would need two 5s
// graces are killed when the deadline passes, and none is left running.
func TestPool_ShutdownDeadlineKillsWhatIsStillStopping(t *testing.T) {
	p := pool.New(pool.Config{Command: fakeAgent, Args: []string{"--ignore-term", "--no-exit-on-eof"}, WorkDir: t.TempDir(),
		MaxSessions: 4, ExitGrace: 5 * time.Second, Logger: testLogger(t)})
	var pids []int
	for i := range 4 {
		a := acquire(t, p, "t"+strconv.Itoa(i))
		pids = append(pids, a.Proc.PID())
		p.Release(a, false)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	p.Shutdown(ctx)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Shutdown took %s with a 500ms deadline; the graces alone are 10s", took)
	}
	for _, pid := range pids {
		if agenttest.Running(pid) {
			t.Fatalf("agent %d still running after Shutdown", pid)
		}
	}
	if s := p.Stats(); s.Stopped[pool.StopShutdown] != 4 {
		t.Fatalf("stops = %v", s.Stopped)
	}
}

// StopBy puts every stop on the shutdown's clock: an agent given back
// after it, with a 10s exit grace, ignoring EOF and SIGTERM, still gets
// both steps (stdin closed, then SIGTERM), each cut to half of what is
// left, and is gone by the time StopBy named, not after 20s.
func TestPool_StopByFitsBothStepsOfEveryStopBeforeIt(t *testing.T) {
	var logs agenttest.Buffer
	p := newPool(t, pool.Config{Args: []string{"--ignore-term", "--no-exit-on-eof"}, ExitGrace: 10 * time.Second, Logger: zerolog.New(&logs)})
	a := acquire(t, p, "t")
	const by = 2 * time.Second
	start := time.Now()
	p.StopBy(start.Add(by))
	p.StopBy(start.Add(time.Minute)) // a later one does not move it
	p.Release(a, true)
	if !agenttest.WaitGone(a.Proc.PID(), 20*time.Second) {
		t.Fatal("the agent outlived its stop")
	}
	took := time.Since(start)
	if took < by*3/4 || took > by+3*time.Second {
		t.Errorf("the stop took %s, want about %s: both steps, each half of what was left", took.Round(time.Millisecond), by)
	}
	if !strings.Contains(logs.String(), "sending SIGTERM to its group") || !strings.Contains(logs.String(), "sending SIGKILL to its group") {
		t.Errorf("the stop skipped a step:\n%s", logs.String())
	}
	if s := p.Stats(); s.Killed != 0 {
		t.Errorf("%d agents stopped without a grace, want none", s.Killed)
	}
}

// Killing an agent on purpose is not reported as an agent that ignored
// SIGTERM.
func TestProcess_KillLogsNoFalseWarning(t *testing.T) {
	var logs agenttest.Buffer
	p := newPool(t, pool.Config{Logger: zerolog.New(&logs)})
	a := acquire(t, p, "t")
	a.Proc.Kill()
	a.Conn.Close()
	p.Release(a, true)
	for _, m := range logLines(logs.String()) {
		if m["level"] == "warn" || strings.Contains(fmt.Sprint(m["message"]), "SIGTERM") {
			t.Fatalf("a deliberate kill logged %v", m)
		}
	}
}

// Callers waiting for a slot get one in the order they came, however
// many wake at once.
func TestPool_SlotQueueIsFirstComeFirstServed(t *testing.T) {
	for round := range 5 {
		p := newPool(t, pool.Config{MaxSessions: 1})
		a := acquire(t, p, "a")
		const n = 4
		order := make(chan int, n)
		agents := make(chan *pool.Agent, n)
		for i := range n {
			go func() {
				b, err := p.Acquire(context.Background(), "w"+strconv.Itoa(i), "", nil)
				if err != nil {
					t.Error(err)
					order <- -1
					agents <- nil
					return
				}
				order <- i
				agents <- b
			}()
			eventually.Within(t, 10*time.Second, "waiter not queued", func() bool { return p.Stats().Waiting == i+1 })
		}
		p.Release(a, true)
		for want := range n {
			var got int
			select {
			case got = <-order:
			case <-time.After(20 * time.Second):
				t.Fatalf("round %d: waiter %d never got a slot", round, want)
			}
			b := <-agents
			if got != want {
				t.Fatalf("round %d: waiter %d got the slot before waiter %d", round, got, want)
			}
			p.Release(b, true) // frees the slot for the next in line
		}
	}
}

// A waiter evicts one idle agent to make room, and only one, even when it
// is woken again while that agent is still stopping.
func TestPool_WaiterEvictsOneIdleAgentWhileTheFirstIsStopping(t *testing.T) {
	p := newPool(t, pool.Config{Args: []string{"--ignore-term", "--no-exit-on-eof"}, MaxSessions: 2,
		ExitGrace: 1500 * time.Millisecond})
	x := acquire(t, p, "x")
	p.Release(x, false)
	y := acquire(t, p, "y")
	p.Release(y, false)

	got := make(chan *pool.Agent, 1)
	go func() {
		z, err := p.Acquire(context.Background(), "z", "", nil)
		if err != nil {
			t.Error(err)
		}
		got <- z
	}()
	eventually.Within(t, 10*time.Second, "no eviction for z", func() bool { return p.Stats().Evicted == 1 })

	// Others come and give up while x is still stopping: each wakes z.
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := p.Acquire(ctx, "impatient", "", nil)
		cancel()
		if err == nil {
			t.Fatal("an impatient caller got a slot ahead of z")
		}
	}
	var z *pool.Agent
	select {
	case z = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("z never got a slot")
	}
	defer p.Release(z, false)
	if s := p.Stats(); s.Evicted != 1 || p.Lookup("y") == nil {
		t.Fatalf("evictions = %d, y live = %v: want one eviction and y kept", s.Evicted, p.Lookup("y") != nil)
	}
}

// With a launcher, each agent starts through it (here a script standing
// in for a container runtime) with {workdir}, {thread} and {profile}
// substituted, and the stop command runs once the agent is stopped.
func TestPool_LauncherStartsAgentsThroughItAndRunsTheStopCommand(t *testing.T) {
	dir := t.TempDir()
	record := filepath.Join(dir, "runtime.log")
	runtime := filepath.Join(dir, "fake-runtime")
	script := "#!/bin/sh\n" +
		"echo \"$*\" >> " + record + "\n" +
		"if [ \"$1\" = run ]; then shift 5; exec \"$@\"; fi\n"
	if err := os.WriteFile(runtime, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	p := newPool(t, pool.Config{WorkDir: work, Sandbox: pool.Sandbox{
		Launcher:     []string{runtime, "run", "--name", "agent-{thread}", "-w", "{workdir}:{profile}"},
		LauncherStop: []string{runtime, "stop", "agent-{thread}"},
	}})
	a := acquire(t, p, "t1")
	if got := prompt(t, a, "hello"); got != "You said: hello" {
		t.Fatalf("answer through the launcher = %q", got)
	}
	p.Release(a, true) // stopped: the stop command follows
	eventually.Within(t, 10*time.Second, "stop command", func() bool {
		b, _ := os.ReadFile(record)
		return strings.Contains(string(b), "stop agent-t1")
	})
	b, _ := os.ReadFile(record)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	wantRun := "run --name agent-t1 -w " + filepath.Join(work, "t1") + ":default " + fakeAgent
	if len(lines) != 2 || !strings.HasPrefix(lines[0], wantRun) || lines[1] != "stop agent-t1" {
		t.Fatalf("the runtime was called with:\n%s\nwant a line starting %q, then \"stop agent-t1\"", b, wantRun)
	}
}

// A thread whose id is no name (here "chat:t1", as a broker serving
// several platforms has them) is named by ThreadName wherever its id
// would be a name: its working directory and the launcher's {thread}.
func TestPool_ThreadNameNamesTheThreadsDirectoryAndLauncherWords(t *testing.T) {
	dir := t.TempDir()
	record := filepath.Join(dir, "runtime.log")
	runtime := filepath.Join(dir, "fake-runtime")
	script := "#!/bin/sh\n" +
		"echo \"$*\" >> " + record + "\n" +
		"if [ \"$1\" = run ]; then shift 2; exec \"$@\"; fi\n"
	if err := os.WriteFile(runtime, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	p := newPool(t, pool.Config{WorkDir: work, PerThreadDir: true,
		ThreadName: func(thread string) string { return strings.ReplaceAll(thread, ":", "-") },
		Sandbox: pool.Sandbox{
			Launcher:     []string{runtime, "run", "--name=agent-{thread}"},
			LauncherStop: []string{runtime, "stop", "agent-{thread}"},
		}})
	a := acquire(t, p, "chat:t1")
	if got := prompt(t, a, "run /bin/pwd"); !strings.HasPrefix(got, filepath.Join(work, "chat-t1")+"\n") {
		t.Fatalf("the agent works in %q, want %s", got, filepath.Join(work, "chat-t1"))
	}
	p.Release(a, true)
	eventually.Within(t, 10*time.Second, "stop command", func() bool {
		b, _ := os.ReadFile(record)
		return strings.Contains(string(b), "stop agent-chat-t1")
	})
	if b, _ := os.ReadFile(record); !strings.HasPrefix(string(b), "run --name=agent-chat-t1 "+fakeAgent) {
		t.Fatalf("the runtime was called with:\n%s", b)
	}
}

// With RunAs, a broker running as root starts its agents as that user,
// in working directories given to it.
func TestPool_RunAsStartsAgentsAsAnotherUser(t *testing.T) {
	const nobody = agenttest.Nobody
	dir := agenttest.OtherUserDir(t)
	bin := filepath.Join(dir, "fakeagent")
	data, err := os.ReadFile(fakeAgent)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	p := newPool(t, pool.Config{Command: bin, WorkDir: filepath.Join(dir, "work"),
		RunAs: &syscall.Credential{Uid: nobody, Gid: nobody}})
	a := acquire(t, p, "t")
	defer p.Release(a, false)
	if got := prompt(t, a, "whoami"); got != fmt.Sprintf("uid=%d gid=%d", nobody, nobody) {
		t.Fatalf("the agent runs as %q", got)
	}
	if fi, err := os.Stat(filepath.Join(dir, "work", "t")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != nobody {
		t.Fatalf("the working directory is not the agent user's: %v", err)
	}
}

// In the sandbox an agent has a HOME of its own to write in, empty, apart
// from the broker's; a ReadWrite path inside it is still the real one.
func TestSandbox_AgentHasAPrivateWritableHome(t *testing.T) {
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil {
		t.Skip("bubblewrap is not installed")
	}
	home := t.TempDir()
	os.WriteFile(filepath.Join(home, "broker-secret"), []byte("x"), 0o600)
	kept := filepath.Join(home, ".agent-config")
	os.Mkdir(kept, 0o755)
	p := newPool(t, pool.Config{Env: []string{"PATH=/usr/bin:/bin", "HOME=" + home},
		Sandbox: pool.Sandbox{Bwrap: "bwrap", ReadWrite: []string{kept}}})
	a := acquire(t, p, "t")
	defer p.Release(a, false)
	got := prompt(t, a, "probe r:"+filepath.Join(home, "broker-secret")+" w:"+filepath.Join(home, "cache")+" w:"+filepath.Join(kept, "settings"))
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "denied") || !strings.HasSuffix(lines[1], " ok") || !strings.HasSuffix(lines[2], " ok") {
		t.Fatalf("probes in the sandbox's HOME:\n%s", got)
	}
	if _, err := os.Stat(filepath.Join(home, "cache")); err == nil {
		t.Fatal("the agent wrote into the broker's HOME")
	}
	if _, err := os.Stat(filepath.Join(kept, "settings")); err != nil {
		t.Fatal("a ReadWrite path inside HOME did not keep the agent's file")
	}
}

// A sandboxed terminal released as soon as it is made leaves nothing
// running. Bubblewrap killed while it sets up can die before its init in
// the sandbox has put --die-with-parent in force, and that init is in a
// session of its own, out of reach of the group's signals: the broker
// finds it by the mark only bubblewrap's own processes carry, and ends
// it, and with it the sandbox. The agent never sees the mark.
func TestSandbox_ATerminalReleasedAtOnceLeavesNothingRunning(t *testing.T) {
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil {
		t.Skip("bubblewrap is not installed")
	}
	home := t.TempDir()
	p := newPool(t, pool.Config{Env: []string{"PATH=/usr/bin:/bin", "HOME=" + home}, Sandbox: pool.Sandbox{Bwrap: "bwrap"}})
	a := acquire(t, p, "t")
	defer p.Release(a, false)
	if env := prompt(t, a, "env"); strings.Contains(env, "ACP_BROKER_SANDBOX") {
		t.Fatalf("the agent sees the sandbox's mark:\n%s", env)
	}
	// Each round makes eight terminals and releases them: the last ones
	// are killed within milliseconds of their start.
	for range 10 {
		if got := prompt(t, a, "terminals 8"); !strings.Contains(got, "opened 8 of 8") {
			t.Fatalf("terminals 8 answered %q", got)
		}
	}
	var left []int
	for _, pid := range processesWith("HOME=" + home) {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.HasSuffix(string(cmd), "sleep\x0030\x00") && !agenttest.WaitGone(pid, 2*time.Second) {
			left = append(left, pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if len(left) > 0 {
		t.Fatalf("released terminals' processes %v are still running", left)
	}
}

// processesWith lists the running processes whose environment holds
// the entry kv.
func processesWith(kv string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, _ := os.ReadFile("/proc/" + e.Name() + "/environ")
		for _, v := range strings.Split(string(env), "\x00") {
			if v == kv && agenttest.Running(pid) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}
