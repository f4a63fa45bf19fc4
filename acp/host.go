package acp

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sourcegraph/jsonrpc2"
)

// Host serves the agent's requests for the machine it works on: its files
// (fs/read_text_file, fs/write_text_file) and the commands it runs
// (terminal/*). The Conn decodes each request's params, calls the method
// on a goroutine it owns, and answers with the result, or with the error
// as a JSON-RPC error (a sentinel of this package, or one made with
// ParamsError, picks its code). A Host knows nothing of the connection:
// it may as well serve an agent on another machine.
//
// ctx ends when the agent withdraws the request ($/cancel_request; its
// cause is then ErrRequestCancelled) or the Conn closes (ErrClosed); a
// terminal/wait_for_exit's ctx ends too when the agent's output does.
// Every method must return promptly once ctx is done.
type Host interface {
	// OpenSession tells the host of a session the agent works in, rooted
	// at cwd (absolute): the requests name it by its id, and their paths
	// must lie inside cwd. Called again for an id, it replaces what the
	// host knew of it. It must not block.
	OpenSession(id, cwd string)
	// CloseSession forgets the session: its files are no longer served.
	CloseSession(id string)

	ReadTextFile(ctx context.Context, p *ReadTextFileParams) (*ReadTextFileResult, error)
	WriteTextFile(ctx context.Context, p *WriteTextFileParams) error

	// Terminals reports whether terminal/* requests are served, as
	// clientCapabilities.terminal says in initialize.
	Terminals() bool
	CreateTerminal(ctx context.Context, p *CreateTerminalParams) (*CreateTerminalResult, error)
	TerminalOutput(ctx context.Context, p *TerminalParams) (*TerminalOutputResult, error)
	WaitForTerminalExit(ctx context.Context, p *TerminalParams) (*TerminalExitStatus, error)
	KillTerminal(ctx context.Context, p *TerminalParams) error
	ReleaseTerminal(ctx context.Context, p *TerminalParams) error

	// Close ends whatever the host started for the agent (its terminals'
	// commands) and returns once they have ended. The Conn calls it from
	// its own Close; it is safe to call twice.
	Close() error
}

// serveHost answers an admitted fs/* or terminal/* request on a goroutine
// the Conn owns, through Options.Host; the request is released once
// answered. The agent may withdraw it ($/cancel_request): its ctx ends,
// and it is answered -32800. The withdrawal is known from here, on the
// read loop, so that one read after the request always finds it.
func (c *Conn) serveHost(req *jsonrpc2.Request) {
	base := c.closing
	if req.Method == MethodTerminalWaitForExit {
		base = c.ended // nothing is left to wait for once the agent is gone
	}
	ctx, cancel := context.WithCancelCause(base)
	c.mu.Lock()
	c.waits[req.ID] = cancel
	c.mu.Unlock()
	done := func() {
		c.mu.Lock()
		delete(c.waits, req.ID)
		c.mu.Unlock()
		cancel(nil)
	}
	started := c.spawn(func() {
		defer c.release(req)
		result, err := c.hostRequest(ctx, req)
		done()
		if err != nil {
			c.noisy.Warn().Str("error", logged(err.Error())).Str("method", logged(req.Method)).Msg("agent request refused")
			err = c.rpc.ReplyWithError(context.Background(), req.ID, wireError(err))
		} else {
			err = c.rpc.Reply(context.Background(), req.ID, result)
		}
		if err != nil {
			c.log.Debug().Err(err).Str("method", logged(req.Method)).Msg("reply not sent")
		}
	})
	if !started {
		done()
		c.release(req)
	}
}

// hostRequest decodes req's params and asks the host.
func (c *Conn) hostRequest(ctx context.Context, req *jsonrpc2.Request) (any, error) {
	h := c.opts.Host
	switch req.Method {
	case MethodReadTextFile:
		return serve(ctx, req, h.ReadTextFile)
	case MethodWriteTextFile:
		return serve(ctx, req, func(ctx context.Context, p *WriteTextFileParams) (struct{}, error) {
			return struct{}{}, h.WriteTextFile(ctx, p)
		})
	}
	if !h.Terminals() {
		return nil, fmt.Errorf("%w: %s (terminals are not offered)", ErrMethodNotFound, req.Method)
	}
	switch req.Method {
	case MethodTerminalCreate:
		return serve(ctx, req, h.CreateTerminal)
	case MethodTerminalOutput:
		return serve(ctx, req, h.TerminalOutput)
	case MethodTerminalWaitForExit:
		return serve(ctx, req, h.WaitForTerminalExit)
	case MethodTerminalKill:
		return serve(ctx, req, func(ctx context.Context, p *TerminalParams) (struct{}, error) {
			return struct{}{}, h.KillTerminal(ctx, p)
		})
	default: // MethodTerminalRelease
		return serve(ctx, req, func(ctx context.Context, p *TerminalParams) (struct{}, error) {
			return struct{}{}, h.ReleaseTerminal(ctx, p)
		})
	}
}

// serve decodes req's params into a P and calls f with them.
func serve[P, R any](ctx context.Context, req *jsonrpc2.Request, f func(context.Context, *P) (R, error)) (any, error) {
	var p P
	if err := decodeParams(req, &p); err != nil {
		return nil, err
	}
	r, err := f(ctx, &p)
	if err != nil {
		return nil, err
	}
	return r, nil
}

func decodeParams(req *jsonrpc2.Request, v any) error {
	if req.Params == nil {
		return fmt.Errorf("%w: missing params", ErrInvalidParams)
	}
	if err := json.Unmarshal(*req.Params, v); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidParams, err)
	}
	return nil
}

// noHost serves no file and no terminal: a Conn without Options.Host
// refuses them all.
type noHost struct{}

func (noHost) OpenSession(string, string) {}
func (noHost) CloseSession(string)        {}
func (noHost) ReadTextFile(context.Context, *ReadTextFileParams) (*ReadTextFileResult, error) {
	return nil, fmt.Errorf("%w: %s (files are not served)", ErrMethodNotFound, MethodReadTextFile)
}
func (noHost) WriteTextFile(context.Context, *WriteTextFileParams) error {
	return fmt.Errorf("%w: %s (files are not served)", ErrMethodNotFound, MethodWriteTextFile)
}
func (noHost) Terminals() bool { return false }
func (noHost) CreateTerminal(context.Context, *CreateTerminalParams) (*CreateTerminalResult, error) {
	return nil, ErrMethodNotFound
}
func (noHost) TerminalOutput(context.Context, *TerminalParams) (*TerminalOutputResult, error) {
	return nil, ErrMethodNotFound
}
func (noHost) WaitForTerminalExit(context.Context, *TerminalParams) (*TerminalExitStatus, error) {
	return nil, ErrMethodNotFound
}
func (noHost) KillTerminal(context.Context, *TerminalParams) error    { return ErrMethodNotFound }
func (noHost) ReleaseTerminal(context.Context, *TerminalParams) error { return ErrMethodNotFound }
func (noHost) Close() error                                           { return nil }
