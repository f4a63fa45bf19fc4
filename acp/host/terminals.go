package acp

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sourcegraph/jsonrpc2"
)

// serveTerminal answers a terminal/* request on a goroutine the Conn owns.
// Terminals are offered only with Options.Terminal set; a session has at
// most Options.MaxTerminals. The request has been admitted; it is released
// once answered.
func (c *Conn) serveTerminal(req *jsonrpc2.Request) {
	// The agent may withdraw a wait_for_exit ($/cancel_request): it is
	// then answered -32800. The wait is known from here, on the read
	// loop, so that a withdrawal read after it always finds it.
	ctx, cancel := context.WithCancelCause(context.Background())
	wait := req.Method == MethodTerminalWaitForExit
	if wait {
		c.mu.Lock()
		c.waits[req.ID] = cancel
		c.mu.Unlock()
	}
	done := func() {
		if wait {
			c.mu.Lock()
			delete(c.waits, req.ID)
			c.mu.Unlock()
		}
		cancel(nil)
	}
	started := c.spawn(func() {
		defer c.release(req)
		result, err := c.terminalRequest(ctx, req)
		done()
		if err != nil {
			c.noisy.Warn().Str("error", logged(err.Error())).Str("method", logged(req.Method)).Msg("terminal request refused")
			err = c.rpc.ReplyWithError(context.Background(), req.ID, wireError(err))
		} else {
			err = c.rpc.Reply(context.Background(), req.ID, result)
		}
		if err != nil {
			c.log.Debug().Err(err).Msg("terminal reply not sent")
		}
	})
	if !started {
		done()
		c.release(req)
	}
}

func (c *Conn) terminalRequest(ctx context.Context, req *jsonrpc2.Request) (any, error) {
	if c.opts.Terminal == nil {
		return nil, fmt.Errorf("%w: %s (terminals are not offered)", errNoMethod, req.Method)
	}
	if req.Method == MethodTerminalCreate {
		var p createTerminalParams
		if err := decodeParams(req, &p); err != nil {
			return nil, err
		}
		t, err := c.createTerminal(&p)
		if err != nil {
			return nil, err
		}
		return map[string]string{"terminalId": t.id}, nil
	}
	var p terminalParams
	if err := decodeParams(req, &p); err != nil {
		return nil, err
	}
	t, err := c.terminal(p.SessionID, p.TerminalID)
	if err != nil {
		return nil, err
	}
	switch req.Method {
	case MethodTerminalOutput:
		o := t.snapshot(-1)
		return terminalOutputResult{Output: o.Output, Truncated: o.Truncated, ExitStatus: o.Exit}, nil
	case MethodTerminalWaitForExit:
		select {
		case <-t.exited:
			return t.status, nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-c.stop:
			return nil, ErrClosed
		case <-c.readDone:
			return nil, ErrClosed
		}
	case MethodTerminalKill:
		t.kill(c.opts.TerminalGrace)
		return struct{}{}, nil
	default: // MethodTerminalRelease
		c.releaseTerminal(t)
		t.end(c.opts.TerminalGrace)
		return struct{}{}, nil
	}
}

// createTerminal starts the command a terminal/create asks for, in the
// session's directory or one inside it, through Options.Terminal.
func (c *Conn) createTerminal(p *createTerminalParams) (*terminal, error) {
	if p.Command == "" || strings.ContainsRune(p.Command, 0) {
		return nil, fmt.Errorf("%w: terminal/create needs a command", errBadParams)
	}
	if len(p.Args) > maxTerminalArgs || len(p.Env) > maxTerminalArgs {
		return nil, fmt.Errorf("%w: more than %d arguments or variables", errBadParams, maxTerminalArgs)
	}
	size := len(p.Command)
	for _, a := range p.Args {
		size += len(a)
	}
	for _, v := range p.Env {
		size += len(v.Name) + len(v.Value)
	}
	if size > maxTerminalRequestString {
		return nil, fmt.Errorf("%w: the command, its arguments and environment take %d bytes, more than %d", errBadParams, size, maxTerminalRequestString)
	}
	env := make([]string, 0, len(p.Env))
	for _, v := range p.Env {
		if v.Name == "" || strings.ContainsAny(v.Name, "=\x00") || strings.ContainsRune(v.Value, 0) {
			return nil, fmt.Errorf("%w: environment variable %q", errBadParams, v.Name)
		}
		env = append(env, v.Name+"="+v.Value)
	}
	for _, a := range p.Args {
		if strings.ContainsRune(a, 0) {
			return nil, fmt.Errorf("%w: an argument holds a NUL byte", errBadParams)
		}
	}
	s, err := c.sessionFor(p.SessionID)
	if err != nil {
		return nil, err
	}
	dir, err := s.dir(p.Cwd)
	if err != nil {
		return nil, err
	}
	limit := c.opts.MaxTerminalBytes
	if p.OutputByteLimit != nil && *p.OutputByteLimit < uint64(limit) {
		limit = int(*p.OutputByteLimit)
	}

	// One create at a time, so that the count checked is the count kept.
	c.createMu.Lock()
	defer c.createMu.Unlock()
	c.mu.Lock()
	n := 0
	for _, t := range c.terms {
		if t.session == p.SessionID {
			n++
		}
	}
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if n >= c.opts.MaxTerminals {
		return nil, fmt.Errorf("%w: this session has %d open, the most allowed; release one first", errTooManyTerminals, n)
	}
	c.mu.Lock()
	c.termSeq++
	id := fmt.Sprintf("term-%d", c.termSeq)
	c.mu.Unlock()
	// Made only now that it will be started: what it holds open
	// (ExtraFiles) is closed by startTerminal.
	cmd, err := c.opts.Terminal(TerminalCommand{Path: p.Command, Args: p.Args, Dir: dir, Env: env})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errTerminalStart, p.Command, err)
	}
	t, err := startTerminal(id, p.SessionID, cmd, limit, c.log.With().Str("session", logged(p.SessionID)).Logger())
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.closed {
		// Close has taken the table already: this one is ended here.
		c.mu.Unlock()
		t.kill(c.opts.TerminalGrace)
		return nil, ErrClosed
	}
	c.terms[id] = t
	c.mu.Unlock()
	return t, nil
}

// dir is the directory a terminal of the session runs in: the session's,
// or cwd when that is inside it, symbolic links resolved.
func (s *session) dir(cwd string) (string, error) {
	if cwd == "" {
		return s.cwd, nil
	}
	if _, err := s.rel(cwd); err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(cwd)
	if err != nil {
		return "", fmt.Errorf("%w: cwd %s: %v", errBadParams, cwd, err)
	}
	if r, err := filepath.Rel(s.realCwd, real); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("%w: %s", ErrOutsideRoot, cwd)
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("%w: cwd %s is not a directory", errBadParams, cwd)
	}
	return filepath.Clean(cwd), nil
}

// terminal is the session's open terminal id.
func (c *Conn) terminal(sessionID, id string) (*terminal, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.terms[id]
	if t == nil || t.session != sessionID {
		return nil, fmt.Errorf("%w: %q", errUnknownTerminal, id)
	}
	return t, nil
}

// releaseTerminal forgets t: its id is no longer valid, and once ended
// (end), the end of its output is kept a while for TerminalOutput.
func (c *Conn) releaseTerminal(t *terminal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.terms[t.id] != t {
		return
	}
	delete(c.terms, t.id)
	c.released = append(c.released, t)
	if len(c.released) > releasedTerminalsKept {
		c.released = append(c.released[:0:0], c.released[len(c.released)-releasedTerminalsKept:]...)
	}
}

// KillTerminals ends the commands of sessionID's terminals, each with the
// SIGTERM-then-SIGKILL escalation; their ids stay valid, so the agent can
// still read what they printed. It does not wait for them.
func (c *Conn) KillTerminals(sessionID string) {
	for _, t := range c.sessionTerminals(sessionID, false) {
		if !c.spawn(func() { t.kill(c.opts.TerminalGrace) }) {
			t.kill(c.opts.TerminalGrace)
		}
	}
}

// ReleaseTerminals ends and forgets sessionID's terminals, as
// terminal/release does. It does not wait for them; Close does.
func (c *Conn) ReleaseTerminals(sessionID string) {
	for _, t := range c.sessionTerminals(sessionID, true) {
		if !c.spawn(func() { t.end(c.opts.TerminalGrace) }) {
			t.end(c.opts.TerminalGrace)
		}
	}
}

func (c *Conn) sessionTerminals(sessionID string, release bool) []*terminal {
	c.mu.Lock()
	var list []*terminal
	for _, t := range c.terms {
		if t.session == sessionID {
			list = append(list, t)
		}
	}
	c.mu.Unlock()
	if release {
		for _, t := range list {
			c.releaseTerminal(t)
		}
	}
	return list
}

// closeTerminals ends every terminal at once and waits for them: nothing
// a terminal started outlives the Conn.
func (c *Conn) closeTerminals() {
	c.mu.Lock()
	list := make([]*terminal, 0, len(c.terms))
	for id, t := range c.terms {
		list = append(list, t)
		delete(c.terms, id)
	}
	list = append(list, c.released...)
	c.released = nil
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, t := range list {
		wg.Go(func() { t.kill(c.opts.TerminalGrace) })
	}
	wg.Wait()
}

// TerminalOutput returns the last tail bytes (all when tail < 0) of what
// terminal id of sessionID printed, and its exit once ended; a terminal
// released lately is still found, with the end of its output. ok is false
// for an id never seen or long released.
func (c *Conn) TerminalOutput(sessionID, id string, tail int) (TerminalOutput, bool) {
	c.mu.Lock()
	t := c.terms[id]
	if t == nil {
		for _, r := range c.released {
			if r.id == id {
				t = r
			}
		}
	}
	c.mu.Unlock()
	if t == nil || t.session != sessionID {
		return TerminalOutput{}, false
	}
	return t.snapshot(tail), true
}
