package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"acpbroker/acp"

	"github.com/rs/zerolog"
)

// Generous bounds: the machine is small and shared, and a Node agent's
// first session can take seconds.
const (
	startTimeout = 60 * time.Second
	turnTimeout  = 60 * time.Second
	// lateGrace is how long a finished turn keeps listening for updates the
	// agent sends after its answer.
	lateGrace = 500 * time.Millisecond
)

// modulesDir is testdata/interop/node_modules, where `npm ci` installs the
// agents.
func modulesDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "testdata", "interop", "node_modules"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// requireFile skips the test when an agent's entry point is not installed.
func requireFile(t *testing.T, path, agent string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s is not installed (%s missing): run `npm ci` in testdata/interop", agent, path)
	}
}

// baseEnv is the environment every agent gets: no inherited secrets or
// configuration, a private HOME, and the PATH to find node and a shell.
func baseEnv(home string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	return []string{
		"PATH=" + path,
		"HOME=" + home,
		"LANG=C.UTF-8",
		"TMPDIR=" + os.TempDir(),
	}
}

// testLog forwards an agent's stderr to the test log, line by line, until
// the test's cleanup turns it off.
type testLog struct {
	mu     sync.Mutex
	t      *testing.T
	prefix string
	buf    []byte
	off    bool
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.off {
		return len(p), nil
	}
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		line := string(l.buf[:i])
		l.buf = l.buf[i+1:]
		if len(line) > 400 {
			line = line[:400] + "…"
		}
		l.t.Logf("%s stderr: %s", l.prefix, line)
	}
	if len(l.buf) > 64<<10 {
		l.buf = l.buf[:0]
	}
	return len(p), nil
}

func (l *testLog) stop() {
	l.mu.Lock()
	l.off = true
	l.mu.Unlock()
}

// wireMsg is one JSON-RPC line seen on the agent's stdio.
type wireMsg struct {
	At     time.Time
	Out    bool // true: client to agent
	Method string
	ID     json.RawMessage // as written, byte for byte
	Result bool            // a response (result or error)
	Params json.RawMessage
	Raw    []byte
}

// wire records every line both ways, so tests can look at ids and order
// as they were on the pipe.
type wire struct {
	mu   sync.Mutex
	msgs []wireMsg
	junk int
}

func (w *wire) add(out bool, line []byte) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return
	}
	var m struct {
		Method string          `json:"method"`
		ID     json.RawMessage `json:"id"`
		Params json.RawMessage `json:"params"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if json.Unmarshal(line, &m) != nil {
		w.junk++
		return
	}
	w.msgs = append(w.msgs, wireMsg{
		At: time.Now(), Out: out, Method: m.Method, ID: m.ID, Params: m.Params,
		Result: m.Method == "" && (m.Result != nil || m.Error != nil),
		Raw:    bytes.Clone(line),
	})
}

func (w *wire) snapshot() []wireMsg {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.msgs)
}

// tap copies the lines flowing through an io.ReadCloser or io.WriteCloser
// into a wire record.
type tap struct {
	w   *wire
	out bool
	buf []byte
}

func (t *tap) feed(p []byte) {
	t.buf = append(t.buf, p...)
	for {
		i := bytes.IndexByte(t.buf, '\n')
		if i < 0 {
			break
		}
		t.w.add(t.out, t.buf[:i])
		t.buf = t.buf[i+1:]
	}
	if len(t.buf) > 64<<20 {
		t.buf = nil
	}
}

type tapReader struct {
	io.ReadCloser
	tap
}

func (r *tapReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.feed(p[:n])
	return n, err
}

type tapWriter struct {
	io.WriteCloser
	mu sync.Mutex
	tap
}

func (w *tapWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.feed(p)
	w.mu.Unlock()
	return w.WriteCloser.Write(p)
}

// agentSpec says how to run one agent. The process starts in a fresh
// directory; sessions get their own.
type agentSpec struct {
	Name    string
	Command string
	Args    []string
	Env     []string
}

// agent is a running agent process with an acp.Conn on its stdio.
type agent struct {
	t       *testing.T
	name    string
	cmd     *exec.Cmd
	pid     int
	conn    *acp.Conn
	stdin   *os.File // our end of its stdin; the Conn closes it too
	wire    *wire
	stderr  *testLog
	exited  chan struct{}
	started time.Time
}

// startAgent runs spec in its own process group, with its stdio on pipes
// that only the acp.Conn reads and writes. Cleanup closes the Conn and
// kills the whole group.
func startAgent(t *testing.T, spec agentSpec) *agent {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &testLog{t: t, prefix: spec.Name}
	cmd := exec.Command(spec.Command, spec.Args...)
	cmd.Env = spec.Env
	cmd.Dir = t.TempDir()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 2 * time.Second
	a := &agent{t: t, name: spec.Name, cmd: cmd, stdin: inW, wire: &wire{}, stderr: stderr, exited: make(chan struct{})}
	a.started = time.Now()
	if err := cmd.Start(); err != nil {
		for _, f := range []*os.File{inR, inW, outR, outW} {
			f.Close()
		}
		t.Fatalf("start %s: %v", spec.Name, err)
	}
	inR.Close()
	outW.Close()
	a.pid = cmd.Process.Pid
	go func() {
		_ = cmd.Wait()
		close(a.exited)
	}()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel).With().Str("agent", spec.Name).Logger()
	a.conn = acp.NewConn(
		&tapReader{ReadCloser: outR, tap: tap{w: a.wire}},
		&tapWriter{WriteCloser: inW, tap: tap{w: a.wire, out: true}},
		acp.Options{Logger: log, ClientInfo: acp.Implementation{Name: "acpbroker-interop", Version: "test"}},
	)
	t.Cleanup(func() {
		if t.Failed() {
			a.dumpWire()
		}
		st := a.conn.Stats()
		a.wire.mu.Lock()
		junk := a.wire.junk
		a.wire.mu.Unlock()
		t.Logf("%s: conn stats at the end: late updates %d, stale responses %d, junk lines %d (wire: %d), bad messages %d, pending requests %d, pending permissions %d",
			a.name, st.LateUpdates, st.StaleResponses, st.JunkLines, junk, st.BadMessages, st.PendingRequests, st.PendingPermissions)
		a.conn.Close()
		a.killGroup()
		select {
		case <-a.exited:
		case <-time.After(10 * time.Second):
			t.Errorf("%s (pid %d) not reaped 10s after SIGKILL", a.name, a.pid)
		}
		stderr.stop()
	})
	return a
}

func (a *agent) killGroup() {
	if err := syscall.Kill(-a.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		a.t.Logf("kill group %d: %v", a.pid, err)
	}
}

func (a *agent) dumpWire() {
	for _, m := range a.wire.snapshot() {
		dir := "<-"
		if m.Out {
			dir = "->"
		}
		raw := string(m.Raw)
		if len(raw) > 6000 {
			raw = raw[:6000] + "…"
		}
		a.t.Logf("%s %s +%v %s", a.name, dir, m.At.Sub(a.started).Round(time.Millisecond), raw)
	}
}

// handshake initializes the agent and opens one session in a fresh
// directory, with the MCP servers given. It returns the session id and the
// directory.
func (a *agent) handshake(ctx context.Context, servers ...acp.MCPServer) (*acp.InitializeResult, string, string) {
	a.t.Helper()
	init, err := a.conn.Initialize(ctx)
	if err != nil {
		a.t.Fatalf("%s: %v", a.name, err)
	}
	a.t.Logf("%s: initialize after %v: agent %+v, caps %+v, auth methods %d", a.name, time.Since(a.started).Round(time.Millisecond), init.AgentInfo, init.AgentCapabilities, len(init.AuthMethods))
	cwd := a.t.TempDir()
	t0 := time.Now()
	sid, early, err := a.conn.NewSession(ctx, cwd, servers)
	if err != nil {
		a.t.Fatalf("%s: %v", a.name, err)
	}
	a.t.Logf("%s: session/new took %v (ready %v after start): id %q, %d early updates", a.name, time.Since(t0).Round(time.Millisecond), time.Since(a.started).Round(time.Millisecond), sid, len(early))
	return init, sid, cwd
}

// descendants lists the processes below the agent (children, their
// children, ...) as "pid comm" strings.
func (a *agent) descendants() []string {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parent := map[int]int{}
	comm := map[int]string{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		fields := strings.Fields(s[close+1:])
		if len(fields) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		parent[pid] = ppid
		comm[pid] = s[open+1 : close]
		if cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && len(cmdline) > 0 {
			c := strings.Join(strings.Fields(strings.ReplaceAll(string(cmdline), "\x00", " ")), " ")
			if len(c) > 120 {
				c = c[:120] + "…"
			}
			comm[pid] = c
		}
	}
	var out []string
	var walk func(pid, depth int)
	walk = func(pid, depth int) {
		for child, pp := range parent {
			if pp == pid {
				out = append(out, fmt.Sprintf("%s%d %s", strings.Repeat("  ", depth), child, comm[child]))
				walk(child, depth+1)
			}
		}
	}
	walk(a.pid, 0)
	return out
}

// groupMembers lists the live processes in the agent's process group.
func (a *agent) groupMembers() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) < 3 || fields[0] == "Z" || fields[0] == "X" {
			continue
		}
		if pgrp, _ := strconv.Atoi(fields[2]); pgrp == a.pid {
			out = append(out, pid)
		}
	}
	return out
}

// approver answers permission requests through decide and keeps every
// request it saw.
type approver struct {
	decide func(ctx context.Context, req *acp.PermissionRequest) acp.PermissionOutcome
	seen   chan *acp.PermissionRequest
}

func newApprover(decide func(ctx context.Context, req *acp.PermissionRequest) acp.PermissionOutcome) *approver {
	return &approver{decide: decide, seen: make(chan *acp.PermissionRequest, 16)}
}

func (p *approver) Approve(ctx context.Context, req *acp.PermissionRequest) acp.PermissionOutcome {
	select {
	case p.seen <- req:
	default:
	}
	return p.decide(ctx, req)
}

// allowOnce picks the agent's allow_once option (any allow option if it
// offers none).
func allowOnce(_ context.Context, req *acp.PermissionRequest) acp.PermissionOutcome {
	for _, o := range req.Options {
		if o.Kind == acp.OptionAllowOnce {
			return acp.PermissionOutcome{OptionID: o.OptionID}
		}
	}
	o, _ := req.FirstOption("allow")
	return acp.PermissionOutcome{OptionID: o.OptionID}
}

// holdUntilCancelled never decides: it waits until the request is
// cancelled (or the turn ends), and the Conn then answers "cancelled".
func holdUntilCancelled(ctx context.Context, _ *acp.PermissionRequest) acp.PermissionOutcome {
	<-ctx.Done()
	return acp.PermissionOutcome{}
}

// turn is one running session/prompt with its subscription.
type turn struct {
	a       *agent
	sid     string
	call    *acp.Call
	sub     *acp.Subscription
	started time.Time

	mu      sync.Mutex
	updates []acp.Update
	first   chan struct{} // closed at the first update
	done    chan struct{} // closed when collection stopped
}

// startTurn subscribes to sid and sends a prompt with text.
func (a *agent) startTurn(ctx context.Context, sid, text string, appr acp.Approver) *turn {
	a.t.Helper()
	sub, err := a.conn.Subscribe(sid, appr)
	if err != nil {
		a.t.Fatalf("%s: subscribe: %v", a.name, err)
	}
	call, err := a.conn.Prompt(ctx, sid, []acp.ContentBlock{acp.TextBlock(text)})
	if err != nil {
		sub.Close()
		a.t.Fatalf("%s: prompt: %v", a.name, err)
	}
	tn := &turn{a: a, sid: sid, call: call, sub: sub, started: time.Now(), first: make(chan struct{}), done: make(chan struct{})}
	go tn.collect()
	return tn
}

func (tn *turn) collect() {
	defer close(tn.done)
	var grace <-chan time.Time
	callDone := tn.call.Done()
	for {
		select {
		case u := <-tn.sub.Updates():
			tn.mu.Lock()
			if len(tn.updates) == 0 {
				close(tn.first)
			}
			tn.updates = append(tn.updates, u)
			tn.mu.Unlock()
		case <-callDone:
			callDone = nil
			grace = time.After(lateGrace)
		case <-grace:
			return
		}
	}
}

// turnResult is how a turn ended.
type turnResult struct {
	Stop    string
	Err     error
	Elapsed time.Duration // prompt sent to answer received
	Updates []acp.Update  // including the ones after the answer, within lateGrace
}

// wait waits for the answer (bounded), then for the late-update grace, and
// closes the subscription.
func (tn *turn) wait() turnResult {
	tn.a.t.Helper()
	select {
	case <-tn.call.Done():
	case <-time.After(turnTimeout):
		tn.call.Abandon()
		tn.a.t.Fatalf("%s: no answer to session/prompt within %v", tn.a.name, turnTimeout)
	}
	elapsed := time.Since(tn.started)
	var res acp.PromptResult
	err := tn.call.Result(&res)
	<-tn.done
	tn.sub.Close()
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return turnResult{Stop: res.StopReason, Err: err, Elapsed: elapsed, Updates: slices.Clone(tn.updates)}
}

// messageText joins the agent_message_chunk texts of updates.
func messageText(updates []acp.Update) string {
	var b strings.Builder
	for _, u := range updates {
		if u.Kind == acp.UpdateMessageChunk && u.Content != nil {
			b.WriteString(u.Content.Text)
		}
	}
	return b.String()
}

// kinds lists the update kinds in order, repeats collapsed.
func kinds(updates []acp.Update) string {
	var out []string
	for _, u := range updates {
		if len(out) > 0 && out[len(out)-1] == u.Kind {
			continue
		}
		out = append(out, u.Kind)
	}
	return strings.Join(out, ",")
}

// promptWire finds the prompt request for call on the wire, its response,
// and the session updates the agent wrote after that response.
func (a *agent) promptWire(call *acp.Call, sid string) (answered bool, after []wireMsg) {
	id := call.ID.String()
	var reqSeen bool
	for _, m := range a.wire.snapshot() {
		switch {
		case m.Out && m.Method == acp.MethodSessionPrompt && string(m.ID) == id:
			reqSeen = true
		case reqSeen && !m.Out && m.Result && string(m.ID) == id:
			answered = true
		case answered && !m.Out && m.Method == acp.MethodSessionUpdate && bytes.Contains(m.Params, []byte(sid)):
			after = append(after, m)
		}
	}
	return answered, after
}

// permissionIDs returns the raw ids of the agent's permission requests.
func (a *agent) permissionIDs() []string {
	var out []string
	for _, m := range a.wire.snapshot() {
		if !m.Out && m.Method == acp.MethodRequestPermission {
			out = append(out, string(m.ID))
		}
	}
	return out
}

// permissionAnswers returns our raw answers to permission requests.
func (a *agent) permissionAnswers() []string {
	reqs := map[string]bool{}
	var out []string
	for _, m := range a.wire.snapshot() {
		if !m.Out && m.Method == acp.MethodRequestPermission {
			reqs[string(m.ID)] = true
		}
		if m.Out && m.Result && reqs[string(m.ID)] {
			out = append(out, string(m.Raw))
		}
	}
	return out
}

// idKind says whether a raw JSON id is a number or a string.
func idKind(raw string) string {
	switch {
	case strings.HasPrefix(raw, `"`):
		return "string"
	case raw == "" || raw == "null":
		return "none"
	default:
		return "number"
	}
}

// waitExit waits up to d for the agent process to exit.
func (a *agent) waitExit(d time.Duration) bool {
	select {
	case <-a.exited:
		return true
	case <-time.After(d):
		return false
	}
}

// pollUntil checks cond every interval until it holds or ctx ends.
func pollUntil(ctx context.Context, every time.Duration, cond func() bool) bool {
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(every):
		}
	}
}
