package adapter

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/acp/host"
	"acpbroker/internal/agenttest"
	"acpbroker/policy"
	"acpbroker/pool"
	"acpbroker/store"

	"github.com/rs/zerolog"
)

var fakeAgent string

func TestMain(m *testing.M) { agenttest.Main(m, &fakeAgent) }

// recorder is a Sink that keeps everything a turn reports.
type recorder struct {
	mu       sync.Mutex
	statuses []Status
	updates  []acp.Update
	notices  []Notice
	answer   func(ctx context.Context, req *acp.PermissionRequest) Answer
	asked    chan *acp.PermissionRequest
	working  chan struct{}
	done     chan Outcome
	doneN    int
	doneAt   time.Time
}

func newRecorder() *recorder {
	return &recorder{asked: make(chan *acp.PermissionRequest, 10), working: make(chan struct{}, 1), done: make(chan Outcome, 2)}
}

func (r *recorder) Status(s Status) {
	r.mu.Lock()
	r.statuses = append(r.statuses, s)
	r.mu.Unlock()
	if s.Phase == PhaseWorking {
		select {
		case r.working <- struct{}{}:
		default:
		}
	}
}
func (r *recorder) Update(u acp.Update) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.updates = append(r.updates, u)
}
func (r *recorder) Notice(n Notice) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notices = append(r.notices, n)
}
func (r *recorder) Ask(ctx context.Context, req *acp.PermissionRequest) Answer {
	r.asked <- req
	if r.answer != nil {
		return r.answer(ctx, req)
	}
	<-ctx.Done()
	return Answer{}
}
func (r *recorder) Done(o Outcome) {
	r.mu.Lock()
	r.doneN++
	r.doneAt = time.Now()
	r.mu.Unlock()
	r.done <- o
}

func (r *recorder) statusList() []Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Status(nil), r.statuses...)
}

func (r *recorder) noticeList() []Notice {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Notice(nil), r.notices...)
}

func (r *recorder) updateList() []acp.Update {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]acp.Update(nil), r.updates...)
}

func (r *recorder) wait(t *testing.T, within time.Duration) Outcome {
	t.Helper()
	select {
	case o := <-r.done:
		return o
	case <-time.After(within):
		t.Fatalf("no outcome within %s", within)
		return Outcome{}
	}
}

func (r *recorder) waitWorking(t *testing.T) {
	t.Helper()
	select {
	case <-r.working:
	case <-time.After(10 * time.Second):
		t.Fatal("turn never started working")
	}
}

type rig struct {
	t      *testing.T
	pool   *pool.Pool
	engine *Engine
}

func newRig(t *testing.T, args []string, pcfg pool.Config, cfg Config) *rig {
	t.Helper()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	pcfg.Command = fakeAgent
	pcfg.Args = args
	pcfg.WorkDir = t.TempDir()
	pcfg.Logger = log
	if pcfg.MaxSessions == 0 {
		pcfg.MaxSessions = 4
	}
	if pcfg.ExitGrace == 0 {
		pcfg.ExitGrace = 500 * time.Millisecond
	}
	cfg.Logger = log
	if cfg.CancelGrace == 0 {
		cfg.CancelGrace = 2 * time.Second
	}
	p := pool.New(pcfg)
	e := New(p, cfg)
	r := &rig{t: t, pool: p, engine: e}
	t.Cleanup(func() {
		e.Close()
		p.Close()
	})
	return r
}

func (r *rig) prompt(thread, text string) *recorder {
	r.t.Helper()
	rec := newRecorder()
	if err := r.engine.Submit(thread, &Prompt{Ref: thread, Blocks: []acp.ContentBlock{acp.TextBlock(text)}, Sink: rec}); err != nil {
		r.t.Fatalf("Submit(%q): %v", text, err)
	}
	return rec
}

func TestTurn_StreamsTheAnswerAndEndsOnce(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{})
	rec := r.prompt("t1", "hello there")
	o := rec.wait(t, 20*time.Second)
	if o.Err != nil || o.StopReason != acp.StopEndTurn {
		t.Fatalf("outcome = %+v", o)
	}
	if !strings.Contains(o.Text, "You said: hello there") {
		t.Fatalf("answer %q does not echo the prompt", o.Text)
	}
	if len(o.ToolCalls) == 0 || o.ToolCalls[0].Status != "completed" || len(o.Plan) == 0 {
		t.Fatalf("tool calls %+v / plan %+v not tracked", o.ToolCalls, o.Plan)
	}
	kinds := map[string]bool{}
	for _, u := range rec.updateList() {
		kinds[u.Kind] = true
	}
	for _, k := range []string{acp.UpdateMessageChunk, acp.UpdateThoughtChunk, acp.UpdateToolCall, acp.UpdateToolCallUpdate, acp.UpdatePlan} {
		if !kinds[k] {
			t.Errorf("sink never saw a %s update", k)
		}
	}
	if rec.doneN != 1 {
		t.Fatalf("Done called %d times", rec.doneN)
	}
}

// The ceiling abandons prompt 1; prompts 2 and 3 each get their own answer
// and never the abandoned turn's output.
func TestTurn_StaleAnswerNeverEndsTheNextTurn(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{TurnTimeout: time.Second, CancelGrace: 300 * time.Millisecond})
	first := r.prompt("t", "late 1500ms STALE-ANSWER")
	second := r.prompt("t", "stream 3")
	third := r.prompt("t", "stream 2")
	o1 := first.wait(t, 20*time.Second)
	if !errors.Is(o1.Err, ErrTimeout) {
		t.Fatalf("first outcome = %+v, want a timeout", o1)
	}
	o2 := second.wait(t, 20*time.Second)
	o3 := third.wait(t, 20*time.Second)
	if o2.Err != nil || o2.Text != "chunk 1\nchunk 2\nchunk 3\n" {
		t.Fatalf("second outcome = %+v (text %q)", o2, o2.Text)
	}
	if o3.Err != nil || o3.Text != "chunk 1\nchunk 2\n" {
		t.Fatalf("third outcome = %+v (text %q)", o3, o3.Text)
	}
	for _, o := range []Outcome{o2, o3} {
		if strings.Contains(o.Text, "STALE") {
			t.Fatalf("a later turn saw the abandoned turn's output: %q", o.Text)
		}
	}
	if s := r.engine.Stats().Pool.Conn; s.PendingRequests != 0 || s.PendingPermissions != 0 {
		t.Fatalf("bookkeeping left: %+v", s)
	}
}

// A response that comes after its turn ended never ends the next turn:
// an agent that sends its response twice, the second while the next
// prompt streams, leaves the following turns their own answers, exactly;
// the duplicate is dropped and counted as stale.
func TestTurn_DuplicateResponseNeverEndsTheNextTurn(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{})
	first := r.prompt("t", "answer-twice 300ms")
	second := r.prompt("t", "stream 4 150ms")
	third := r.prompt("t", "stream 2")
	for i, want := range []string{"once", "chunk 1\nchunk 2\nchunk 3\nchunk 4\n", "chunk 1\nchunk 2\n"} {
		o := []*recorder{first, second, third}[i].wait(t, 20*time.Second)
		if o.Err != nil || o.Text != want || o.StopReason != acp.StopEndTurn {
			t.Fatalf("turn %d: outcome %+v (text %q), want %q", i+1, o, o.Text, want)
		}
	}
	s := r.engine.Stats().Pool.Conn
	if s.StaleResponses != 1 {
		t.Fatalf("stale responses = %d, want the one duplicate", s.StaleResponses)
	}
	if s.PendingRequests != 0 || s.Subscribers != 0 {
		t.Fatalf("bookkeeping left: %+v", s)
	}
}

// turn.timeout is consumed: with 2s a hung agent fails in about 2s.
func TestTurn_TimeoutKnobEndsAHungTurn(t *testing.T) {
	grace := 500 * time.Millisecond
	r := newRig(t, nil, pool.Config{}, Config{TurnTimeout: 2 * time.Second, CancelGrace: grace})
	rec := r.prompt("t", "ignore-cancel")
	o := rec.wait(t, 20*time.Second)
	if !errors.Is(o.Err, ErrTimeout) || o.Err.Error() != "timed out after 2s" {
		t.Fatalf("outcome err = %v, want \"timed out after 2s\"", o.Err)
	}
	// Start-up is part of Elapsed; the ceiling counts from the prompt.
	if o.Elapsed < 2*time.Second || o.Elapsed > 2*time.Second+grace+3*time.Second {
		t.Fatalf("elapsed %s, want about 2s + grace %s", o.Elapsed, grace)
	}
	if !strings.Contains(o.Text, "working") {
		t.Fatalf("partial answer lost: %q", o.Text)
	}
}

// turn.cancel_grace is consumed: an agent ignoring cancel is killed after it.
func TestTurn_CancelGraceKnobBoundsTheWaitForAnUnresponsiveAgent(t *testing.T) {
	for _, grace := range []time.Duration{200 * time.Millisecond, 1500 * time.Millisecond} {
		r := newRig(t, nil, pool.Config{}, Config{CancelGrace: grace})
		rec := r.prompt("t", "ignore-cancel")
		rec.waitWorking(t)
		pid := r.pool.Lookup("t").Proc.PID()
		start := time.Now()
		r.engine.Cancel("t", CancelledBy("tester"))
		o := rec.wait(t, 20*time.Second)
		took := time.Since(start)
		if o.Err == nil || o.Err.Error() != "cancelled by tester" {
			t.Fatalf("outcome err = %v", o.Err)
		}
		if took < grace || took > grace+2*time.Second {
			t.Fatalf("grace %s: the turn ended after %s", grace, took)
		}
		waitGone(t, pid)
	}
}

// An agent that ignores the cancel, its closed stdin and SIGTERM is
// stopped in full: the turn ends after turn.cancel_grace, then the
// agent's stdin is closed, SIGTERM and, an exit grace later, SIGKILL go
// to its group; it is gone about cancel_grace + 2 × exit_grace after the
// cancel, not before (it had its chance to save its session), nor long
// after.
func TestTurn_AbandonedAgentIsStoppedStepByStep(t *testing.T) {
	const cancelGrace, exitGrace = 300 * time.Millisecond, 400 * time.Millisecond
	r := newRig(t, []string{"--ignore-term", "--no-exit-on-eof"}, pool.Config{ExitGrace: exitGrace}, Config{CancelGrace: cancelGrace})
	rec := r.prompt("t", "ignore-cancel")
	rec.waitWorking(t)
	pid := r.pool.Lookup("t").Proc.PID()
	start := time.Now()
	r.engine.Cancel("t", CancelledBy("tester"))
	rec.wait(t, 20*time.Second)
	ended := time.Since(start)
	waitGone(t, pid)
	gone := time.Since(start)
	if ended < cancelGrace || ended > cancelGrace+2*time.Second {
		t.Fatalf("the turn ended %s after the cancel, want about %s", ended, cancelGrace)
	}
	// Not earlier than the steps allow; the upper bound only shows the
	// stop ends (a loaded machine stretches it).
	if want := cancelGrace + 2*exitGrace; gone < want || gone > want+8*time.Second {
		t.Fatalf("the agent was gone %s after the cancel, want about %s", gone, want)
	}
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	if !agenttest.WaitGone(pid, 10*time.Second) {
		t.Fatalf("process %d still running", pid)
	}
}

func TestTurn_CancelReachesTheAgentAndKeepsAHonestProcess(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{})
	rec := r.prompt("t", "hang")
	rec.waitWorking(t)
	pid := r.pool.Lookup("t").Proc.PID()
	start := time.Now()
	r.engine.Cancel("t", CancelledBy("alice"))
	o := rec.wait(t, 10*time.Second)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("cancel took %s, want under a second", took)
	}
	if o.Err == nil || o.Err.Error() != "cancelled by alice" {
		t.Fatalf("outcome = %+v", o)
	}
	next := r.prompt("t", "stream 1")
	if o := next.wait(t, 10*time.Second); o.Err != nil || o.Text != "chunk 1\n" {
		t.Fatalf("next turn = %+v", o)
	}
	if a := r.pool.Lookup("t"); a == nil || a.Proc.PID() != pid {
		t.Fatal("an agent that answered the cancel was replaced")
	}
}

func TestTurn_AgentCrashIsReportedAtOnceWithStatusAndStderr(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{TurnTimeout: time.Minute})
	rec := r.prompt("t", "crash 3")
	o := rec.wait(t, 10*time.Second)
	if !errors.Is(o.Err, ErrAgentExited) {
		t.Fatalf("outcome = %+v", o)
	}
	msg := o.Err.Error()
	if !strings.Contains(msg, "status 3") || !strings.Contains(msg, "simulated crash") {
		t.Fatalf("cause %q lacks the exit status or stderr tail", msg)
	}
	// The exit itself stays in the cause, typed.
	if exit, ok := errors.AsType[*pool.ExitError](o.Err); !ok || exit.Code != 3 || !strings.Contains(exit.Tail, "simulated crash") {
		t.Fatalf("cause %#v does not carry the agent's exit", o.Err)
	}
	if o.Elapsed > 10*time.Second {
		t.Fatalf("crash noticed after %s", o.Elapsed)
	}
	// The thread carries on with a fresh process.
	if o := r.prompt("t", "stream 1").wait(t, 20*time.Second); o.Err != nil {
		t.Fatalf("turn after crash: %+v", o)
	}
}

// A long silent tool run that is alive is not an error.
func TestTurn_SilentButAliveIsNotAFailure(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{LivenessInterval: 50 * time.Millisecond, TurnTimeout: 30 * time.Second})
	o := r.prompt("t", "silent 1500ms").wait(t, 20*time.Second)
	if o.Err != nil || !strings.Contains(o.Text, "done after silence") {
		t.Fatalf("outcome = %+v", o)
	}
}

func TestTurn_PermissionModes(t *testing.T) {
	t.Run("allow", func(t *testing.T) {
		r := newRig(t, nil, pool.Config{}, Config{PermissionMode: PermissionAllow})
		rec := r.prompt("t", "permission")
		o := rec.wait(t, 20*time.Second)
		if o.Err != nil || !strings.Contains(o.Text, "permission granted: allow") {
			t.Fatalf("outcome = %+v", o)
		}
		if n := rec.noticeList(); len(n) != 1 || !reflect.DeepEqual(n[0], PermissionDecided{Tool: "Run rm -rf build", Action: policy.Allow, By: Decider{Setting: "turn.permission_mode", Mode: PermissionAllow}}) {
			t.Fatalf("notices = %+v", n)
		}
	})
	t.Run("deny", func(t *testing.T) {
		r := newRig(t, nil, pool.Config{}, Config{PermissionMode: PermissionDeny})
		o := r.prompt("t", "permission").wait(t, 20*time.Second)
		if o.Err != nil || !strings.Contains(o.Text, "permission denied: reject") {
			t.Fatalf("outcome = %+v", o)
		}
	})
	t.Run("ask", func(t *testing.T) {
		r := newRig(t, nil, pool.Config{}, Config{})
		rec := newRecorder()
		rec.answer = func(ctx context.Context, req *acp.PermissionRequest) Answer {
			return Answer{Outcome: acp.PermissionOutcome{OptionID: "allow-always"}, By: "u1", ByName: "alice"}
		}
		r.engine.Submit("t", &Prompt{Blocks: []acp.ContentBlock{acp.TextBlock("permission")}, Sink: rec})
		o := rec.wait(t, 20*time.Second)
		if o.Err != nil || !strings.Contains(o.Text, "permission granted: allow-always") {
			t.Fatalf("outcome = %+v", o)
		}
	})
}

// turn.permission_timeout is consumed: nobody answers, and after ~1s the
// agent is told "cancelled" (fail closed) and the request's slot is freed.
func TestTurn_PermissionTimeoutFailsClosed(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{PermissionTimeout: time.Second})
	rec := r.prompt("t", "permission")
	var asked time.Time
	select {
	case <-rec.asked:
		asked = time.Now()
	case <-time.After(20 * time.Second):
		t.Fatal("never asked")
	}
	o := rec.wait(t, 20*time.Second)
	took := time.Since(asked)
	// The agent was told "cancelled" and went on without the tool.
	if o.Err != nil || !strings.Contains(o.Text, "permission cancelled") {
		t.Fatalf("outcome = %+v, want the agent told cancelled", o)
	}
	if took < time.Second || took > 4*time.Second {
		t.Fatalf("permission timed out after %s, want ~1s", took)
	}
	if n := rec.noticeList(); len(n) == 0 || n[0] != Notice(PermissionTimedOut{Tool: "Run rm -rf build", After: time.Second}) {
		t.Fatalf("notices = %+v", n)
	}
	if s := r.engine.Stats().Pool.Conn; s.PendingPermissions != 0 {
		t.Fatalf("pending permissions = %d", s.PendingPermissions)
	}
}

func TestTurn_QueueKeepsOrderAndRefusesOverflow(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{QueueSize: 2})
	first := r.prompt("t", "slow 300ms 2")
	first.waitWorking(t)
	a := r.prompt("t", "stream 1")
	b := r.prompt("t", "stream 2")
	err := r.engine.Submit("t", &Prompt{Blocks: []acp.ContentBlock{acp.TextBlock("x")}, Sink: newRecorder()})
	if !errors.Is(err, ErrQueueFull) {
		t.Fatalf("third queued prompt: err = %v, want ErrQueueFull", err)
	}
	if st := a.statusList(); len(st) == 0 || st[0].Phase != PhaseQueued || st[0].Position != 1 {
		t.Fatalf("queued status = %+v", st)
	}
	o0, oa, ob := first.wait(t, 20*time.Second), a.wait(t, 20*time.Second), b.wait(t, 20*time.Second)
	if o0.Err != nil || oa.Text != "chunk 1\n" || ob.Text != "chunk 1\nchunk 2\n" {
		t.Fatalf("outcomes: %+v / %+v / %+v", o0, oa, ob)
	}
}

func TestTurn_ShutdownEndsRunningAndQueuedTurnsWithACause(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{})
	running := r.prompt("t", "hang")
	running.waitWorking(t)
	queued := r.prompt("t", "stream 1")
	r.engine.Close()
	for _, rec := range []*recorder{running, queued} {
		if o := rec.wait(t, 10*time.Second); !errors.Is(o.Err, ErrShutdown) {
			t.Fatalf("outcome = %+v, want broker shutting down", o)
		}
	}
	if err := r.engine.Submit("t", &Prompt{Sink: newRecorder()}); !errors.Is(err, ErrShutdown) {
		t.Fatalf("Submit after Close = %v", err)
	}
}

// Every abandon cleans up: after 1,000 abandoned turns (half of them with a
// permission request open), no bookkeeping is left.
func TestTurn_ThousandAbandonedTurnsLeaveNothingPending(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	r := newRig(t, nil, pool.Config{}, Config{})
	for i := range 1000 {
		text := "hang"
		if i%2 == 1 {
			text = "permission"
		}
		rec := r.prompt("t", text)
		if i%2 == 1 {
			<-rec.asked
		} else {
			rec.waitWorking(t)
		}
		r.engine.Cancel("t", CancelledBy("tester"))
		if o := rec.wait(t, 10*time.Second); o.Err == nil {
			t.Fatalf("turn %d: outcome %+v", i, o)
		}
	}
	s := r.engine.Stats()
	if s.Pool.Conn.PendingRequests != 0 || s.Pool.Conn.PendingPermissions != 0 || s.Pool.Conn.Subscribers != 0 {
		t.Fatalf("bookkeeping left after 1000 abandoned turns: %+v", s.Pool.Conn)
	}
	if s.Pool.Live != 1 {
		t.Fatalf("live agents = %d, want the one honest agent reused", s.Pool.Live)
	}
	waitThreads(t, r.engine, 0)
}

func waitThreads(t *testing.T, e *Engine, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for e.Stats().Threads != want {
		if time.Now().After(deadline) {
			t.Fatalf("threads = %d, want %d", e.Stats().Threads, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTurn_BusyPoolQueuesForASlotWithAStatus(t *testing.T) {
	r := newRig(t, nil, pool.Config{MaxSessions: 1}, Config{})
	a := r.prompt("a", "slow 500ms 4") // longer than the pool's 1s wait notice
	a.waitWorking(t)
	b := r.prompt("b", "stream 1")
	if o := a.wait(t, 20*time.Second); o.Err != nil {
		t.Fatalf("a: %+v", o)
	}
	if o := b.wait(t, 20*time.Second); o.Err != nil || o.Text != "chunk 1\n" {
		t.Fatalf("b: %+v", o)
	}
	if st := b.statusList(); st[0].Phase != PhaseWaitingForSlot {
		t.Fatalf("b statuses = %+v", st)
	}
}

// pool.slot_wait is consumed: a prompt waiting for a busy pool gives up
// after it.
func TestTurn_SlotWaitKnobBoundsTheWait(t *testing.T) {
	r := newRig(t, nil, pool.Config{MaxSessions: 1}, Config{SlotWait: time.Second})
	a := r.prompt("a", "hang")
	a.waitWorking(t)
	start := time.Now()
	o := r.prompt("b", "stream 1").wait(t, 10*time.Second)
	if !errors.Is(o.Err, ErrNoSlot) || time.Since(start) > 4*time.Second || time.Since(start) < time.Second {
		t.Fatalf("outcome %v after %s, want no slot after ~1s", o.Err, time.Since(start))
	}
	r.engine.Cancel("a", CancelledBy("tester"))
	a.wait(t, 10*time.Second)
}

// The journal sees every turn's life: queued, running with its open tool
// calls, and its final state and cause.
func TestTurn_JournalRecordsEveryTurn(t *testing.T) {
	st, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := newRig(t, nil, pool.Config{}, Config{Journal: st, TurnTimeout: time.Second, CancelGrace: 200 * time.Millisecond})
	done := r.prompt("a", "hello")
	stuck := r.prompt("b", "tool-stuck")
	done.wait(t, 20*time.Second)
	stuck.waitWorking(t)
	deadline := time.Now().Add(5 * time.Second)
	for tr, _ := st.Turn(2); tr.Tools["call-s"] == nil || tr.Tools["call-s"].Status != "in_progress"; tr, _ = st.Turn(2) {
		if time.Now().After(deadline) {
			t.Fatalf("running turn's tool call not recorded: %+v", tr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	o := stuck.wait(t, 20*time.Second)
	if !errors.Is(o.Err, ErrTimeout) {
		t.Fatalf("outcome = %+v", o)
	}
	cancelled := r.prompt("c", "hang")
	cancelled.waitWorking(t)
	r.engine.Cancel("c", CancelledBy("carol"))
	cancelled.wait(t, 20*time.Second)
	st.Flush()
	want := map[uint64]struct {
		state store.State
		cause string
	}{1: {store.Done, ""}, 2: {store.Failed, "timed out after 1s"}, 3: {store.Cancelled, "cancelled by carol"}}
	for id, w := range want {
		tr, ok := st.Turn(id)
		if !ok || tr.State != w.state || tr.Cause != w.cause || tr.Started.IsZero() || tr.Ended.IsZero() || tr.Tools != nil {
			t.Fatalf("turn %d = %+v, want %s %q", id, tr, w.state, w.cause)
		}
	}
	if s := st.Stats(); s.ActiveTurns != 0 || s.FinishedTurns != 3 {
		t.Fatalf("store stats = %+v", s)
	}
}

// A turn cancelled while a permission request is open sends session/cancel
// before it answers the request "cancelled": an agent that would carry on
// after a refused tool call (claude-agent-acp) sees the cancel first and
// stops.
func TestTurn_CancelReachesTheAgentBeforeThePermissionAnswer(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{})
	for i := range 20 {
		rec := r.prompt("t", "permission")
		<-rec.asked
		r.engine.Cancel("t", CancelledBy("tester"))
		o := rec.wait(t, 20*time.Second)
		if strings.Contains(o.Text, "before session/cancel") {
			t.Fatalf("turn %d: the agent got the permission answer before the cancel: %q", i, o.Text)
		}
	}
}

// agent.restart_after_cancel: an agent that answered the cancel is still
// replaced, and the thread's next prompt resumes the session in the new
// process.
func TestTurn_RestartAfterCancelResumesInAFreshProcess(t *testing.T) {
	r := newRig(t, []string{"--load-session"}, pool.Config{}, Config{RestartAfterCancel: true})
	rec := r.prompt("t", "hang")
	rec.waitWorking(t)
	first := r.pool.Lookup("t")
	r.engine.Cancel("t", CancelledBy("tester"))
	rec.wait(t, 10*time.Second)
	waitGone(t, first.Proc.PID())
	o := r.prompt("t", "next").wait(t, 20*time.Second)
	if o.Err != nil || !strings.HasPrefix(o.Text, "(resumed) You said: next") {
		t.Fatalf("next turn = %+v", o)
	}
	if a := r.pool.Lookup("t"); a == nil || a.Proc.PID() == first.Proc.PID() || a.SessionID != first.SessionID {
		t.Fatal("the next turn did not run on a fresh process with the same session")
	}
}

// A thread whose agent process went away resumes its session where the
// agent can load sessions; where it cannot, the thread is told once that
// the conversation starts afresh.
func TestTurn_ALostSessionIsSaidOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		notice bool
	}{{"resumable", []string{"--load-session"}, false}, {"not resumable", nil, true}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, tc.args, pool.Config{}, Config{})
			r.prompt("t", "hello").wait(t, 20*time.Second)
			r.pool.Discard("t") // the process is gone (crash, idle stop, restart)
			for i, want := range []bool{tc.notice, false} {
				rec := r.prompt("t", "again")
				o := rec.wait(t, 20*time.Second)
				told := false
				for _, n := range rec.noticeList() {
					_, lost := n.(SessionLost)
					told = told || lost
				}
				if o.Err != nil || told != want {
					t.Fatalf("turn %d after the loss: told=%v (want %v), outcome %+v", i+1, told, want, o)
				}
			}
		})
	}
}

// An agent that answers and exits at once has answered: when the answer
// and the exit are both there when the loop looks, the answer wins.
func TestTurn_AnswerWinsOverAnExitThatCameWithIt(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{TurnTimeout: time.Minute})
	r.engine.loopHook = func(*Prompt) {
		// Let the exit and the answer both be ready before each select.
		if a := r.pool.Lookup("t"); a != nil {
			select {
			case <-a.Proc.Reaped():
			case <-time.After(5 * time.Second):
			}
		}
	}
	for i := range 20 {
		o := r.prompt("t", "answer-exit 0").wait(t, 20*time.Second)
		if o.Err != nil || o.StopReason != "end_turn" || o.Text != "done" {
			t.Fatalf("turn %d: outcome = %+v, want the answer", i, o)
		}
	}
}

// A prompt whose agent waits for an agent host with room says so, as it
// says it waits for a slot, and is answered once a host takes it.
func TestTurn_WaitForAnAgentHostHasAStatusOfItsOwn(t *testing.T) {
	room := make(chan struct{})
	dir := t.TempDir()
	remote := func(ctx context.Context, thread string, prof *pool.Profile, onWait func()) (pool.Remote, error) {
		onWait()
		select {
		case <-room:
		case <-ctx.Done():
			return pool.Remote{}, context.Cause(ctx)
		}
		proc, err := pool.Exec(pool.ProcessSpec{Command: prof.Command, Args: prof.Args, Dir: dir, Env: []string{}, Logger: zerolog.Nop()})
		if err != nil {
			return pool.Remote{}, err
		}
		return pool.Remote{Proc: proc, Host: host.New(host.Options{}), Dir: dir, Where: "host-1"}, nil
	}
	r := newRig(t, nil, pool.Config{Remote: remote}, Config{})
	rec := r.prompt("t1", "stream 1")
	deadline := time.Now().Add(10 * time.Second)
	for len(rec.statusList()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no status while waiting for an agent host")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := rec.statusList(); st[0].Phase != PhaseWaitingForHost {
		t.Fatalf("statuses = %+v, want waiting for a host first", st)
	}
	close(room)
	if o := rec.wait(t, 20*time.Second); o.Err != nil || o.Text != "chunk 1\n" {
		t.Fatalf("outcome: %+v", o)
	}
	if st := r.engine.Status("t1"); st.Where != "host-1" {
		t.Fatalf("status names host %q, want host-1", st.Where)
	}
}
