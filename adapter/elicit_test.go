package adapter

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/pool"
)

// questioner is a recorder that also answers questions.
type questioner struct {
	*recorder
	questions chan *acp.ElicitationRequest
	reply     func(ctx context.Context, req *acp.ElicitationRequest) ElicitAnswer
	ended     chan error // the cause each question's wait ended with
}

var _ Elicitor = (*questioner)(nil)

func (q *questioner) Elicit(ctx context.Context, req *acp.ElicitationRequest) ElicitAnswer {
	q.questions <- req
	if q.reply != nil {
		return q.reply(ctx, req)
	}
	<-ctx.Done()
	q.ended <- context.Cause(ctx)
	return ElicitAnswer{Result: acp.ElicitationResult{Action: acp.ActionAccept}, By: "u1"}
}

func (r *rig) ask(thread, text string, reply func(context.Context, *acp.ElicitationRequest) ElicitAnswer) *questioner {
	r.t.Helper()
	q := &questioner{recorder: newRecorder(), questions: make(chan *acp.ElicitationRequest, 4), reply: reply, ended: make(chan error, 4)}
	if err := r.engine.Submit(thread, &Prompt{Ref: thread, Blocks: []acp.ContentBlock{acp.TextBlock(text)}, Sink: q}); err != nil {
		r.t.Fatalf("Submit(%q): %v", text, err)
	}
	return q
}

// unaskable reports whether n declines question for its fields, each
// given as "label (type)".
func unaskable(n Notice, question string, fields ...string) bool {
	u, ok := n.(QuestionUnaskable)
	if !ok || u.Question != question || len(u.Fields) != len(fields) {
		return false
	}
	for i, f := range fields {
		if u.Fields[i].Label()+" ("+u.Fields[i].Type+")" != f {
			return false
		}
	}
	return true
}

func (q *questioner) question(t *testing.T) *acp.ElicitationRequest {
	t.Helper()
	select {
	case req := <-q.questions:
		return req
	case <-time.After(20 * time.Second):
		t.Fatal("the question never reached the Sink")
		return nil
	}
}

// A form's answer reaches the agent as typed content; who answered is
// counted with the action.
func TestElicit_FormAnswerReachesTheAgent(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{})
	q := r.ask("t", "elicit-form", func(ctx context.Context, req *acp.ElicitationRequest) ElicitAnswer {
		return ElicitAnswer{Result: acp.ElicitationResult{Action: acp.ActionAccept,
			Content: map[string]any{"name": "v2", "count": int64(3), "colour": "blue", "ship": true}}, By: "u1", ByName: "alice"}
	})
	req := q.question(t)
	if req.Mode != acp.ElicitForm || req.Message != "Tell me about the release" || len(req.Schema.Fields) != 4 {
		t.Fatalf("question = %+v", req)
	}
	o := q.wait(t, 20*time.Second)
	if want := `answer: accept {"colour":"blue","count":3,"name":"v2","ship":true}`; o.Err != nil || !strings.Contains(o.Text, want) {
		t.Fatalf("outcome %+v, want %s", o, want)
	}
	s := r.engine.Stats()
	if s.Elicitations[DecisionClass{Outcome: acp.ActionAccept, Via: ViaUser}] != 1 || s.Pool.Conn.PendingElicitations != 0 {
		t.Fatalf("stats: %+v, %+v", s.Elicitations, s.Pool.Conn)
	}
}

// No answer within turn.permission_timeout is "cancel", and the thread is
// told; the watchdog's accounting of open questions returns to zero.
func TestElicit_TimeoutAnswersCancel(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{PermissionTimeout: time.Second})
	q := r.ask("t", "elicit-url", nil)
	q.question(t)
	if cause := <-q.ended; !strings.Contains(cause.Error(), "no answer within 1s") {
		t.Fatalf("the wait ended with %v", cause)
	}
	o := q.wait(t, 20*time.Second)
	if o.Err != nil || !strings.Contains(o.Text, "answer: cancel") {
		t.Fatalf("outcome %+v", o)
	}
	if n := q.noticeList(); len(n) != 1 || n[0] != Notice(QuestionTimedOut{Question: "Sign in to the tracker", After: time.Second}) {
		t.Fatalf("notices %+v", n)
	}
	if s := r.engine.Stats(); s.Elicitations[DecisionClass{Outcome: acp.ActionCancel, Via: ViaTimeout}] != 1 {
		t.Fatalf("counted %v", s.Elicitations)
	}
}

// A cancelled turn answers its open question "cancel" before it gives up
// on the prompt: the agent, which waits for the answer however long,
// ends its turn "cancelled" within the grace and is kept.
func TestElicit_CancelledTurnAnswersCancelFirst(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{})
	q := r.ask("t", "elicit-form", nil)
	q.question(t)
	r.engine.Cancel("t", CancelledBy("tester"))
	if cause := <-q.ended; !errors.Is(cause, ErrCancelled) {
		t.Fatalf("the wait ended with %v", cause)
	}
	o := q.wait(t, 20*time.Second)
	if !errors.Is(o.Err, ErrCancelled) || !strings.Contains(o.Text, "answer: cancel") {
		t.Fatalf("outcome %+v, want cancelled with the agent told cancel", o)
	}
	next := r.prompt("t", "stream 1")
	if o := next.wait(t, 20*time.Second); o.Err != nil {
		t.Fatal(o.Err)
	}
	s := r.engine.Stats()
	if s.Pool.Spawned != 1 || s.Pool.Killed != 0 {
		t.Fatalf("pool %+v: the agent answered the cancel and should be kept", s.Pool)
	}
	// The connection answers an abandoned turn's question itself; the
	// question's own wait, which counts it, ends just after: soon.
	deadline := time.Now().Add(5 * time.Second)
	for s.Elicitations[DecisionClass{Outcome: acp.ActionCancel, Via: ViaCancelled}] != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("counted %v", s.Elicitations)
		}
		time.Sleep(10 * time.Millisecond)
		s = r.engine.Stats()
	}
}

// $/cancel_request from the agent ends the question's wait; the agent gets
// -32800 and the question is counted cancelled.
func TestElicit_AgentWithdrawsTheQuestion(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{})
	q := r.ask("t", "elicit-cancel-request 200ms", nil)
	q.question(t)
	if cause := <-q.ended; !errors.Is(cause, acp.ErrRequestCancelled) {
		t.Fatalf("the wait ended with %v", cause)
	}
	if o := q.wait(t, 20*time.Second); o.Err != nil || !strings.Contains(o.Text, "answer: error -32800") {
		t.Fatalf("outcome %+v", o)
	}
}

// A form with a field no chat can ask is declined without asking, and a
// Sink that takes no questions has every question declined; the thread is
// told either way.
func TestElicit_UnaskableFormsAreDeclined(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{})
	q := r.ask("t", "elicit-odd", nil)
	o := q.wait(t, 20*time.Second)
	if o.Err != nil || !strings.Contains(o.Text, "answer: decline") || len(q.questions) != 0 {
		t.Fatalf("outcome %+v", o)
	}
	if n := q.noticeList(); len(n) != 1 || !unaskable(n[0], "Where do you live?", "address (object)") {
		t.Fatalf("notices %+v", n)
	}
	rec := r.prompt("t", "elicit-form")
	o = rec.wait(t, 20*time.Second)
	if o.Err != nil || !strings.Contains(o.Text, "answer: decline") {
		t.Fatalf("outcome %+v", o)
	}
	if n := rec.noticeList(); len(n) != 1 || n[0] != Notice(QuestionUnanswerable{Question: "Tell me about the release"}) {
		t.Fatalf("notices %+v", n)
	}
}

// An answer that does not fit the form is never passed on: "cancel".
func TestElicit_AnswerThatDoesNotFitIsCancel(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{})
	q := r.ask("t", "elicit-form", func(ctx context.Context, req *acp.ElicitationRequest) ElicitAnswer {
		return ElicitAnswer{Result: acp.ElicitationResult{Action: acp.ActionAccept, Content: map[string]any{"count": int64(3)}}, By: "u1"}
	})
	if o := q.wait(t, 20*time.Second); o.Err != nil || !strings.Contains(o.Text, "answer: cancel") {
		t.Fatalf("outcome %+v", o)
	}
}

// Abandoned turns with a question open leave nothing behind.
func TestElicit_AbandonedTurnsLeaveNoQuestionOpen(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{})
	for range 50 {
		q := r.ask("t", "elicit-url", nil)
		q.question(t)
		r.engine.Cancel("t", CancelledBy("tester"))
		if o := q.wait(t, 10*time.Second); !errors.Is(o.Err, ErrCancelled) {
			t.Fatalf("outcome %+v", o)
		}
	}
	waitThreads(t, r.engine, 0)
	// A request is counted out just after its answer is written, which
	// the agent may act on first: the counts return to zero, soon.
	deadline := time.Now().Add(5 * time.Second)
	s := r.engine.Stats()
	for c := s.Pool.Conn; c.PendingElicitations != 0 || c.PendingRequests != 0 || c.AgentRequests != 0 || c.Subscribers != 0; c = s.Pool.Conn {
		if time.Now().After(deadline) {
			t.Fatalf("bookkeeping left: %+v", c)
		}
		time.Sleep(10 * time.Millisecond)
		s = r.engine.Stats()
	}
	if s.Pool.Spawned != 1 {
		t.Fatalf("spawned %d agents, want the one honest agent kept", s.Pool.Spawned)
	}
}

// A notice names a question by its message, or by its form's title when
// it has no message.
func TestQuestion_IsTheMessageElseTheFormsTitle(t *testing.T) {
	form := &acp.ElicitationSchema{Title: "Release"}
	for _, c := range []struct {
		req  acp.ElicitationRequest
		want string
	}{
		{acp.ElicitationRequest{Message: "Which tag?", Schema: form}, "Which tag?"},
		{acp.ElicitationRequest{Message: " \n", Schema: form}, "Release"},
		{acp.ElicitationRequest{Message: " \n"}, " \n"},
	} {
		if got := question(&c.req); got != c.want {
			t.Errorf("question(%+v) = %q, want %q", c.req, got, c.want)
		}
	}
}
