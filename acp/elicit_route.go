package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sourcegraph/jsonrpc2"
)

// Causes a question's wait ends with, besides the turn's own.
var (
	// ErrRequestCancelled: the agent withdrew its request
	// ($/cancel_request); it is answered -32800.
	ErrRequestCancelled = errors.New("the agent withdrew the request")
	// ErrElicitationComplete: the agent said a url question's task is
	// done (elicitation/complete) before anyone answered it.
	ErrElicitationComplete = errors.New("the agent says the task at the link is complete")
)

// Elicitor puts the agent's questions (elicitation/create) to people.
// Elicit must return promptly once ctx is done; whatever it returns then,
// the agent is told "cancel" (or -32800, when the agent withdrew the
// question: see ErrRequestCancelled and ErrElicitationComplete for the
// causes ctx may carry).
//
// The Approver given to Subscribe serves questions too when it implements
// Elicitor; otherwise the session's questions are answered "cancel".
type Elicitor interface {
	Elicit(ctx context.Context, req *ElicitationRequest) ElicitationResult
}

// serveElicitation relays an admitted elicitation/create to the session's
// turn and answers it; every path releases it. A question nobody can be
// asked (no turn listening, a turn that takes no questions, one scoped to
// a request rather than a session) is answered "cancel".
func (c *Conn) serveElicitation(req *jsonrpc2.Request) {
	var p ElicitationRequest
	err := decodeParams(req, &p)
	if err == nil {
		p.ToolCallID = boundID(p.ToolCallID)
		err = p.validate()
	}
	if err != nil {
		c.stats.badMessages.Add(1)
		c.noisy.Warn().Str("error", logged(err.Error())).Str("req", logged(req.ID.String())).Msg("elicitation refused")
		c.replyErr(req, err)
		c.release(req)
		return
	}
	c.mu.Lock()
	sub := c.subs[p.SessionID]
	var asker Elicitor
	if sub != nil {
		asker, _ = sub.approver.(Elicitor)
	}
	if p.SessionID == "" || asker == nil || c.readErr != nil {
		c.mu.Unlock()
		c.noisy.Warn().Str("session", logged(p.SessionID)).Str("mode", logged(p.Mode)).Msg("question with no turn to ask; answered cancel")
		c.reply(req, ElicitationResult{Action: ActionCancel})
		c.release(req)
		return
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	c.permSeq++
	key := c.permSeq
	entry := &permission{sessionID: p.SessionID, cancel: cancel, method: req.Method, reqID: req.ID}
	if p.Mode == ElicitURL {
		entry.elicitationID = p.ElicitationID
	}
	c.perms[key] = entry
	c.mu.Unlock()

	started := c.spawn(func() {
		defer c.release(req)
		defer c.releasePermission(key)
		// As for permissions: an ended wait is answered at once, while
		// the Elicitor tidies up on its own.
		out := askUntil(c, ctx, func() ElicitationResult { return asker.Elicit(ctx, &p) })
		if ctx.Err() != nil {
			if c.withdrawn(ctx, req) {
				return
			}
			out = ElicitationResult{Action: ActionCancel}
		}
		out = c.checkAnswer(&p, out)
		c.log.Debug().Str("session", logged(p.SessionID)).Str("req", logged(req.ID.String())).Str("action", logged(out.Action)).Msg("question answered")
		if err := c.rpc.Reply(context.Background(), req.ID, out); err != nil {
			c.log.Debug().Err(err).Msg("question answer not sent")
		}
	})
	if !started {
		c.releasePermission(key)
		c.release(req)
	}
}

// checkAnswer fails an answer closed: anything but a whole, valid answer
// of the three actions becomes "cancel".
func (c *Conn) checkAnswer(p *ElicitationRequest, out ElicitationResult) ElicitationResult {
	switch out.Action {
	case ActionDecline, ActionCancel:
		return ElicitationResult{Action: out.Action}
	case ActionAccept:
		if p.Mode == ElicitURL {
			return ElicitationResult{Action: ActionAccept}
		}
		if err := p.Check(out.Content); err != nil {
			c.log.Error().Err(err).Str("session", logged(p.SessionID)).Msg("the chat layer gave an answer that does not fit the form; answering cancel")
			return ElicitationResult{Action: ActionCancel}
		}
		return out
	}
	c.log.Error().Str("action", logged(out.Action)).Msg("the chat layer gave no valid action; answering cancel")
	return ElicitationResult{Action: ActionCancel}
}

// withdrawn answers a request the agent withdrew ($/cancel_request) with
// -32800 and reports true; false when its wait ended otherwise.
func (c *Conn) withdrawn(ctx context.Context, req *jsonrpc2.Request) bool {
	if !errors.Is(context.Cause(ctx), ErrRequestCancelled) {
		return false
	}
	c.log.Debug().Str("req", logged(req.ID.String())).Str("method", logged(req.Method)).Msg("request withdrawn by the agent; answered -32800")
	if err := c.rpc.ReplyWithError(context.Background(), req.ID, wireError(ErrRequestCancelled)); err != nil {
		c.log.Debug().Err(err).Msg("answer to a withdrawn request not sent")
	}
	return true
}

type cancelRequestParams struct {
	RequestID *jsonrpc2.ID `json:"requestId"`
}

type completeParams struct {
	ElicitationID string `json:"elicitationId"`
}

// notified handles $/cancel_request and elicitation/complete from the
// agent: each ends the wait of one open request of the agent's, which is
// then answered as withdrawn or completed. Unknown or finished ids are
// ignored, as is either sent as a request (which is answered -32601). It
// runs on the read loop and does not block.
func (c *Conn) notified(req *jsonrpc2.Request) {
	if !req.Notif {
		c.replyErr(req, fmt.Errorf("%w: %s is a notification", ErrMethodNotFound, req.Method))
		return
	}
	var raw json.RawMessage
	if req.Params != nil {
		raw = *req.Params
	}
	match, cause := func(*permission) bool { return false }, error(nil)
	var withdrawn *jsonrpc2.ID // the request $/cancel_request names
	switch req.Method {
	case MethodCancelRequest:
		var p cancelRequestParams
		if json.Unmarshal(raw, &p) != nil || p.RequestID == nil {
			c.stats.badMessages.Add(1)
			return
		}
		id := *p.RequestID
		withdrawn = &id
		match, cause = func(e *permission) bool { return e.reqID == id }, ErrRequestCancelled
	case MethodElicitationComplete:
		var p completeParams
		if json.Unmarshal(raw, &p) != nil || p.ElicitationID == "" {
			c.stats.badMessages.Add(1)
			return
		}
		match, cause = func(e *permission) bool { return e.elicitationID == p.ElicitationID }, ErrElicitationComplete
	}
	c.mu.Lock()
	var cancels []context.CancelCauseFunc
	for key, e := range c.perms {
		if match(e) {
			cancels = append(cancels, e.cancel)
			delete(c.perms, key)
		}
	}
	if withdrawn != nil {
		if cancel, ok := c.waits[*withdrawn]; ok {
			cancels = append(cancels, cancel) // a terminal/wait_for_exit
		}
	}
	c.mu.Unlock()
	if len(cancels) == 0 {
		c.log.Debug().Str("method", logged(req.Method)).Msg("nothing open to end; ignored")
	}
	for _, cancel := range cancels {
		cancel(cause)
	}
}

// Cancel asks the agent to stop working on the request ($/cancel_request),
// if it is still waiting for its answer. The Call stays pending: the agent
// still answers, with a result or error -32800, or not at all if it does
// not support the notification. It waits at most one second for room in
// the writer's queue. Safe to call at any time, more than once; the
// notification is sent once.
func (c *Call) Cancel() {
	conn := c.conn
	conn.mu.Lock()
	pending := conn.pending[c.ID] == c
	conn.mu.Unlock()
	if pending {
		c.withdraw(true)
	}
}

// withdraw sends $/cancel_request for the call, once. With wait, it waits
// up to noticeWait for room in the writer's queue; without, it tries at
// once and leaves the wait to a goroutine the Conn owns.
func (c *Call) withdraw(wait bool) {
	if !c.withdrawn.CompareAndSwap(false, true) {
		return
	}
	conn := c.conn
	b, _ := json.Marshal(struct {
		JSONRPC string              `json:"jsonrpc"`
		Method  string              `json:"method"`
		Params  cancelRequestParams `json:"params"`
	}{"2.0", MethodCancelRequest, cancelRequestParams{RequestID: &c.ID}})
	send := func(ctx context.Context) {
		if err := conn.enqueue(ctx, b); err != nil {
			conn.log.Debug().Err(err).Str("req", c.ID.String()).Msg("$/cancel_request not sent")
			return
		}
		conn.log.Debug().Str("req", c.ID.String()).Str("method", c.Method).Msg("$/cancel_request sent")
	}
	switch {
	case wait:
		ctx, cancel := context.WithTimeout(context.Background(), noticeWait)
		defer cancel()
		send(ctx)
	case conn.tryEnqueue(b):
		conn.log.Debug().Str("req", c.ID.String()).Str("method", c.Method).Msg("$/cancel_request sent")
	default:
		// The queue is full: a goroutine of the Conn's waits for room.
		conn.spawn(func() {
			ctx, cancel := context.WithTimeout(context.Background(), noticeWait)
			defer cancel()
			send(ctx)
		})
	}
}
