package fakeagent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options shape the agent's capabilities and process behaviour.
type Options struct {
	// LoadSession advertises and serves session/load. Sessions are kept as
	// files under <cwd>/.fakeagent, so a new process can load a session an
	// earlier one created; an id with no file is refused.
	LoadSession bool
	// AuthMethod, if set, makes session/new answer "authentication
	// required" until authenticate is called with this method id.
	AuthMethod string
	// StringIDs makes the agent's own request ids strings.
	StringIDs bool
	// NoExitOnEOF keeps the agent running after its stdin closes (until
	// killed, or until ctx ends in-process).
	NoExitOnEOF bool
	// JunkAtStart prints non-JSON lines before anything else.
	JunkAtStart bool
	// NoImages advertises that prompts may not carry images.
	NoImages bool
	// MCPHTTP and MCPSSE advertise MCP servers over http and sse
	// (mcpCapabilities).
	MCPHTTP, MCPSSE bool
	// Executable is the agent's own program, for spawn-child; empty when
	// running in-process.
	Executable string
	// PID names the agent in session ids (os.Getpid() for a real process).
	PID int
	// ConfigOptions offers configuration options (model, mode, a boolean,
	// one of an unknown type); Modes offers the legacy modes; Commands
	// offers slash commands. Choices last as long as the process.
	ConfigOptions, Modes, Commands bool
	// Models are the models offered, by value (nil: fake-small,
	// fake-large and fake-huge), the first the default.
	Models []string
	// EarlyFlood, if set, makes session/new first send Lines updates of
	// Bytes each for each of IDs sessions that never exist.
	EarlyFlood struct{ Lines, Bytes, IDs int }
	// ListSessions, ResumeSession, CloseSession and ForkSession advertise
	// and serve session/list, session/resume, session/close and
	// session/fork (sessionCapabilities) over the sessions kept as files
	// under <cwd>/.fakeagent (see sessions.go). ListPage is how many
	// sessions one page of session/list holds (0: all).
	ListSessions, ResumeSession, CloseSession, ForkSession bool
	ListPage                                               int
	// SessionsDir, if set, keeps the sessions there, for every cwd, as
	// real agents keep theirs in their home, rather than in each cwd.
	SessionsDir string
	// InitDelay and NewSessionDelay hold the answers to initialize and
	// session/new that long, as an agent that loads itself slowly
	// (claude-agent-acp: about 220ms, then about 1s) does.
	InitDelay, NewSessionDelay time.Duration
}

// Serve speaks ACP on in and out until in ends (or, with NoExitOnEOF,
// until ctx ends), a scripted exit, or ctx ending. It returns the exit
// status the process should have. Every goroutine it starts has ended when
// it returns, except the one reading in, which ends when in is closed.
func Serve(ctx context.Context, in io.Reader, out, stderr io.Writer, opts Options) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a := &agent{
		opts:     opts,
		ctx:      ctx,
		out:      bufio.NewWriter(out),
		errw:     stderr,
		waiting:  map[string]chan message{},
		cancels:  map[string]chan struct{}{},
		exitCode: make(chan int, 1),
	}
	if opts.JunkAtStart {
		a.raw("Starting fake agent v0 ...")
		a.raw("loading plugins: none")
	}
	lines := make(chan []byte)
	eof := make(chan struct{})
	go func() {
		defer close(eof)
		r := bufio.NewReaderSize(in, 1<<20)
		for {
			line, err := r.ReadBytes('\n')
			if len(strings.TrimSpace(string(line))) > 0 {
				select {
				case lines <- line:
				case <-ctx.Done():
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer a.wg.Wait()
	defer cancel()
	for {
		select {
		case line := <-lines:
			a.handle(line)
		case <-eof:
			a.logf("stdin closed")
			if !opts.NoExitOnEOF {
				return 0
			}
			eof = nil
		case code := <-a.exitCode:
			return code
		case <-ctx.Done():
			return 137
		}
	}
}

type message struct {
	JSONRPC string           `json:"jsonrpc"`
	ID      *json.RawMessage `json:"id,omitempty"`
	Method  string           `json:"method,omitempty"`
	Params  json.RawMessage  `json:"params,omitempty"`
	Result  json.RawMessage  `json:"result,omitempty"`
	Error   *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

type agent struct {
	opts     Options
	ctx      context.Context // ends when Serve returns
	errw     io.Writer
	exitCode chan int
	wg       sync.WaitGroup

	outMu sync.Mutex
	out   *bufio.Writer

	mu       sync.Mutex
	nextID   int
	waiting  map[string]chan message
	cancels  map[string]chan struct{} // session -> closed on session/cancel
	authed   bool
	sessions int
	cwds     map[string]string
	mcp      map[string]json.RawMessage // session -> mcpServers as received
	resumed  map[string]bool            // loaded, and not yet prompted since
	how      map[string]string          // session -> how this process has it (see sessions.go)
	born     string                     // names this process's sessions (see newSessionIDLocked)
	configs  map[string]*sessionConfig  // session -> its choices
	// clientCaps are the clientCapabilities of initialize.
	clientCaps json.RawMessage
	// asked names the method of each request from the client, by id
	// (the last maxAsked), for $/cancel_request; withdrawn lists the
	// methods of the requests the client withdrew, in order.
	asked     map[string]string
	withdrawn []string
	// held are the answers held back (hold-options), by request id:
	// closed when the client withdraws the request.
	held        map[string]chan struct{}
	holdOptions time.Duration
	// hog is the memory alloc keeps.
	hog [][]byte
}

// Bounds of what the agent remembers of the client's requests.
const (
	maxAsked     = 256
	maxWithdrawn = 64
)

func (a *agent) logf(format string, args ...any) {
	a.outMu.Lock()
	defer a.outMu.Unlock()
	fmt.Fprintf(a.errw, "fakeagent: "+format+"\n", args...)
}

// pause waits d, or until Serve ends; it reports whether it waited d.
func (a *agent) pause(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-a.ctx.Done():
		return false
	}
}

// exit ends Serve with code, as os.Exit would end a process.
func (a *agent) exit(code int) {
	select {
	case a.exitCode <- code:
	default:
	}
}

func (a *agent) raw(s string) {
	a.outMu.Lock()
	defer a.outMu.Unlock()
	a.out.WriteString(s + "\n")
	a.out.Flush()
}

func (a *agent) send(v any) {
	b, _ := json.Marshal(v)
	a.raw(string(b))
}

func (a *agent) reply(id *json.RawMessage, result any) {
	a.send(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

func (a *agent) replyErr(id *json.RawMessage, code int, text string) {
	a.send(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": text}})
}

func (a *agent) update(sid string, u map[string]any) {
	a.send(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{"sessionId": sid, "update": u}})
}

func (a *agent) chunk(sid, text string) {
	a.update(sid, map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": text}})
}

// request sends a request to the client and waits for its answer. idRaw,
// if set, is used verbatim as the id. ok is false if Serve ended first.
func (a *agent) request(method string, params any, idRaw string) (message, bool) {
	a.mu.Lock()
	id := idRaw
	if id == "" {
		if a.opts.StringIDs {
			id = strconv.Quote(fmt.Sprintf("req-%08x-%d", a.opts.PID, a.nextID))
		} else {
			id = strconv.Itoa(a.nextID)
		}
		a.nextID++
	}
	ch := make(chan message, 1)
	a.waiting[id] = ch
	a.mu.Unlock()
	raw := json.RawMessage(id)
	a.send(map[string]any{"jsonrpc": "2.0", "id": &raw, "method": method, "params": params})
	select {
	case m := <-ch:
		return m, true
	case <-a.ctx.Done():
		return message{}, false
	}
}

func (a *agent) handle(line []byte) {
	var m message
	if err := json.Unmarshal(line, &m); err != nil {
		a.logf("bad line: %v", err)
		return
	}
	if m.Method == "" {
		if m.ID == nil {
			return
		}
		a.mu.Lock()
		ch := a.waiting[string(*m.ID)]
		delete(a.waiting, string(*m.ID))
		a.mu.Unlock()
		if ch != nil {
			ch <- m
		}
		return
	}
	if m.ID != nil {
		a.mu.Lock()
		if a.asked == nil || len(a.asked) >= maxAsked {
			a.asked = map[string]string{}
		}
		a.asked[string(*m.ID)] = m.Method
		a.mu.Unlock()
	}
	switch m.Method {
	case "initialize":
		if !a.pause(a.opts.InitDelay) {
			return
		}
		var init struct {
			ClientCapabilities json.RawMessage `json:"clientCapabilities"`
		}
		json.Unmarshal(m.Params, &init)
		a.mu.Lock()
		a.clientCaps = init.ClientCapabilities
		a.mu.Unlock()
		var auth []any
		if a.opts.AuthMethod != "" {
			auth = []any{map[string]string{"id": a.opts.AuthMethod, "name": a.opts.AuthMethod}}
		}
		a.reply(m.ID, map[string]any{"protocolVersion": 1, "authMethods": auth,
			"agentInfo": map[string]string{"name": "fakeagent", "version": "1"},
			"agentCapabilities": map[string]any{
				"loadSession":         a.opts.LoadSession,
				"promptCapabilities":  map[string]bool{"image": !a.opts.NoImages, "embeddedContext": true},
				"mcpCapabilities":     map[string]bool{"http": a.opts.MCPHTTP, "sse": a.opts.MCPSSE},
				"sessionCapabilities": a.sessionCapabilities()}})
	case "authenticate":
		var p struct{ MethodID string }
		json.Unmarshal(m.Params, &p)
		if p.MethodID != a.opts.AuthMethod {
			a.replyErr(m.ID, -32602, "unknown auth method")
			return
		}
		a.mu.Lock()
		a.authed = true
		a.mu.Unlock()
		a.reply(m.ID, map[string]any{})
	case "session/new":
		if !a.pause(a.opts.NewSessionDelay) {
			return
		}
		a.newSession(m)
	case "session/load":
		a.loadSession(m)
	case "session/list", "session/resume", "session/close", "session/fork":
		a.sessionMethod(m)
	case "session/prompt":
		var p promptParams
		json.Unmarshal(m.Params, &p)
		// The cancel channel exists before the next line is read, so a
		// session/cancel right behind the prompt is never lost.
		cancel := make(chan struct{})
		a.mu.Lock()
		a.cancels[p.SessionID] = cancel
		a.mu.Unlock()
		a.wg.Go(func() { a.prompt(m.ID, &p, cancel) })
	case "session/set_config_option":
		a.setConfigOption(m)
	case "session/set_mode":
		a.setMode(m)
	case "session/cancel":
		var p struct{ SessionID string }
		json.Unmarshal(m.Params, &p)
		a.logf("got session/cancel")
		a.mu.Lock()
		if ch, ok := a.cancels[p.SessionID]; ok {
			close(ch)
			delete(a.cancels, p.SessionID)
		}
		a.mu.Unlock()
	case "$/cancel_request":
		// Noted (see "withdrawn"); a held answer is given up, answered
		// -32800; a prompt ends by session/cancel as before.
		a.logf("got $/cancel_request %s", m.Params)
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		json.Unmarshal(m.Params, &p)
		a.mu.Lock()
		method, ok := a.asked[string(p.RequestID)]
		if !ok {
			method = "unknown request " + string(p.RequestID)
		}
		if len(a.withdrawn) < maxWithdrawn {
			a.withdrawn = append(a.withdrawn, method)
		}
		if ch := a.held[string(p.RequestID)]; ch != nil {
			close(ch)
			delete(a.held, string(p.RequestID))
		}
		a.mu.Unlock()
	default:
		if m.ID != nil {
			a.replyErr(m.ID, -32601, "method not found: "+m.Method)
		}
	}
}

func (a *agent) newSession(m message) {
	var p struct {
		Cwd        string          `json:"cwd"`
		MCPServers json.RawMessage `json:"mcpServers"`
	}
	json.Unmarshal(m.Params, &p)
	a.mu.Lock()
	if a.opts.AuthMethod != "" && !a.authed {
		a.mu.Unlock()
		a.replyErr(m.ID, -32000, "authentication required")
		return
	}
	if !filepath.IsAbs(p.Cwd) {
		a.mu.Unlock()
		a.replyErr(m.ID, -32602, "cwd must be absolute")
		return
	}
	sid := a.newSessionIDLocked()
	a.remember(sid, p.Cwd, p.MCPServers)
	a.setHowLocked(sid, "new")
	a.mu.Unlock()
	if a.opts.LoadSession || a.kept() {
		a.appendHistory(sid, "")
	}
	// Real agents send updates before the session/new answer.
	a.commands(sid)
	if f := a.opts.EarlyFlood; f.Lines > 0 {
		a.unknownSessions(f.Lines, f.Bytes, f.IDs)
	}
	a.reply(m.ID, a.setup(sid, map[string]any{"sessionId": sid}))
}

func (a *agent) remember(sid, cwd string, mcp json.RawMessage) {
	if a.cwds == nil {
		a.cwds = map[string]string{}
		a.mcp = map[string]json.RawMessage{}
	}
	a.cwds[sid] = cwd
	a.mcp[sid] = mcp
}

func (a *agent) loadSession(m message) {
	if !a.opts.LoadSession {
		a.replyErr(m.ID, -32601, "method not found")
		return
	}
	var p struct {
		SessionID  string          `json:"sessionId"`
		Cwd        string          `json:"cwd"`
		MCPServers json.RawMessage `json:"mcpServers"`
	}
	json.Unmarshal(m.Params, &p)
	b, err := os.ReadFile(a.historyPath(p.Cwd, p.SessionID))
	if err != nil {
		a.replyErr(m.ID, -32002, "session not found: "+p.SessionID)
		return
	}
	a.mu.Lock()
	a.remember(p.SessionID, p.Cwd, p.MCPServers)
	a.setHowLocked(p.SessionID, "loaded")
	if a.resumed == nil {
		a.resumed = map[string]bool{}
	}
	a.resumed[p.SessionID] = true
	a.mu.Unlock()
	for _, h := range strings.Split(string(b), "\n") {
		if h != "" {
			a.update(p.SessionID, map[string]any{"sessionUpdate": "user_message_chunk", "content": map[string]any{"type": "text", "text": h}})
		}
	}
	if a.opts.ConfigOptions || a.opts.Modes {
		a.reply(m.ID, a.setup(p.SessionID, map[string]any{}))
	} else {
		a.reply(m.ID, nil)
	}
	if a.opts.Commands {
		a.commands(p.SessionID)
	}
}

// historyPath is the file of session sid's prompts: under
// Options.SessionsDir when set, else under <cwd>/.fakeagent.
func (a *agent) historyPath(cwd, sid string) string {
	return filepath.Join(a.sessionsDir(cwd), filepath.Base(sid))
}

// sessionsDir is where the sessions of cwd are kept.
func (a *agent) sessionsDir(cwd string) string {
	if a.opts.SessionsDir != "" {
		return a.opts.SessionsDir
	}
	return filepath.Join(cwd, ".fakeagent")
}

// appendHistory records a prompt of a loadable session on disk.
func (a *agent) appendHistory(sid, text string) {
	a.mu.Lock()
	cwd := a.cwds[sid]
	a.mu.Unlock()
	if cwd == "" {
		return
	}
	path := a.historyPath(cwd, sid)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		a.logf("history: %v", err)
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		a.logf("history: %v", err)
		return
	}
	defer f.Close()
	if a.opts.SessionsDir != "" {
		os.WriteFile(path+".cwd", []byte(cwd), 0o644)
	}
	if text != "" {
		fmt.Fprintln(f, strings.ReplaceAll(text, "\n", " "))
	}
}

type promptParams struct {
	SessionID string `json:"sessionId"`
	Prompt    []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"prompt"`
}
