package host

import (
	"acpbroker/acp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// plainTerminal runs terminal commands as asked, with the request's
// environment and a PATH: no sandbox.
func plainTerminal(cmd Command) (Command, error) {
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, cmd.Env...)
	return cmd, nil
}

// termPeer is an agent that asks for terminals: one request at a time,
// or several in flight, each reply matched by id.
type termPeer struct {
	*peer
	mu      sync.Mutex
	seq     int
	replies map[string]chan map[string]json.RawMessage
}

func newTermPair(t *testing.T, opts Options) (*pair, *termPeer, string) {
	t.Helper()
	if opts.Terminal == nil {
		opts.Terminal = plainTerminal
	}
	c, p := newPair(t, opts)
	root := t.TempDir()
	c.register("s", root)
	tp := &termPeer{peer: p, replies: map[string]chan map[string]json.RawMessage{}}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case m := <-p.Msg:
				tp.mu.Lock()
				ch := tp.replies[string(m["id"])]
				delete(tp.replies, string(m["id"]))
				tp.mu.Unlock()
				if ch != nil {
					ch <- m
				}
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return c, tp, root
}

// start sends a request and returns where its reply will arrive.
func (p *termPeer) start(method string, params map[string]any) <-chan map[string]json.RawMessage {
	p.T.Helper()
	if _, ok := params["sessionId"]; !ok {
		params["sessionId"] = "s"
	}
	p.mu.Lock()
	p.seq++
	id := strconv.Itoa(1000 + p.seq)
	ch := make(chan map[string]json.RawMessage, 1)
	p.replies[id] = ch
	p.mu.Unlock()
	b, _ := json.Marshal(params)
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":%q,"params":%s}`, id, method, b))
	return ch
}

func (p *termPeer) await(ch <-chan map[string]json.RawMessage, within time.Duration) map[string]json.RawMessage {
	p.T.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(within):
		p.T.Fatalf("no reply within %s", within)
		return nil
	}
}

// call sends a request and waits for its reply.
func (p *termPeer) call(method string, params map[string]any) map[string]json.RawMessage {
	p.T.Helper()
	return p.await(p.start(method, params), 10*time.Second)
}

// result decodes a reply's result, failing on an error reply.
func (p *termPeer) result(m map[string]json.RawMessage, v any) {
	p.T.Helper()
	if e, ok := m["error"]; ok {
		p.T.Fatalf("error reply: %s", e)
	}
	if v != nil {
		if err := json.Unmarshal(m["result"], v); err != nil {
			p.T.Fatalf("result %s: %v", m["result"], err)
		}
	}
}

func (p *termPeer) create(params map[string]any) string {
	p.T.Helper()
	var res struct{ TerminalID string }
	p.result(p.call(acp.MethodTerminalCreate, params), &res)
	if res.TerminalID == "" {
		p.T.Fatal("terminal/create gave no terminalId")
	}
	return res.TerminalID
}

func errorOf(m map[string]json.RawMessage) (int, string) {
	var e struct {
		Code    int
		Message string
	}
	json.Unmarshal(m["error"], &e)
	return e.Code, e.Message
}

// alive reports whether pid is a running process (not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

func awaitGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs after %s", pid, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// awaitOutput polls terminal/output until it holds want.
func (p *termPeer) awaitOutput(id, want string) string {
	p.T.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var res struct{ Output string }
		p.result(p.call(acp.MethodTerminalOutput, map[string]any{"terminalId": id}), &res)
		if strings.Contains(res.Output, want) {
			return res.Output
		}
		if time.Now().After(deadline) {
			p.T.Fatalf("terminal output %q never held %q", res.Output, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A Conn serving through a Host offers files always, and terminals only
// when the Host has a hook to start their commands with.
func TestInitialize_OffersFilesAndTerminalsOnlyWithAHook(t *testing.T) {
	for _, offer := range []bool{false, true} {
		var opts Options
		if offer {
			opts.Terminal = plainTerminal
		}
		c, p := newPair(t, opts)
		done := make(chan error, 1)
		go func() { _, err := c.conn.Initialize(t.Context()); done <- err }()
		req := p.NextMethod("initialize")
		var params struct {
			ClientCapabilities struct {
				FS       struct{ ReadTextFile, WriteTextFile bool }
				Terminal bool
			}
		}
		json.Unmarshal(req["params"], &params)
		if params.ClientCapabilities.Terminal != offer {
			t.Errorf("with the hook %v, clientCapabilities.terminal = %v", offer, params.ClientCapabilities.Terminal)
		}
		if fs := params.ClientCapabilities.FS; !fs.ReadTextFile || !fs.WriteTextFile {
			t.Errorf("clientCapabilities.fs = %+v, want both offered", fs)
		}
		p.Reply(req, `{"protocolVersion":1}`)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func TestTerminal_CreateOutputWaitRelease(t *testing.T) {
	c, p, root := newTermPair(t, Options{})
	os.Mkdir(filepath.Join(root, "sub"), 0o755)
	id := p.create(map[string]any{"command": "sh", "args": []string{"-c", `echo "out $GREETING"; pwd; echo err >&2; exit 3`},
		"env": []map[string]string{{"name": "GREETING", "value": "hello"}}, "cwd": filepath.Join(root, "sub")})
	if n := c.Stats().TerminalsOpen; n != 1 {
		t.Fatalf("TerminalsOpen = %d after create, want 1", n)
	}
	var exit acp.TerminalExitStatus
	p.result(p.call(acp.MethodTerminalWaitForExit, map[string]any{"terminalId": id}), &exit)
	if exit.ExitCode == nil || *exit.ExitCode != 3 || exit.Signal != nil {
		t.Fatalf("wait_for_exit = %+v, want exit code 3", exit)
	}
	var out acp.TerminalOutputResult
	p.result(p.call(acp.MethodTerminalOutput, map[string]any{"terminalId": id}), &out)
	want := "out hello\n" + filepath.Join(root, "sub") + "\nerr\n"
	if out.Output != want || out.Truncated || out.ExitStatus == nil || *out.ExitStatus.ExitCode != 3 {
		t.Fatalf("output = %+v, want %q with exit status 3", out, want)
	}
	if o, ok := c.Output("s", id, 4); !ok || o.Output != "err\n" || o.Exit == nil {
		t.Fatalf("acp.TerminalOutput tail = %+v, %v", o, ok)
	}
	p.result(p.call(acp.MethodTerminalRelease, map[string]any{"terminalId": id}), nil)
	if code, msg := errorOf(p.call(acp.MethodTerminalOutput, map[string]any{"terminalId": id})); code != acp.CodeInvalidParams || !strings.Contains(msg, "unknown terminal") {
		t.Fatalf("output after release = %d %q, want an unknown terminal", code, msg)
	}
	if o, ok := c.Output("s", id, -1); !ok || o.Output != want {
		t.Fatalf("a terminal just released is not shown any more: %+v, %v", o, ok)
	}
	if n := c.Stats().TerminalsOpen; n != 0 {
		t.Fatalf("TerminalsOpen = %d after release, want 0", n)
	}
	// Another session cannot see it, nor a missing command start.
	if code, _ := errorOf(p.call(acp.MethodTerminalCreate, map[string]any{"command": "no-such-command-here"})); code != acp.CodeInvalidParams {
		t.Fatalf("a missing command answered %d, want %d", code, acp.CodeInvalidParams)
	}
}

func TestTerminal_OutputKeepsTheEndWithinTheLimitOnACharacterBoundary(t *testing.T) {
	_, p, _ := newTermPair(t, Options{MaxTerminalBytes: 7})
	// Ten bytes, five two-byte characters.
	id := p.create(map[string]any{"command": "printf", "args": []string{"ééééé"}, "outputByteLimit": 5})
	p.result(p.call(acp.MethodTerminalWaitForExit, map[string]any{"terminalId": id}), nil)
	var out acp.TerminalOutputResult
	p.result(p.call(acp.MethodTerminalOutput, map[string]any{"terminalId": id}), &out)
	if out.Output != "éé" || !out.Truncated {
		t.Fatalf("output = %q truncated=%v, want the last whole characters within 5 bytes, truncated", out.Output, out.Truncated)
	}
	// The broker's cap wins over a larger limit.
	id = p.create(map[string]any{"command": "printf", "args": []string{"0123456789"}, "outputByteLimit": 1000})
	p.result(p.call(acp.MethodTerminalWaitForExit, map[string]any{"terminalId": id}), nil)
	p.result(p.call(acp.MethodTerminalOutput, map[string]any{"terminalId": id}), &out)
	if out.Output != "3456789" || !out.Truncated {
		t.Fatalf("output = %q truncated=%v, want the last 7 bytes", out.Output, out.Truncated)
	}
}

func TestTerminal_CwdOutsideTheSessionIsRefused(t *testing.T) {
	_, p, root := newTermPair(t, Options{})
	outside := t.TempDir()
	os.Symlink(outside, filepath.Join(root, "link"))
	for _, cwd := range []string{outside, filepath.Join(root, ".."), filepath.Join(root, "link"), "relative", filepath.Join(root, "missing")} {
		code, msg := errorOf(p.call(acp.MethodTerminalCreate, map[string]any{"command": "true", "cwd": cwd}))
		if code != acp.CodeInvalidParams {
			t.Errorf("cwd %s answered %d %q, want %d", cwd, code, msg, acp.CodeInvalidParams)
		}
	}
}

func TestTerminal_PastTheCapCreateIsRefusedClearly(t *testing.T) {
	c, p, _ := newTermPair(t, Options{MaxTerminals: 2})
	for range 2 {
		p.create(map[string]any{"command": "sleep", "args": []string{"30"}})
	}
	code, msg := errorOf(p.call(acp.MethodTerminalCreate, map[string]any{"command": "true"}))
	if code == 0 || !strings.Contains(msg, "too many terminals") || !strings.Contains(msg, "release one first") {
		t.Fatalf("the third terminal answered %d %q, want a refusal that says why", code, msg)
	}
	c.ReleaseTerminals("s")
	if n := c.Stats().TerminalsOpen; n != 0 {
		t.Fatalf("TerminalsOpen = %d after ReleaseTerminals, want 0", n)
	}
	p.create(map[string]any{"command": "true"})
}

// A command that ignores SIGTERM, with a child that does too, is killed
// with SIGKILL once the grace has passed; wait_for_exit, waiting all
// along, then answers.
func TestTerminal_KillEscalatesToSIGKILLAfterTheGrace(t *testing.T) {
	const grace = 300 * time.Millisecond
	_, p, _ := newTermPair(t, Options{TerminalGrace: grace})
	id := p.create(map[string]any{"command": "sh", "args": []string{"-c", `trap "" TERM; sleep 60 & echo "child $!"; echo ready; wait`}})
	out := p.awaitOutput(id, "ready")
	var child int
	fmt.Sscanf(out, "child %d", &child)
	waiting := p.start(acp.MethodTerminalWaitForExit, map[string]any{"terminalId": id})
	start := time.Now()
	p.result(p.call(acp.MethodTerminalKill, map[string]any{"terminalId": id}), nil)
	if took := time.Since(start); took < grace {
		t.Fatalf("kill took %s, less than the grace %s: SIGTERM was not ignored?", took, grace)
	}
	var exit acp.TerminalExitStatus
	p.result(p.await(waiting, 5*time.Second), &exit)
	if exit.Signal == nil || *exit.Signal != "SIGKILL" {
		t.Fatalf("wait_for_exit = %+v, want killed by SIGKILL", exit)
	}
	awaitGone(t, child, 5*time.Second)
	// Killed, the id stays valid.
	var res acp.TerminalOutputResult
	p.result(p.call(acp.MethodTerminalOutput, map[string]any{"terminalId": id}), &res)
	if res.ExitStatus == nil || res.ExitStatus.Signal == nil {
		t.Fatalf("output after kill = %+v, want the exit status", res)
	}
}

// Ending a session's terminals ends their grandchildren: the whole
// process group goes, and Close ends a wait_for_exit still waiting.
func TestTerminal_KillTerminalsEndsGrandchildrenAndCloseEndsTheRest(t *testing.T) {
	c, p, _ := newTermPair(t, Options{TerminalGrace: 200 * time.Millisecond})
	id := p.create(map[string]any{"command": "sh", "args": []string{"-c", `sh -c 'sleep 60' & echo "child $!"; while :; do sleep 0.05; done`}})
	var child int
	fmt.Sscanf(p.awaitOutput(id, "child"), "child %d", &child)
	p.create(map[string]any{"command": "sleep", "args": []string{"60"}})
	c.KillTerminals("s")
	awaitGone(t, child, 5*time.Second)
	var exit acp.TerminalExitStatus
	p.result(p.call(acp.MethodTerminalWaitForExit, map[string]any{"terminalId": id}), &exit)
	if exit.Signal == nil {
		t.Fatalf("wait_for_exit after KillTerminals = %+v, want a signal", exit)
	}
	if n := c.Stats().TerminalsOpen; n != 2 {
		t.Fatalf("TerminalsOpen = %d after KillTerminals, want 2: killed ids stay valid", n)
	}

	// A fresh long command, and a wait on it that Close must end.
	long := p.create(map[string]any{"command": "sh", "args": []string{"-c", `echo $$; exec sleep 60`}})
	var pid int
	fmt.Sscanf(p.awaitOutput(long, "\n"), "%d", &pid)
	waiting := p.start(acp.MethodTerminalWaitForExit, map[string]any{"terminalId": long})
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return with a terminal running and a wait_for_exit in flight")
	}
	if alive(pid) {
		t.Fatalf("terminal command %d outlived Close", pid)
	}
	select {
	case <-waiting:
	default:
		// Close may win over the reply's write; either is fine, as long
		// as Close returned.
	}
	if n := c.Stats(); n.TerminalsOpen != 0 || n.AgentRequests != 0 {
		t.Fatalf("after Close: %+v", n)
	}
}

// Turns that create terminals and are abandoned leave none behind.
func TestTerminal_ManyReleasedSessionsReturnTheTableToZero(t *testing.T) {
	c, p, _ := newTermPair(t, Options{MaxTerminals: 3, TerminalGrace: 100 * time.Millisecond})
	for range 20 {
		for range 3 {
			p.create(map[string]any{"command": "sleep", "args": []string{"60"}})
		}
		c.KillTerminals("s")
		c.ReleaseTerminals("s")
	}
	if n := c.Stats().TerminalsOpen; n != 0 {
		t.Fatalf("TerminalsOpen = %d, want 0", n)
	}
}

func TestTerminal_NotOfferedIsMethodNotFound(t *testing.T) {
	c, p := newPair(t, Options{})
	c.register("s", t.TempDir())
	p.Send(`{"jsonrpc":"2.0","id":1,"method":"terminal/create","params":{"sessionId":"s","command":"true"}}`)
	if code, _ := errorOf(p.Next()); code != acp.CodeMethodNotFound {
		t.Fatalf("terminal/create without terminals offered answered %d, want %d", code, acp.CodeMethodNotFound)
	}
}

// The agent may withdraw a terminal/wait_for_exit with $/cancel_request:
// it is answered -32800 at once, the command goes on, and its exit can
// still be waited for.
func TestTerminal_WaitForExitWithdrawnIsAnsweredCancelled(t *testing.T) {
	c, p, _ := newTermPair(t, Options{})
	id := p.create(map[string]any{"command": "sleep", "args": []string{"30"}})
	p.mu.Lock()
	waitID := strconv.Itoa(1000 + p.seq + 1)
	p.mu.Unlock()
	wait := p.start(acp.MethodTerminalWaitForExit, map[string]any{"terminalId": id})
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":%s}}`, waitID))
	if code, _ := errorOf(p.await(wait, 5*time.Second)); code != acp.CodeCancelled {
		t.Fatalf("the withdrawn wait answered %d, want %d", code, acp.CodeCancelled)
	}
	waitServed(t, c, 0) // the withdrawn wait is released, and forgotten with it
	p.result(p.call(acp.MethodTerminalKill, map[string]any{"terminalId": id}), nil)
	var exit acp.TerminalExitStatus
	p.result(p.call(acp.MethodTerminalWaitForExit, map[string]any{"terminalId": id}), &exit)
	if exit.Signal == nil {
		t.Fatalf("after kill, wait_for_exit = %+v, want a signal", exit)
	}
	p.result(p.call(acp.MethodTerminalRelease, map[string]any{"terminalId": id}), nil)
}

// At the defaults (no options given): a session holds 8 terminals and
// the 9th is refused; a command that prints 3 MiB keeps its last 1 MiB.
func TestTerminal_BoundsAtTheDefaults(t *testing.T) {
	c, p, _ := newTermPair(t, Options{})
	for range DefaultMaxTerminals - 1 {
		p.create(map[string]any{"command": "sleep", "args": []string{"30"}})
	}
	id := p.create(map[string]any{"command": "sh", "args": []string{"-c", "head -c 3145728 /dev/zero | tr '\\0' x; printf END"}})
	if code, msg := errorOf(p.call(acp.MethodTerminalCreate, map[string]any{"command": "true"})); code == 0 || !strings.Contains(msg, "too many terminals") {
		t.Fatalf("terminal %d answered %d %q, want a refusal", DefaultMaxTerminals+1, code, msg)
	}
	p.result(p.call(acp.MethodTerminalWaitForExit, map[string]any{"terminalId": id}), nil)
	var out acp.TerminalOutputResult
	p.result(p.call(acp.MethodTerminalOutput, map[string]any{"terminalId": id}), &out)
	if len(out.Output) != DefaultMaxTerminalBytes || !strings.HasSuffix(out.Output, "xEND") || !out.Truncated {
		t.Fatalf("output of 3 MiB: %d bytes (truncated %v), want the last %d", len(out.Output), out.Truncated, DefaultMaxTerminalBytes)
	}
	c.ReleaseTerminals("s")
}

// terminal/release of a command still running ends it, and its
// grandchildren with it, though they ignore SIGTERM: by the time the
// release is answered, nothing of it runs.
func TestTerminal_ReleaseEndsARunningGroupThatIgnoresTERM(t *testing.T) {
	const grace = 200 * time.Millisecond
	c, p, _ := newTermPair(t, Options{TerminalGrace: grace})
	id := p.create(map[string]any{"command": "sh", "args": []string{"-c", `trap "" TERM; sh -c 'trap "" TERM; sleep 60' & echo "child $!"; echo "shell $$"; while :; do sleep 0.05; done`}})
	out := p.awaitOutput(id, "shell")
	var child, shell int
	fmt.Sscanf(out, "child %d\nshell %d", &child, &shell)
	if child == 0 || shell == 0 || !alive(child) || !alive(shell) {
		t.Fatalf("output %q: want a running shell and child", out)
	}
	start := time.Now()
	p.result(p.call(acp.MethodTerminalRelease, map[string]any{"terminalId": id}), nil)
	took := time.Since(start)
	// Both have been sent SIGKILL by then, and run nothing more; the
	// kernel may take a moment to mark the child, which nobody waits
	// for, dead.
	for _, pid := range []int{shell, child} {
		awaitGone(t, pid, time.Second)
	}
	if took < grace {
		t.Fatalf("release answered after %s, less than the grace %s: SIGTERM was not ignored?", took, grace)
	}
	if n := c.Stats().TerminalsOpen; n != 0 {
		t.Fatalf("TerminalsOpen = %d after release, want 0", n)
	}
}

// A terminal/create whose command, arguments and environment together
// pass 1 MiB is refused saying so, before anything starts.
func TestTerminal_HugeCommandIsRefused(t *testing.T) {
	c, p, _ := newTermPair(t, Options{})
	half := strings.Repeat("a", maxTerminalRequestString/2)
	for name, params := range map[string]map[string]any{
		"arguments":   {"command": "true", "args": []string{half, half}},
		"environment": {"command": "true", "args": []string{half}, "env": []map[string]string{{"name": "X", "value": half}}},
	} {
		code, msg := errorOf(p.call(acp.MethodTerminalCreate, params))
		if code != acp.CodeInvalidParams || !strings.Contains(msg, "more than 1048576") {
			t.Errorf("huge %s answered %d %q, want a refusal that says why", name, code, msg)
		}
	}
	if n := c.Stats().TerminalsOpen; n != 0 {
		t.Fatalf("TerminalsOpen = %d, want 0", n)
	}
	p.create(map[string]any{"command": "true", "args": []string{strings.Repeat("a", 64<<10)}})
}
