package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"acpbroker/acp"
	"acpbroker/pool"
)

// errNotRunning: nothing on the host answers for the agent any more.
var errNotRunning = errors.New("the host no longer runs the agent")

// remoteProc is an agent running on a host, as the broker's pool sees it.
type remoteProc struct {
	c                        *Client
	id, host, hostInstance   string
	thread                   string
	pid                      int
	terminals                bool
	stdin                    *sender
	stdout                   *receiver
	subs                     []*nats.Subscription
	exited, reaped, released chan struct{}
	lost                     chan struct{} // closed when the end is the host's loss

	mu          sync.Mutex
	usage       *pool.Usage // as its host's last beat said
	usageErr    string
	ended       bool
	exitErr     error
	stderr      string
	monitorOnce sync.Once
	releaseOnce sync.Once
	forgetOnce  sync.Once
}

var (
	_ pool.Proc          = (*remoteProc)(nil)
	_ pool.UsageReporter = (*remoteProc)(nil)
	_ pool.TurnEnder     = (*remoteProc)(nil)
	_ pool.HostLoser     = (*remoteProc)(nil)
)

// HostLost is closed, before Exited, when the agent ended because its
// host was lost.
func (a *remoteProc) HostLost() <-chan struct{} { return a.lost }

// TurnEnded tells the host a turn of the agent's thread ended (see
// Started.AfterTurn). It does not wait.
func (a *remoteProc) TurnEnded() { a.notify(ctlTurned, struct{}{}) }

// Usage is what the agent uses as its host's last beat said.
func (a *remoteProc) Usage() (pool.Usage, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.usage != nil:
		return *a.usage, nil
	case a.usageErr != "":
		return pool.Usage{}, fmt.Errorf("agent host %s: %s", a.host, a.usageErr)
	}
	return pool.Usage{}, fmt.Errorf("agent host %s has not said yet what the agent uses", a.host)
}

// told takes what the host's beat said the agent uses.
func (a *remoteProc) told(b beatAgent) {
	a.mu.Lock()
	a.usage, a.usageErr = b.Usage, b.UsageError
	a.mu.Unlock()
}

// newRemote prepares an agent's streams before the host is asked to start
// it, so that nothing the host sends is missed.
func (c *Client) newRemote(id, host, instance, thread string) (*remoteProc, error) {
	return c.newRemoteAt(id, host, instance, thread, 1, 1)
}

// newRemoteAt is newRemote for streams already under way: out is the
// number of the first chunk of stdout to read, in the number of the
// next chunk of stdin.
func (c *Client) newRemoteAt(id, host, instance, thread string, out, in uint64) (*remoteProc, error) {
	a := &remoteProc{c: c, id: id, host: host, hostInstance: instance, thread: thread,
		exited: make(chan struct{}), reaped: make(chan struct{}), released: make(chan struct{}),
		lost: make(chan struct{})}
	a.stdin = newSender(c.nc, agentSubject(id, "in"), c.o.Window, c.chunk, c.o.Resend, &c.stats)
	a.stdout = newReceiver(c.nc, agentSubject(id, "outack"), c.o.Window, &c.stats, a.onEnd)
	a.stdin.next, a.stdout.next = max(in, 1), max(out, 1)
	a.stdout.done = a.stdout.next - 1
	for subj, h := range map[string]nats.MsgHandler{
		agentSubject(id, "out"):   a.stdout.onMsg,
		agentSubject(id, "inack"): a.stdin.onAck,
		agentSubject(id, "note"):  a.onNote,
	} {
		sub, err := c.nc.Subscribe(subj, h)
		if err != nil {
			a.discard()
			return nil, fmt.Errorf("cluster: subscribing to %s: %w", subj, err)
		}
		a.subs = append(a.subs, sub)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		a.discard()
		return nil, ErrClosed
	}
	c.agents[id] = a
	return a, nil
}

// discard forgets the agent on this side: its subscriptions and its entry.
func (a *remoteProc) discard() {
	a.forgetOnce.Do(func() {
		_ = a.stdout.Close() // what is left unread counts as taken
		for _, sub := range a.subs {
			_ = sub.Unsubscribe()
		}
		a.stdin.fail(errStreamClosed)
		a.c.mu.Lock()
		delete(a.c.agents, a.id)
		if h := a.c.hosts[a.host]; h != nil && h.beat.Instance == a.hostInstance {
			delete(h.pending, a.id)
		}
		a.c.mu.Unlock()
	})
}

// onEnd takes the End frame: every byte of stdout is before it.
func (a *remoteProc) onEnd(body []byte) {
	var e endInfo
	_ = json.Unmarshal(body, &e)
	var err error
	if e.Err != "" {
		err = errors.New(e.Err)
	}
	a.end(err, e.Stderr, false)
}

// end records how the agent ended and closes Exited, once. lost: the
// host is gone, so stdout ends with err too.
func (a *remoteProc) end(err error, stderr string, lost bool) {
	a.mu.Lock()
	if a.ended {
		a.mu.Unlock()
		return
	}
	a.ended, a.exitErr, a.stderr = true, err, stderr
	a.mu.Unlock()
	a.stdin.fail(errors.New("the agent has ended"))
	if lost {
		a.stdout.fail(err)
		close(a.lost)
	}
	close(a.exited)
}

func (a *remoteProc) PID() int              { return a.pid }
func (a *remoteProc) Stdin() io.WriteCloser { return stdinWriter{a} }
func (a *remoteProc) Stdout() io.ReadCloser { return a.stdout }
func (a *remoteProc) Exited() <-chan struct{} {
	return a.exited
}
func (a *remoteProc) Reaped() <-chan struct{} { return a.reaped }

// Monitor closes Reaped once the agent has ended and readerDone is closed,
// and then forgets the agent.
func (a *remoteProc) Monitor(readerDone <-chan struct{}) {
	a.monitorOnce.Do(func() {
		a.c.wg.Add(1)
		go func() {
			defer a.c.wg.Done()
			<-a.exited
			select {
			case <-readerDone:
			case <-a.c.stop:
			}
			close(a.reaped)
			a.discard()
		}()
	})
}

func (a *remoteProc) ExitErr() error {
	select {
	case <-a.reaped:
	default:
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.exitErr
}

func (a *remoteProc) StderrTail() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stderr
}

// Alive asks the host whether the agent still runs. A host that does not
// answer in time is taken as alive: losing a host is decided by its beat.
func (a *remoteProc) Alive() bool {
	select {
	case <-a.exited:
		return false
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(a.c.o.CallTimeout, 2*time.Second))
	defer cancel()
	var r aliveResult
	if err := a.call(ctx, ctlAlive, nil, &r); err != nil {
		select {
		case <-a.exited:
			return false
		default:
			return true
		}
	}
	return r.Alive
}

// Stop asks the host to stop the agent (close stdin, grace, SIGTERM, grace,
// SIGKILL) and waits for its end: at most twice the grace and the call
// timeout, then as Kill.
func (a *remoteProc) Stop(grace time.Duration) {
	a.stopWith(ctlStop, grace)
}

// Kill asks the host to kill the agent and waits for its end, at most the
// call timeout; an agent whose end is not reported by then is taken as
// ended (and its host told to release it).
func (a *remoteProc) Kill() { a.stopWith(ctlKill, 0) }

func (a *remoteProc) stopWith(method string, grace time.Duration) {
	select {
	case <-a.exited:
	default:
		ctx, cancel := context.WithTimeout(context.Background(), a.c.o.CallTimeout)
		_ = a.call(ctx, method, graceParams{GraceMs: grace.Milliseconds(), Stdin: a.stdin.sent()}, nil)
		cancel()
		if method == ctlKill {
			// What a killed agent still had to say is not waited for: the
			// host, finding its output consumed, sends the end at once.
			_ = a.stdout.Close()
		}
		t := time.NewTimer(2*grace + a.c.o.CallTimeout)
		select {
		case <-a.exited:
			t.Stop()
		case <-t.C:
			if method == ctlStop {
				a.stopWith(ctlKill, 0)
				return
			}
			a.release()
			a.end(fmt.Errorf("agent host %s did not report the agent's end", a.host), "", true)
		}
	}
	t := time.NewTimer(a.c.o.CallTimeout)
	defer t.Stop()
	select {
	case <-a.reaped:
	case <-t.C:
	}
}

// release tells the host to stop the agent and forget it, without waiting.
func (a *remoteProc) release() {
	a.releaseOnce.Do(func() {
		msg := nats.NewMsg(agentSubject(a.id, "ctl"))
		msg.Header.Set(hMethod, ctlRelease)
		_ = a.c.nc.PublishMsg(msg)
	})
}

// call sends a control request about the agent and decodes its result
// into out (unless nil). A ctx that ends first withdraws the request on
// the host too, and its cause is returned.
func (a *remoteProc) call(ctx context.Context, method string, params, out any) error {
	// A host lost answers nothing: the calls open on it end with the loss.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	callDone := make(chan struct{})
	defer close(callDone)
	go func() {
		select {
		case <-a.lost:
			a.mu.Lock()
			err := a.exitErr
			a.mu.Unlock()
			cancel(err)
		case <-callDone:
		}
	}()
	msg := nats.NewMsg(agentSubject(a.id, "ctl"))
	msg.Header.Set(hMethod, method)
	id := nuid.Next()
	msg.Header.Set(hCall, id)
	if d, ok := ctx.Deadline(); ok {
		msg.Header.Set(hDeadline, strconv.FormatInt(max(time.Until(d).Milliseconds(), 1), 10))
	}
	if params != nil {
		msg.Data = mustJSON(params)
	}
	if len(msg.Data) > a.c.maxReq {
		return acp.ParamsError(fmt.Sprintf("%s: the request is %d bytes, more than the %d an agent host may be sent", method, len(msg.Data), a.c.maxReq))
	}
	reply, err := a.c.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		if ctx.Err() != nil {
			cancel := nats.NewMsg(agentSubject(a.id, "ctl"))
			cancel.Header.Set(hMethod, ctlCancel)
			cancel.Header.Set(hCall, id)
			_ = a.c.nc.PublishMsg(cancel)
			return context.Cause(ctx)
		}
		if errors.Is(err, nats.ErrNoResponders) {
			return fmt.Errorf("agent host %s: %w", a.host, errNotRunning)
		}
		return fmt.Errorf("agent host %s: %s: %w", a.host, method, err)
	}
	var r ctlReply
	if err := json.Unmarshal(reply.Data, &r); err != nil {
		return fmt.Errorf("agent host %s: %s: an unreadable answer: %w", a.host, method, err)
	}
	if r.Error != nil {
		return r.Error.err()
	}
	if out != nil && r.Result != nil {
		if err := json.Unmarshal(r.Result, out); err != nil {
			return fmt.Errorf("agent host %s: %s: an unreadable answer: %w", a.host, method, err)
		}
	}
	return nil
}

// notify sends a control message that is not answered.
func (a *remoteProc) notify(method string, params any) {
	msg := nats.NewMsg(agentSubject(a.id, "ctl"))
	msg.Header.Set(hMethod, method)
	msg.Data = mustJSON(params)
	_ = a.c.nc.PublishMsg(msg)
}

// stdinWriter is the agent's stdin: Write blocks while the host has not
// consumed a window's worth, Close sends the end of the stream.
type stdinWriter struct{ a *remoteProc }

func (w stdinWriter) Write(p []byte) (int, error) { return w.a.stdin.Write(p) }

func (w stdinWriter) Close() error {
	err := w.a.stdin.queueFrame(kindEOF, nil)
	if errors.Is(err, errStreamClosed) {
		return nil
	}
	return err
}

// remoteHost serves an agent's files and terminals by asking its host.
type remoteHost struct{ a *remoteProc }

var _ pool.AgentHost = (*remoteHost)(nil)

func (h *remoteHost) OpenSession(id, cwd string) {
	h.a.notify(ctlOpenSession, sessionParams{Session: id, Cwd: cwd})
}

func (h *remoteHost) CloseSession(id string) {
	h.a.notify(ctlCloseSession, sessionParams{Session: id})
}

func (h *remoteHost) ReadTextFile(ctx context.Context, p *acp.ReadTextFileParams) (*acp.ReadTextFileResult, error) {
	var r acp.ReadTextFileResult
	if err := h.a.call(ctx, "fs/read_text_file", p, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (h *remoteHost) WriteTextFile(ctx context.Context, p *acp.WriteTextFileParams) error {
	return h.a.call(ctx, "fs/write_text_file", p, nil)
}

func (h *remoteHost) Terminals() bool { return h.a.terminals }

func (h *remoteHost) CreateTerminal(ctx context.Context, p *acp.CreateTerminalParams) (*acp.CreateTerminalResult, error) {
	var r acp.CreateTerminalResult
	if err := h.a.call(ctx, "terminal/create", p, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (h *remoteHost) TerminalOutput(ctx context.Context, p *acp.TerminalParams) (*acp.TerminalOutputResult, error) {
	var r acp.TerminalOutputResult
	if err := h.a.call(ctx, "terminal/output", p, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (h *remoteHost) WaitForTerminalExit(ctx context.Context, p *acp.TerminalParams) (*acp.TerminalExitStatus, error) {
	var r acp.TerminalExitStatus
	if err := h.a.call(ctx, "terminal/wait_for_exit", p, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (h *remoteHost) KillTerminal(ctx context.Context, p *acp.TerminalParams) error {
	return h.a.call(ctx, "terminal/kill", p, nil)
}

func (h *remoteHost) ReleaseTerminal(ctx context.Context, p *acp.TerminalParams) error {
	return h.a.call(ctx, "terminal/release", p, nil)
}

// bounded is the ctx of a call that has none: the call timeout, whose
// end says which host did not answer.
func (h *remoteHost) bounded() (context.Context, context.CancelFunc) {
	d := h.a.c.o.CallTimeout
	return context.WithTimeoutCause(context.Background(), d,
		fmt.Errorf("agent host %s did not answer within %s: %w", h.a.host, d, context.DeadlineExceeded))
}

func (h *remoteHost) KillTerminals(session string) {
	ctx, cancel := h.bounded()
	defer cancel()
	_ = h.a.call(ctx, ctlKillTerminals, sessionParams{Session: session}, nil)
}

func (h *remoteHost) ReleaseTerminals(session string) {
	ctx, cancel := h.bounded()
	defer cancel()
	_ = h.a.call(ctx, ctlReleaseTerminals, sessionParams{Session: session}, nil)
}

// Output asks the host for the tail of a terminal's output; a host that
// does not answer gives ok false. The host bounds it to fit one message,
// and says so with Truncated.
func (h *remoteHost) Output(session, terminal string, tail int) (acp.TerminalOutput, bool) {
	ctx, cancel := h.bounded()
	defer cancel()
	var r outputResult
	if err := h.a.call(ctx, ctlOutput, outputParams{Session: session, Terminal: terminal, Tail: tail}, &r); err != nil {
		return acp.TerminalOutput{}, false
	}
	return r.Out, r.OK
}

// Close asks the host to end the agent's terminals; an agent whose host is
// gone has nothing left to close.
func (h *remoteHost) Close() error {
	select {
	case <-h.a.exited:
		// The host let the agent go, its terminals with it, before it
		// sent the end (see Server.pumpOut); a host lost has nothing
		// left to close. Asking would wait for an answer that never comes.
		return nil
	default:
	}
	ctx, cancel := h.bounded()
	defer cancel()
	err := h.a.call(ctx, ctlClose, nil, nil)
	switch {
	case errors.Is(err, errNotRunning):
		return nil // the host has forgotten the agent, and its terminals with it
	}
	return err
}
