package adapter

import (
	"context"
	"fmt"
	"strings"
	"time"

	"acpbroker/acp"
)

// Elicitor is what a Sink implements to put the agent's questions
// (elicitation: a form to fill in, a link to visit) to people. A Sink
// without it has every question declined, and the thread told.
type Elicitor interface {
	// Elicit asks and returns the answer and who gave it. It must return
	// promptly once ctx is done; its cause says why (no answer within
	// turn.permission_timeout, the turn ended, the agent withdrew the
	// question or said it was complete), and the agent is told "cancel".
	// A form the chat cannot show is answered "decline", with the reason
	// shown in the thread.
	Elicit(ctx context.Context, req *acp.ElicitationRequest) ElicitAnswer
}

// ElicitAnswer is a person's answer to a question.
type ElicitAnswer struct {
	// Result is the action, and the form's content on "accept".
	Result acp.ElicitationResult
	// By identifies who answered (a chat user id), ByName names them;
	// both empty when nobody did.
	By, ByName string
}

// asker is what a turn gives its agent's Conn: it answers the agent's
// permission requests and questions.
type asker struct{ t *turn }

var _ acp.Elicitor = asker{}

func (a asker) Approve(ctx context.Context, req *acp.PermissionRequest) acp.PermissionOutcome {
	return a.t.approve(ctx, req)
}

func (a asker) Elicit(ctx context.Context, req *acp.ElicitationRequest) acp.ElicitationResult {
	return a.t.elicit(ctx, req)
}

// elicit answers the agent's question through the Sink, bounded by
// turn.permission_timeout; no answer is "cancel", and a form with a field
// no chat can ask for is declined as a whole. Every answer is logged (the
// fields answered by name, never their values) and counted. It runs on a
// goroutine of the Conn; ctx ends when the turn abandons.
func (t *turn) elicit(ctx context.Context, req *acp.ElicitationRequest) acp.ElicitationResult {
	cfg := t.cfg
	what := question(req)
	bad, err := req.Unsupported()
	el, ok := t.p.Sink.(Elicitor)
	var declined Notice
	switch {
	case err != nil:
		declined = QuestionInvalid{Question: what, Err: err}
	case len(bad) > 0:
		declined = QuestionUnaskable{Question: what, Fields: bad}
	case !ok:
		declined = QuestionUnanswerable{Question: what}
	}
	if declined != nil {
		t.p.Sink.Notice(declined)
		return t.elicited(req, ElicitAnswer{Result: acp.ElicitationResult{Action: acp.ActionDecline}}, ViaUnanswered)
	}
	t.askOpened(true)
	defer t.askClosed(true)
	askCtx, cancel := context.WithTimeoutCause(ctx, cfg.PermissionTimeout,
		fmt.Errorf("no answer within %s", shortDuration(cfg.PermissionTimeout)))
	defer cancel()
	ans := el.Elicit(askCtx, req)
	cancelled := ElicitAnswer{Result: acp.ElicitationResult{Action: acp.ActionCancel}}
	switch {
	case ctx.Err() != nil:
		// The turn ended, or the agent withdrew the question: it is told
		// "cancel" (or -32800) whatever the answer.
		return t.elicited(req, cancelled, ViaCancelled)
	case askCtx.Err() != nil:
		t.p.Sink.Notice(QuestionTimedOut{Question: what, After: cfg.PermissionTimeout})
		return t.elicited(req, cancelled, ViaTimeout)
	case ans.Result.Action == acp.ActionAccept && req.Check(ans.Result.Content) != nil:
		log := t.logger()
		log.Error().Err(req.Check(ans.Result.Content)).Msg("the chat layer gave an answer that does not fit the form; answering cancel")
		return t.elicited(req, cancelled, ViaUnanswered)
	case ans.By == "":
		return t.elicited(req, ans, ViaUnanswered)
	}
	return t.elicited(req, ans, ViaUser)
}

// elicited logs and counts an answer to a question, and returns it for the
// agent.
func (t *turn) elicited(req *acp.ElicitationRequest, ans ElicitAnswer, via string) acp.ElicitationResult {
	var answered []string
	for k := range ans.Result.Content {
		answered = append(answered, k)
	}
	log := t.logger()
	log.Info().Str("mode", req.Mode).Str("tool_call", req.ToolCallID).Str("action", ans.Result.Action).
		Str("via", via).Str("by", ans.By).Str("by_name", ans.ByName).Strs("fields", answered).
		Msg("question answered")
	t.e.mu.Lock()
	t.e.stats.Elicitations[DecisionClass{Outcome: ans.Result.Action, Via: via}]++
	t.e.mu.Unlock()
	return ans.Result
}

// askOpened counts a request waiting on a person (a permission request,
// or a question): the watchdog does not count a turn waiting on one as
// stuck.
func (t *turn) askOpened(question bool) {
	t.mu.Lock()
	t.asking++
	if question {
		t.questions++
	}
	t.mu.Unlock()
}

// askClosed counts the request out. Its answer is progress: the tool call
// waited on it, and the agent's next update may take a moment to arrive.
func (t *turn) askClosed(question bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.asking--
	if question {
		t.questions--
	}
	t.progress = time.Now()
	for id, tc := range t.open {
		tc.updated = t.progress
		t.open[id] = tc
	}
}

// question is what the agent asked, for notices: its message, else its
// form's title, as the agent wrote it.
func question(req *acp.ElicitationRequest) string {
	if strings.TrimSpace(req.Message) == "" && req.Schema != nil {
		return req.Schema.Title
	}
	return req.Message
}
