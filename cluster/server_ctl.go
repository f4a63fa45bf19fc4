package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"acpbroker/acp"
)

// Headers of a control request besides hMethod.
const (
	hCall     = "Call"     // the call's id, named again by a cancel
	hDeadline = "Deadline" // milliseconds the broker still waits
)

const ctlCancel = "cancel"

type graceParams struct {
	GraceMs int64 `json:"graceMs"`
	// Stdin is the last chunk of stdin the broker sent before it asked:
	// the agent is given it before its stdin is closed.
	Stdin uint64 `json:"stdin,omitempty"`
}

type aliveResult struct {
	Alive bool `json:"alive"`
}

type sessionParams struct {
	Session string `json:"session"`
	Cwd     string `json:"cwd,omitempty"`
}

type outputParams struct {
	Session  string `json:"session"`
	Terminal string `json:"terminal"`
	Tail     int    `json:"tail"`
}

type outputResult struct {
	Out acp.TerminalOutput `json:"out"`
	OK  bool               `json:"ok"`
}

// onCtl serves a control request about agent a. What must not block (the
// sessions, cancels) is done here, in order; the rest on goroutines.
func (s *Server) onCtl(a *hostAgent, m *nats.Msg) {
	method := m.Header.Get(hMethod)
	h := a.st.Host
	switch method {
	case ctlOpenSession, ctlCloseSession:
		var p sessionParams
		if err := json.Unmarshal(m.Data, &p); err != nil {
			return
		}
		if method == ctlOpenSession {
			h.OpenSession(p.Session, p.Cwd)
		} else {
			h.CloseSession(p.Session)
		}
		if m.Reply != "" {
			_ = m.Respond(mustJSON(ctlReply{}))
		}
		return
	case ctlTurned:
		s.turned(a)
		return
	case ctlKeep:
		s.keep(a, m.Data)
		return
	case ctlLeft:
		s.mu.Lock()
		if a.orphaned.IsZero() {
			a.orphaned = time.Now()
		}
		s.mu.Unlock()
		return
	case ctlCancel:
		a.callsMu.Lock()
		if c := a.calls[m.Header.Get(hCall)]; c != nil {
			c(acp.ErrRequestCancelled)
		}
		a.callsMu.Unlock()
		return
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	if ms, err := strconv.ParseInt(m.Header.Get(hDeadline), 10, 64); err == nil && ms > 0 {
		var c context.CancelFunc
		ctx, c = context.WithTimeoutCause(ctx, time.Duration(ms)*time.Millisecond, errors.New("the broker stopped waiting"))
		cancelCause := cancel
		cancel = func(err error) { cancelCause(err); c() }
	}
	call := m.Header.Get(hCall)
	if call != "" {
		a.callsMu.Lock()
		if len(a.calls) >= 1024 {
			a.callsMu.Unlock()
			cancel(nil)
			_ = m.Respond(mustJSON(ctlReply{Error: toWireErr(errors.New("too many requests in flight on the agent host"))}))
			return
		}
		a.calls[call] = cancel
		a.callsMu.Unlock()
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			if call != "" {
				a.callsMu.Lock()
				delete(a.calls, call)
				a.callsMu.Unlock()
			}
			cancel(nil)
		}()
		res, err := s.serveCtl(ctx, a, method, m.Data)
		var r ctlReply
		if err != nil {
			r.Error = toWireErr(err)
		} else if res != nil {
			r.Result = mustJSON(res)
		}
		b := mustJSON(r)
		if len(b) > s.maxReply {
			b = mustJSON(ctlReply{Error: toWireErr(fmt.Errorf("%s: the answer is %d bytes, more than the %d an agent host may send", method, len(b), s.maxReply))})
		}
		if m.Reply != "" {
			_ = m.Respond(b)
		}
	}()
}

func (s *Server) serveCtl(ctx context.Context, a *hostAgent, method string, data []byte) (any, error) {
	h := a.st.Host
	p := a.st.Proc
	switch method {
	case ctlStop:
		var g graceParams
		_ = json.Unmarshal(data, &g)
		grace := time.Duration(g.GraceMs) * time.Millisecond
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			// What the broker wrote before it asked reaches the agent
			// first, as it would through a pipe, for a grace at most.
			t := time.NewTimer(grace)
			defer t.Stop()
			giveUp := make(chan struct{})
			go func() {
				select {
				case <-t.C:
				case <-a.abandoned:
				case <-p.Exited():
				}
				close(giveUp)
			}()
			a.in.waitUsed(g.Stdin, giveUp)
			p.Stop(grace)
		}()
		return nil, nil
	case ctlKill:
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			p.Kill()
		}()
		return nil, nil
	case ctlAlive:
		return aliveResult{Alive: p.Alive()}, nil
	case ctlRelease:
		s.abandon(a, "the broker released it")
		return nil, nil
	case ctlClose:
		return nil, h.Close()
	case ctlKept:
		s.mu.Lock()
		defer s.mu.Unlock()
		r := keptResult{MCPServers: orNone(a.st.MCPServers)}
		if len(a.kept) > 0 {
			r.Note = json.RawMessage(a.kept)
		}
		return r, nil
	case ctlKillTerminals, ctlReleaseTerminals:
		var sp sessionParams
		if err := json.Unmarshal(data, &sp); err != nil {
			return nil, acp.ParamsError(err.Error())
		}
		if method == ctlKillTerminals {
			h.KillTerminals(sp.Session)
		} else {
			h.ReleaseTerminals(sp.Session)
		}
		return nil, nil
	case ctlOutput:
		var op outputParams
		if err := json.Unmarshal(data, &op); err != nil {
			return nil, acp.ParamsError(err.Error())
		}
		out, ok := h.Output(op.Session, op.Terminal, op.Tail)
		r := outputResult{Out: out, OK: ok}
		for fit := s.maxReply - 512; ; {
			n := len(mustJSON(r))
			if n <= fit {
				return r, nil
			}
			if r.Out.Output == "" {
				return nil, fmt.Errorf("%s: the answer does not fit one message", method)
			}
			r.Out.Output, _ = cutFront(r.Out.Output, n-fit)
			r.Out.Truncated = true
		}
	case "fs/read_text_file":
		var rp acp.ReadTextFileParams
		if err := json.Unmarshal(data, &rp); err != nil {
			return nil, acp.ParamsError(err.Error())
		}
		res, err := h.ReadTextFile(ctx, &rp)
		if err != nil {
			return nil, err
		}
		if n := len(mustJSON(res)); n > s.maxReply-512 {
			return nil, acp.ParamsError(fmt.Sprintf("the text read from %s is %d bytes, more than the %d an agent host may send in one answer: read it in parts (line and limit)", rp.Path, n, s.maxReply-512))
		}
		return res, nil
	case "fs/write_text_file":
		var wp acp.WriteTextFileParams
		if err := json.Unmarshal(data, &wp); err != nil {
			return nil, acp.ParamsError(err.Error())
		}
		return nil, h.WriteTextFile(ctx, &wp)
	case "terminal/create":
		var cp acp.CreateTerminalParams
		if err := json.Unmarshal(data, &cp); err != nil {
			return nil, acp.ParamsError(err.Error())
		}
		return h.CreateTerminal(ctx, &cp)
	case "terminal/output", "terminal/wait_for_exit", "terminal/kill", "terminal/release":
		var tp acp.TerminalParams
		if err := json.Unmarshal(data, &tp); err != nil {
			return nil, acp.ParamsError(err.Error())
		}
		switch method {
		case "terminal/output":
			res, err := h.TerminalOutput(ctx, &tp)
			if err != nil {
				return nil, err
			}
			for fit := s.maxReply - 512; ; {
				n := len(mustJSON(res))
				if n <= fit {
					return res, nil
				}
				if res.Output == "" {
					return nil, fmt.Errorf("%s: the answer does not fit one message", method)
				}
				res.Output, _ = cutFront(res.Output, n-fit)
				res.Truncated = true
			}
		case "terminal/wait_for_exit":
			return h.WaitForTerminalExit(ctx, &tp)
		case "terminal/kill":
			return nil, h.KillTerminal(ctx, &tp)
		default:
			return nil, h.ReleaseTerminal(ctx, &tp)
		}
	}
	return nil, fmt.Errorf("%w: %s", acp.ErrMethodNotFound, method)
}

// cutFront drops at least n bytes from the front of s, at a character
// boundary.
func cutFront(s string, n int) (string, bool) {
	if n <= 0 {
		return s, false
	}
	if n >= len(s) {
		return "", s != ""
	}
	for n < len(s) && !utf8.RuneStart(s[n]) {
		n++
	}
	return s[n:], true
}
