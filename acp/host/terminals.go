package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"acpbroker/acp"
)

// Terminals reports whether terminals are served: Options.Terminal is
// set.
func (h *Host) Terminals() bool { return h.opts.Terminal != nil }

// CreateTerminal answers terminal/create: it starts the command asked
// for, through Options.Terminal, in the session's directory or one inside
// it; a session has at most Options.MaxTerminals open.
func (h *Host) CreateTerminal(_ context.Context, p *acp.CreateTerminalParams) (*acp.CreateTerminalResult, error) {
	t, err := h.createTerminal(p)
	if err != nil {
		return nil, err
	}
	return &acp.CreateTerminalResult{TerminalID: t.id}, nil
}

// TerminalOutput answers terminal/output: what the command printed so
// far, as far as it is kept, and its exit once ended.
func (h *Host) TerminalOutput(_ context.Context, p *acp.TerminalParams) (*acp.TerminalOutputResult, error) {
	t, err := h.terminal(p.SessionID, p.TerminalID)
	if err != nil {
		return nil, err
	}
	o := t.snapshot(-1)
	return &acp.TerminalOutputResult{Output: o.Output, Truncated: o.Truncated, ExitStatus: o.Exit}, nil
}

// WaitForTerminalExit answers terminal/wait_for_exit once the command has
// ended, or ctx has.
func (h *Host) WaitForTerminalExit(ctx context.Context, p *acp.TerminalParams) (*acp.TerminalExitStatus, error) {
	t, err := h.terminal(p.SessionID, p.TerminalID)
	if err != nil {
		return nil, err
	}
	select {
	case <-t.exited:
		st := t.status
		return &st, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// KillTerminal answers terminal/kill: the command is ended (SIGTERM to
// its group, Options.TerminalGrace, SIGKILL); the terminal stays, for its
// output.
func (h *Host) KillTerminal(_ context.Context, p *acp.TerminalParams) error {
	t, err := h.terminal(p.SessionID, p.TerminalID)
	if err != nil {
		return err
	}
	t.kill(h.opts.TerminalGrace)
	return nil
}

// ReleaseTerminal answers terminal/release: the command is ended and the
// terminal forgotten, but for the end of its output (see TerminalOutput).
func (h *Host) ReleaseTerminal(_ context.Context, p *acp.TerminalParams) error {
	t, err := h.terminal(p.SessionID, p.TerminalID)
	if err != nil {
		return err
	}
	h.releaseTerminal(t)
	t.end(h.opts.TerminalGrace)
	return nil
}

// createTerminal starts the command a terminal/create asks for, in the
// session's directory or one inside it, through Options.Terminal.
func (h *Host) createTerminal(p *acp.CreateTerminalParams) (*terminal, error) {
	if p.Command == "" || strings.ContainsRune(p.Command, 0) {
		return nil, fmt.Errorf("%w: terminal/create needs a command", acp.ErrInvalidParams)
	}
	if len(p.Args) > maxTerminalArgs || len(p.Env) > maxTerminalArgs {
		return nil, fmt.Errorf("%w: more than %d arguments or variables", acp.ErrInvalidParams, maxTerminalArgs)
	}
	size := len(p.Command)
	for _, a := range p.Args {
		size += len(a)
	}
	for _, v := range p.Env {
		size += len(v.Name) + len(v.Value)
	}
	if size > maxTerminalRequestString {
		return nil, fmt.Errorf("%w: the command, its arguments and environment take %d bytes, more than %d", acp.ErrInvalidParams, size, maxTerminalRequestString)
	}
	env := make([]string, 0, len(p.Env))
	for _, v := range p.Env {
		if v.Name == "" || strings.ContainsAny(v.Name, "=\x00") || strings.ContainsRune(v.Value, 0) {
			return nil, fmt.Errorf("%w: environment variable %q", acp.ErrInvalidParams, v.Name)
		}
		env = append(env, v.Name+"="+v.Value)
	}
	for _, a := range p.Args {
		if strings.ContainsRune(a, 0) {
			return nil, fmt.Errorf("%w: an argument holds a NUL byte", acp.ErrInvalidParams)
		}
	}
	s, err := h.workspace(p.SessionID)
	if err != nil {
		return nil, err
	}
	dir, err := s.dir(p.Cwd)
	if err != nil {
		return nil, err
	}
	limit := h.opts.MaxTerminalBytes
	if p.OutputByteLimit != nil && *p.OutputByteLimit < uint64(limit) {
		limit = int(*p.OutputByteLimit)
	}

	// One create at a time, so that the count checked is the count kept.
	h.createMu.Lock()
	defer h.createMu.Unlock()
	h.mu.Lock()
	n := 0
	for _, t := range h.terms {
		if t.session == p.SessionID {
			n++
		}
	}
	closed := h.closed
	h.mu.Unlock()
	if closed {
		return nil, acp.ErrClosed
	}
	if n >= h.opts.MaxTerminals {
		return nil, fmt.Errorf("%w: this session has %d open, the most allowed; release one first", errTooManyTerminals, n)
	}
	h.mu.Lock()
	h.termSeq++
	id := fmt.Sprintf("term-%d", h.termSeq)
	h.mu.Unlock()
	// Made only now that it will be started: what it holds open
	// (ExtraFiles) is closed by startTerminal.
	cmd, err := h.opts.Terminal(Command{Path: p.Command, Args: p.Args, Dir: dir, Env: env})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errTerminalStart, p.Command, err)
	}
	t, err := startTerminal(id, p.SessionID, cmd, limit, h.log.With().Str("session", p.SessionID).Logger())
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	if h.closed {
		// Close has taken the table already: this one is ended here.
		h.mu.Unlock()
		t.kill(h.opts.TerminalGrace)
		return nil, acp.ErrClosed
	}
	h.terms[id] = t
	h.mu.Unlock()
	return t, nil
}

// dir is the directory a terminal of the session runs in: the session's,
// or cwd when that is inside it, symbolic links resolved.
func (s *workspace) dir(cwd string) (string, error) {
	if cwd == "" {
		return s.cwd, nil
	}
	if _, err := s.rel(cwd); err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(cwd)
	if err != nil {
		return "", fmt.Errorf("%w: cwd %s: %v", acp.ErrInvalidParams, cwd, err)
	}
	if r, err := filepath.Rel(s.realCwd, real); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("%w: %s", acp.ErrOutsideRoot, cwd)
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("%w: cwd %s is not a directory", acp.ErrInvalidParams, cwd)
	}
	return filepath.Clean(cwd), nil
}

// terminal is the session's open terminal id.
func (h *Host) terminal(sessionID, id string) (*terminal, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.terms[id]
	if t == nil || t.session != sessionID {
		return nil, fmt.Errorf("%w: %q", errUnknownTerminal, id)
	}
	return t, nil
}

// releaseTerminal forgets t: its id is no longer valid, and once ended
// (end), the end of its output is kept a while for TerminalOutput.
func (h *Host) releaseTerminal(t *terminal) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.terms[t.id] != t {
		return
	}
	delete(h.terms, t.id)
	h.released = append(h.released, t)
	if len(h.released) > releasedTerminalsKept {
		h.released = append(h.released[:0:0], h.released[len(h.released)-releasedTerminalsKept:]...)
	}
}

// KillTerminals ends the commands of sessionID's terminals, each with the
// SIGTERM-then-SIGKILL escalation; their ids stay valid, so the agent can
// still read what they printed. It does not wait for them; Close does.
func (h *Host) KillTerminals(sessionID string) {
	for _, t := range h.sessionTerminals(sessionID, false) {
		if !h.spawn(func() { t.kill(h.opts.TerminalGrace) }) {
			t.kill(h.opts.TerminalGrace)
		}
	}
}

// ReleaseTerminals ends and forgets sessionID's terminals, as
// terminal/release does. It does not wait for them; Close does.
func (h *Host) ReleaseTerminals(sessionID string) {
	for _, t := range h.sessionTerminals(sessionID, true) {
		if !h.spawn(func() { t.end(h.opts.TerminalGrace) }) {
			t.end(h.opts.TerminalGrace)
		}
	}
}

func (h *Host) sessionTerminals(sessionID string, release bool) []*terminal {
	h.mu.Lock()
	var list []*terminal
	for _, t := range h.terms {
		if t.session == sessionID {
			list = append(list, t)
		}
	}
	h.mu.Unlock()
	if release {
		for _, t := range list {
			h.releaseTerminal(t)
		}
	}
	return list
}

// Output returns the last tail bytes (all when tail < 0) of what
// terminal id of sessionID printed, and its exit once ended; a terminal
// released lately is still found, with the end of its output. ok is false
// for an id never seen or long released.
func (h *Host) Output(sessionID, id string, tail int) (acp.TerminalOutput, bool) {
	h.mu.Lock()
	t := h.terms[id]
	if t == nil {
		for _, r := range h.released {
			if r.id == id {
				t = r
			}
		}
	}
	h.mu.Unlock()
	if t == nil || t.session != sessionID {
		return acp.TerminalOutput{}, false
	}
	return t.snapshot(tail), true
}

// TerminalsOpen counts the terminals not yet released.
func (h *Host) TerminalsOpen() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.terms)
}

// The ways a terminal request can fail.
var (
	errUnknownTerminal  = acp.ParamsError("unknown terminal")
	errTerminalStart    = acp.ParamsError("terminal command could not start")
	errTooManyTerminals = errors.New("too many terminals")
)
