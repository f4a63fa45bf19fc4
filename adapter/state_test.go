package adapter

import (
	"errors"
	"slices"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/pool"
)

// awaitState waits until thread's running turn is in state want.
func awaitState(t *testing.T, e *Engine, thread string, want TurnState) ThreadStatus {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := e.Status(thread)
		if s.Turn == want {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %s: turn %q, want %q", thread, s.Turn, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Status says what each thread's running turn is doing: streaming, waiting
// for a person to answer a permission request or a question, waiting for
// an agent slot, cancelling (for as long as the agent takes to answer the
// cancel); and nothing once it has ended. Threads lists the threads with
// a turn running or queued.
func TestStatus_SaysWhatTheTurnIsDoing(t *testing.T) {
	r := newRig(t, nil, pool.Config{MaxSessions: 3, WaitNotice: 50 * time.Millisecond}, Config{CancelGrace: 2 * time.Second})
	e := r.engine

	streaming := r.prompt("streaming", "hang")
	streaming.waitWorking(t)
	s := awaitState(t, e, "streaming", TurnStreaming)
	if !s.Busy || s.TurnStarted.IsZero() || s.PID == 0 {
		t.Errorf("a streaming turn: %+v", s)
	}
	queued := r.prompt("streaming", "stream 1")

	permission := r.prompt("permission", "permission")
	<-permission.asked
	awaitState(t, e, "permission", TurnPermission)

	q := r.ask("question", "elicit-form", nil)
	q.question(t)
	awaitState(t, e, "question", TurnQuestion)

	slot := r.prompt("slot", "stream 1")
	awaitState(t, e, "slot", TurnWaitingForSlot)

	if got, want := sorted(e.Threads()), []string{"permission", "question", "slot", "streaming"}; !slices.Equal(got, want) {
		t.Errorf("Threads = %v, want %v", got, want)
	}
	if s := e.Status("streaming"); s.Queued != 1 {
		t.Errorf("the streaming thread has %d queued, want 1", s.Queued)
	}

	// An agent that ignores the cancel keeps its turn cancelling for the
	// grace.
	ignoring := r.prompt("permission-2", "ignore-cancel")
	e.Cancel("permission", CancelledBy("test"))
	permission.wait(t, 20*time.Second)
	// The slot that frees takes the waiting prompt.
	slot.wait(t, 20*time.Second)
	awaitState(t, e, "permission-2", TurnStreaming)
	e.Cancel("permission-2", CancelledBy("test"))
	awaitState(t, e, "permission-2", TurnCancelling)
	if o := ignoring.wait(t, 20*time.Second); !errors.Is(o.Err, ErrCancelled) {
		t.Errorf("the ignoring turn ended %+v", o)
	}
	if s := e.Status("permission-2"); s.Turn != "" || s.Busy {
		t.Errorf("an ended turn: %+v", s)
	}
	e.Cancel("streaming", CancelledBy("test"))
	streaming.wait(t, 20*time.Second)
	queued.wait(t, 20*time.Second)
	e.Cancel("question", CancelledBy("test"))
	q.wait(t, 20*time.Second)
}

func sorted(s []string) []string {
	slices.Sort(s)
	return s
}

// statusAtDone is a recorder that asks the engine for its thread's
// status when it is told the turn ended, as a chat platform may.
type statusAtDone struct {
	*recorder
	e      *Engine
	thread string
	seen   chan ThreadStatus
}

func (s *statusAtDone) Done(o Outcome) {
	s.seen <- s.e.Status(s.thread)
	s.recorder.Done(o)
}

// A turn is over for whoever is told it ended: the thread's status then
// says nothing is running, though the engine's worker has not let the
// turn go yet.
func TestStatus_ATurnToldEndedIsNotRunning(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{})
	s := &statusAtDone{recorder: newRecorder(), e: r.engine, thread: "t1", seen: make(chan ThreadStatus, 1)}
	if err := r.engine.Submit("t1", &Prompt{Ref: "t1", Blocks: []acp.ContentBlock{acp.TextBlock("hello")}, Sink: s}); err != nil {
		t.Fatal(err)
	}
	s.wait(t, 20*time.Second)
	if st := <-s.seen; st.Busy || st.Turn != "" {
		t.Fatalf("told the turn ended, the status says %+v", st)
	}
}
