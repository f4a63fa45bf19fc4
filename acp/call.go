package acp

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"

	"acpbroker/internal/clip"

	"github.com/sourcegraph/jsonrpc2"
)

// maxErrorMessage bounds the message kept of an agent's error answer.
const maxErrorMessage = 4 << 10

// Call is one request the broker sent. Its response is delivered only to
// this Call, matched by request id; once the Call is abandoned, a response
// that still arrives is counted as stale and dropped.
type Call struct {
	ID     jsonrpc2.ID
	Method string
	// session is the session a change of its configuration is for.
	session string

	conn *Conn
	done chan struct{}
	once sync.Once
	res  json.RawMessage
	err  error
	// withdrawn: $/cancel_request was sent for it (at most once).
	withdrawn atomic.Bool
}

// Done is closed when the response arrived, the connection ended, or the
// call was abandoned.
func (c *Call) Done() <-chan struct{} { return c.done }

// Result decodes the response into v (which may be nil). It must be called
// after Done is closed.
func (c *Call) Result(v any) error {
	if c.err != nil {
		return c.err
	}
	if v == nil || len(c.res) == 0 || string(c.res) == "null" {
		return nil
	}
	return json.Unmarshal(c.res, v)
}

// Abandon forgets the call at once: its bookkeeping is removed, Done is
// closed with ErrAbandoned unless a result already arrived, and a later
// response is dropped as stale. A call still waiting for its answer is
// withdrawn from the agent ($/cancel_request, unless Cancel sent it
// already; agents that do not know it ignore it), without waiting for
// room in the writer's queue. Safe to call at any time, more than once.
func (c *Call) Abandon() {
	if c.forget() {
		c.withdraw(false)
	}
}

// forget removes the call's bookkeeping and closes Done, and reports
// whether the call was still waiting for its answer.
func (c *Call) forget() bool {
	c.conn.mu.Lock()
	pending := c.conn.pending[c.ID] == c
	if pending {
		delete(c.conn.pending, c.ID)
	}
	c.conn.mu.Unlock()
	c.finish(nil, ErrAbandoned)
	return pending
}

func (c *Call) finish(res json.RawMessage, err error) {
	c.once.Do(func() {
		c.res, c.err = res, err
		close(c.done)
	})
}

// Start sends a request and returns its Call without waiting for the
// answer. It blocks only while the writer's queue is full, bounded by ctx.
func (c *Conn) Start(ctx context.Context, method string, params any) (*Call, error) {
	return c.start(ctx, method, "", params)
}

// start is Start for a request about sessionID's configuration, which
// the call is marked with ("" for any other request).
func (c *Conn) start(ctx context.Context, method, sessionID string, params any) (*Call, error) {
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if c.readErr != nil {
		err := c.readErr
		c.mu.Unlock()
		return nil, err
	}
	c.seq++
	call := &Call{ID: jsonrpc2.ID{Num: c.seq}, Method: method, session: sessionID, conn: c, done: make(chan struct{})}
	c.pending[call.ID] = call
	c.mu.Unlock()

	p := json.RawMessage(raw)
	b, err := json.Marshal(&jsonrpc2.Request{Method: method, Params: &p, ID: call.ID})
	if err == nil {
		err = c.enqueue(ctx, b)
	}
	if err != nil {
		call.forget() // never sent: nothing to withdraw
		return nil, err
	}
	c.log.Debug().Str("req", call.ID.String()).Str("method", method).Msg("request sent")
	return call, nil
}

// Call sends a request and waits for its answer, decoding it into result.
// If ctx ends first the call is abandoned (and so withdrawn from the
// agent) and the context's cause returned.
func (c *Conn) Call(ctx context.Context, method string, params, result any) error {
	return c.call(ctx, method, "", params, result)
}

// call is Call for a request about sessionID's configuration (see start).
func (c *Conn) call(ctx context.Context, method, sessionID string, params, result any) error {
	call, err := c.start(ctx, method, sessionID, params)
	if err != nil {
		return err
	}
	select {
	case <-call.Done():
		return call.Result(result)
	case <-ctx.Done():
		call.Abandon()
		return context.Cause(ctx)
	}
}

// deliver hands a response to the Call that sent its id, or drops and
// counts it when no live Call has that id.
func (c *Conn) deliver(id jsonrpc2.ID, result json.RawMessage, rpcErr *jsonrpc2.Error) {
	c.mu.Lock()
	call := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if call == nil {
		c.stats.staleResponses.Add(1)
		c.noisy.Warn().Str("req", logged(id.String())).Msg("dropped a response with no live request (late or unknown id)")
		return
	}
	if rpcErr != nil {
		// The message goes to the thread, the log and the state store: a
		// few KiB of it.
		msg := clip.Cut(c.opts.Redact.String(rpcErr.Message), maxErrorMessage)
		call.finish(nil, &RPCError{Code: rpcErr.Code, Message: msg, Method: call.Method})
		return
	}
	call.finish(result, nil)
}
