package acp

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sourcegraph/jsonrpc2"
)

// Approver decides agent permission requests. Approve must return promptly
// once ctx is done; whatever it returns then, the agent is told "cancelled".
type Approver interface {
	Approve(ctx context.Context, req *PermissionRequest) PermissionOutcome
}

// ApproverFunc adapts a function to Approver.
type ApproverFunc func(ctx context.Context, req *PermissionRequest) PermissionOutcome

// Approve calls f.
func (f ApproverFunc) Approve(ctx context.Context, req *PermissionRequest) PermissionOutcome {
	return f(ctx, req)
}

// Subscription receives one session's updates and permission requests for
// the length of one turn.
type Subscription struct {
	SessionID string

	conn         *Conn
	approver     Approver
	updates      chan Update
	queued       atomic.Int64 // bytes of the updates in updates
	overflow     chan struct{}
	overflowOnce sync.Once
}

// Updates yields the session's updates in the order the agent sent them;
// pass each one taken to Took. The channel is never closed; stop reading
// after Close.
func (s *Subscription) Updates() <-chan Update { return s.updates }

// Took counts u, taken from Updates, out of the bytes the queue holds.
func (s *Subscription) Took(u Update) { s.queued.Add(-int64(u.queued)) }

// Overflowed is closed if an update had to be dropped because the queue was
// full: the turn's rendering is no longer complete.
func (s *Subscription) Overflowed() <-chan struct{} { return s.overflow }

// Close ends the subscription: later updates for the session are counted as
// late and dropped, its open permission requests are answered
// "cancelled" and its open questions "cancel". Safe to call twice.
func (s *Subscription) Close() {
	c := s.conn
	c.mu.Lock()
	if c.subs[s.SessionID] == s {
		delete(c.subs, s.SessionID)
	}
	c.mu.Unlock()
	c.CancelPermissions(s.SessionID, ErrAbandoned)
}

// Subscribe makes the caller the receiver of sessionID's updates and
// permission requests (and questions, if approver is also an Elicitor)
// until the Subscription is closed. Only one
// subscriber per session may exist; a second gets ErrBusy.
func (c *Conn) Subscribe(sessionID string, approver Approver) (*Subscription, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.readErr != nil {
		return nil, ErrClosed
	}
	if c.subs[sessionID] != nil {
		return nil, ErrBusy
	}
	s := &Subscription{
		SessionID: sessionID,
		conn:      c,
		approver:  approver,
		updates:   make(chan Update, c.opts.UpdateQueue),
		overflow:  make(chan struct{}),
	}
	c.subs[sessionID] = s
	return s, nil
}

// CancelPermissions answers every open permission request of sessionID with
// "cancelled", and every open question (elicitation) with "cancel", and
// releases their entries at once.
func (c *Conn) CancelPermissions(sessionID string, cause error) {
	c.mu.Lock()
	var cancels []context.CancelCauseFunc
	for key, p := range c.perms {
		if p.sessionID == sessionID {
			cancels = append(cancels, p.cancel)
			delete(c.perms, key)
		}
	}
	c.mu.Unlock()
	for _, cancel := range cancels {
		cancel(cause)
	}
}

// noticeWait bounds the wait for room in the writer's queue for a message
// nobody waits on (session/cancel, an error answer): the queue drains as
// fast as the agent reads, and an agent that reads nothing for a second
// is not going to read it.
const noticeWait = time.Second

// CancelSession tells the agent to stop the session's current turn. The
// notification is queued before CancelSession returns, so it reaches the
// agent before anything queued after it, such as the "cancelled" answers
// to open permission requests: some agents carry on with a turn whose
// permission is answered before the cancel arrives. It waits at most one
// second for room in the writer's queue.
func (c *Conn) CancelSession(sessionID string) {
	ctx, cancel := context.WithTimeout(context.Background(), noticeWait)
	defer cancel()
	b, _ := json.Marshal(struct {
		JSONRPC string       `json:"jsonrpc"`
		Method  string       `json:"method"`
		Params  cancelParams `json:"params"`
	}{"2.0", MethodSessionCancel, cancelParams{SessionID: sessionID}})
	if err := c.enqueue(ctx, b); err != nil {
		c.log.Debug().Err(err).Str("session", logged(sessionID)).Msg("session/cancel not sent")
		return
	}
	c.log.Debug().Str("session", logged(sessionID)).Msg("session/cancel sent")
}

// permission is an open request of the agent's that waits on a person: a
// permission request, or an elicitation (a question).
type permission struct {
	sessionID string
	cancel    context.CancelCauseFunc
	method    string
	reqID     jsonrpc2.ID // the agent's, for $/cancel_request
	// elicitationID is a url question's, for elicitation/complete.
	elicitationID string
}

// handle serves a request or notification of the agent's, its params as
// the agent wrote them. It runs on the read loop and must never block.
func (c *Conn) handle(req *jsonrpc2.Request) {
	switch req.Method {
	case MethodRequestPermission, MethodReadTextFile, MethodWriteTextFile, MethodElicitationCreate,
		MethodTerminalCreate, MethodTerminalOutput, MethodTerminalWaitForExit, MethodTerminalKill, MethodTerminalRelease:
		if req.Notif {
			c.stats.badMessages.Add(1)
			return
		}
		if !c.admit(req) {
			c.stats.refused.Add(1)
			c.noisy.Warn().Str("method", logged(req.Method)).Int("max", c.opts.MaxAgentRequests).Int("bytes", paramsLen(req)).Msg("agent request refused: too many in flight")
			c.replyErr(req, fmt.Errorf("%w (at most %d, of at most %d bytes in all)", errTooMany, c.opts.MaxAgentRequests, c.opts.MaxAgentRequestBytes))
			return
		}
		switch req.Method {
		case MethodRequestPermission:
			c.servePermission(req)
		case MethodElicitationCreate:
			c.serveElicitation(req)
		default:
			c.serveHost(req)
		}
	case MethodCancelRequest, MethodElicitationComplete:
		c.notified(req)
	default:
		if req.Notif {
			c.log.Debug().Str("method", logged(req.Method)).Msg("ignored agent notification")
			return
		}
		c.replyErr(req, fmt.Errorf("%w: %s", ErrMethodNotFound, req.Method))
	}
}

// routeUpdate delivers a session/update to the session's turn through its
// bounded queue; it never blocks.
func (c *Conn) routeUpdate(params json.RawMessage) {
	var n SessionNotification
	if params == nil || json.Unmarshal(params, &n) != nil || n.SessionID == "" {
		c.stats.badMessages.Add(1)
		c.noisy.Warn().Str("method", MethodSessionUpdate).Msg("session/update with unusable params; skipped")
		return
	}
	state := isStateKind(n.Update.Kind)
	var change stateChange
	if state {
		change = stateUpdate(n.Update)
	}
	c.countUnknown(&n.Update)
	c.mu.Lock()
	sub := c.subs[n.SessionID]
	s, known := c.sessions[n.SessionID]
	if state && known {
		// What the session offers changes whether a turn listens or not.
		model, mode := s.state.CurrentModel(), s.state.CurrentMode()
		s.state.apply(change)
		c.stats.unknownOptions.Add(uint64(change.skipped))
		if sub != nil && !c.changingLocked(n.SessionID) {
			n.Update.Switched = switches(model, mode, s.state)
		}
	}
	if sub == nil && !known {
		why := c.keepEarlyLocked(n.SessionID, n.Update, change, len(params))
		c.mu.Unlock()
		if why != "" {
			c.stats.earlyDropped.Add(1)
			c.noisy.Warn().Str("session", excerpt(n.SessionID, 80)).Str("kind", excerpt(n.Update.Kind, 80)).Int("bytes", len(params)).
				Str("why", why).Msg("update for a session not known; dropped")
		}
		return
	}
	c.mu.Unlock()
	if sub == nil && state && known {
		return
	}
	if sub == nil {
		c.stats.lateUpdates.Add(1)
		c.log.Debug().Str("session", logged(n.SessionID)).Str("kind", logged(n.Update.Kind)).Msg("update with no turn listening; dropped")
		return
	}
	n.Update.queued = len(params)
	if sub.queued.Add(int64(n.Update.queued)) <= int64(c.opts.UpdateQueueBytes) {
		select {
		case sub.updates <- n.Update:
			return
		default:
		}
	}
	sub.queued.Add(-int64(n.Update.queued))
	c.stats.droppedUpdates.Add(1)
	sub.overflowOnce.Do(func() { close(sub.overflow) })
	c.noisy.Error().Str("session", logged(n.SessionID)).Int("updates", len(sub.updates)).Int64("bytes", sub.queued.Load()).Msg("turn's update queue is full; update dropped")
}

// admit counts an agent request in, unless MaxAgentRequests are being
// served already; release counts it out once it is answered.
// (The bytes of their params count too, at most MaxAgentRequestBytes in
// all: a request waiting on a person holds what it was sent.)
func (c *Conn) admit(req *jsonrpc2.Request) bool {
	n := paramsLen(req)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.serving >= c.opts.MaxAgentRequests || c.servingBytes+n > c.opts.MaxAgentRequestBytes {
		return false
	}
	c.serving++
	c.servingBytes += n
	return true
}

func (c *Conn) release(req *jsonrpc2.Request) {
	n := paramsLen(req)
	c.mu.Lock()
	c.serving--
	c.servingBytes -= n
	c.mu.Unlock()
}

// paramsLen is the length of a request's params.
func paramsLen(req *jsonrpc2.Request) int {
	if req.Params == nil {
		return 0
	}
	return len(*req.Params)
}

// servePermission relays an admitted permission request to the session's
// turn and answers it; every path releases it.
func (c *Conn) servePermission(req *jsonrpc2.Request) {
	var p PermissionRequest
	if req.Params == nil || json.Unmarshal(*req.Params, &p) != nil {
		c.stats.badMessages.Add(1)
		c.replyErr(req, fmt.Errorf("%w: session/request_permission", ErrInvalidParams))
		c.release(req)
		return
	}
	p.ToolCall.ToolCallID = boundID(p.ToolCall.ToolCallID)
	c.mu.Lock()
	sub := c.subs[p.SessionID]
	if sub == nil || c.readErr != nil {
		c.mu.Unlock()
		c.noisy.Warn().Str("session", logged(p.SessionID)).Msg("permission request with no turn listening; answered cancelled")
		c.reply(req, PermissionOutcome{})
		c.release(req)
		return
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	c.permSeq++
	key := c.permSeq
	c.perms[key] = &permission{sessionID: p.SessionID, cancel: cancel, method: req.Method, reqID: req.ID}
	c.mu.Unlock()

	started := c.spawn(func() {
		defer c.release(req)
		defer c.releasePermission(key)
		// A cancelled request is answered at once: the approver may still
		// be tidying up (a message to edit) and returns on its own.
		out := askUntil(c, ctx, func() PermissionOutcome { return sub.approver.Approve(ctx, &p) })
		if ctx.Err() != nil {
			if c.withdrawn(ctx, req) {
				return
			}
			out = PermissionOutcome{}
		}
		if !out.Cancelled() && !hasOption(&p, out.OptionID) {
			c.log.Error().Str("session", logged(p.SessionID)).Str("option", logged(out.OptionID)).Msg("approver chose an option the agent did not offer; answering cancelled")
			out = PermissionOutcome{}
		}
		c.log.Debug().Str("session", logged(p.SessionID)).Str("req", logged(req.ID.String())).Str("option", logged(out.OptionID)).Msg("permission answered")
		if err := c.rpc.Reply(context.Background(), req.ID, out); err != nil {
			c.log.Debug().Err(err).Msg("permission answer not sent")
		}
	})
	if !started {
		c.releasePermission(key)
		c.release(req)
	}
}

func (c *Conn) releasePermission(key uint64) {
	c.mu.Lock()
	p := c.perms[key]
	delete(c.perms, key)
	c.mu.Unlock()
	if p != nil {
		p.cancel(nil)
	}
}

func hasOption(r *PermissionRequest, id string) bool {
	for _, o := range r.Options {
		if o.OptionID == id {
			return true
		}
	}
	return false
}

// reply answers an agent request at once, with what it needs no one to
// decide (no turn to ask): as a notice, so that an agent flooding such
// requests while reading nothing holds no goroutine per request.
func (c *Conn) reply(req *jsonrpc2.Request, result any) {
	id, _ := json.Marshal(req.ID)
	c.answerNow(id, result, nil, "answer to "+req.Method)
}

// replyErr answers an agent request with an error, as a notice.
func (c *Conn) replyErr(req *jsonrpc2.Request, err error) {
	id, _ := json.Marshal(req.ID)
	c.answerNow(id, nil, err, "error answer to "+req.Method)
}

// answerNow sends the answer to the agent's request id, as the agent
// wrote it (null when nil): result, or err when it is not nil, as a
// notice. It is built here, not by jsonrpc2's Reply: Reply waits for room
// in the writer's queue on the read loop, which must never wait, and
// takes only an id it could parse, where an answer to a request it could
// not read (a null or unreadable id) must still be sent.
func (c *Conn) answerNow(id json.RawMessage, result any, err error, what string) {
	if id == nil {
		id = json.RawMessage("null")
	}
	b := make([]byte, 0, 64+len(id))
	b = append(append(append(b, `{"jsonrpc":"2.0","id":`...), id...), ',')
	if err == nil {
		r, merr := json.Marshal(result)
		if merr == nil {
			b = append(append(append(b, `"result":`...), r...), '}')
			c.notice(b, what)
			return
		}
		err = merr
	}
	e, _ := json.Marshal(wireError(err))
	b = append(append(append(b, `"error":`...), e...), '}')
	c.notice(b, what)
}

// askUntil runs ask (a person's answer, however slow) on a goroutine of
// the Conn and waits for it while ctx lasts: once ctx ends the request is
// answered at once, and ask returns on its own. The zero T when ctx ended
// first, or the Conn is closing.
func askUntil[T any](c *Conn, ctx context.Context, ask func() T) T {
	answered := make(chan T, 1)
	var out T
	if c.spawn(func() { answered <- ask() }) {
		select {
		case out = <-answered:
		case <-ctx.Done():
		}
	}
	return out
}
