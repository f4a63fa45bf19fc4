package fakeagent

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

type turn struct {
	a      *agent
	id     *json.RawMessage
	sid    string
	cancel <-chan struct{}
	once   sync.Once
}

// sleep waits d; false if the turn was cancelled or the agent is ending.
func (t *turn) sleep(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-t.cancel:
		return false
	case <-t.a.ctx.Done():
		return false
	}
}

// wait waits d whatever the client says; false if the agent is ending.
func (t *turn) wait(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-t.a.ctx.Done():
		return false
	}
}

// waitCancel waits for session/cancel; false if the agent is ending.
func (t *turn) waitCancel() bool {
	select {
	case <-t.cancel:
		return true
	case <-t.a.ctx.Done():
		return false
	}
}

func (t *turn) stop(reason string) {
	t.once.Do(func() { t.a.reply(t.id, map[string]string{"stopReason": reason}) })
}

func (a *agent) tool(sid, id, title, status string) {
	a.update(sid, map[string]any{"sessionUpdate": "tool_call", "toolCallId": id, "title": title, "kind": "execute", "status": status})
}

func (a *agent) toolStatus(sid, id, status string) {
	a.update(sid, map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": id, "status": status})
}

func (a *agent) prompt(id *json.RawMessage, p *promptParams, cancel <-chan struct{}) {
	var text []string
	images, files := 0, 0
	for _, b := range p.Prompt {
		switch b.Type {
		case "text":
			text = append(text, b.Text)
		case "image":
			images++
		case "resource", "resource_link":
			files++
		}
	}
	full := strings.Join(text, "\n")
	sid := p.SessionID
	a.appendHistory(sid, full)
	a.mu.Lock()
	resumed := a.resumed[sid]
	delete(a.resumed, sid)
	a.mu.Unlock()
	t := &turn{a: a, id: id, sid: sid, cancel: cancel}
	defer func() {
		a.mu.Lock()
		if a.cancels[sid] == cancel {
			delete(a.cancels, sid)
		}
		a.mu.Unlock()
	}()

	fields := strings.Fields(full)
	cmd, args := "", []string(nil)
	if len(fields) > 0 {
		cmd, args = fields[0], fields[1:]
	}
	arg := func(i int, def string) string {
		if i < len(args) {
			return args[i]
		}
		return def
	}
	rest := func(from int) string {
		if from < len(args) {
			return strings.Join(args[from:], " ")
		}
		return ""
	}
	if a.configScript(t, cmd, rest(0)) || a.sessionScript(t, cmd) {
		return
	}
	switch cmd {
	case "stream", "slow":
		n, delay := atoi(arg(0, "3")), dur(arg(1, "0s"))
		if cmd == "slow" {
			delay, n = dur(arg(0, "100ms")), atoi(arg(1, "3"))
		}
		for i := 1; i <= n; i++ {
			if i > 1 && delay > 0 && !t.sleep(delay) {
				t.stop("cancelled")
				return
			}
			a.chunk(sid, fmt.Sprintf("chunk %d\n", i))
		}
		t.stop("end_turn")
	case "code":
		// An answer with a long fenced code block, in small chunks.
		a.chunk(sid, "Here is the code:\n```go\n")
		for i := range atoi(arg(0, "100")) {
			a.chunk(sid, fmt.Sprintf("fmt.Println(\"line %d of the generated program\")\n", i+1))
		}
		a.chunk(sid, "```\nThat is all.")
		t.stop("end_turn")
	case "stamp":
		// Chunks that carry the moment they were sent, the last one right
		// before the answer, for measuring the broker's overhead.
		n, delay := atoi(arg(0, "3")), dur(arg(1, "10ms"))
		for i := range n {
			if i > 0 && !t.sleep(delay) {
				t.stop("cancelled")
				return
			}
			a.chunk(sid, fmt.Sprintf("t=%d\n", time.Now().UnixNano()))
		}
		t.stop("end_turn")
	case "burst":
		for range atoi(arg(0, "100")) {
			a.chunk(sid, "x")
		}
		t.stop("end_turn")
	case "hang":
		a.chunk(sid, "working…")
		if t.waitCancel() {
			t.stop("cancelled")
		}
	case "hang-timed":
		// As hang, and it says when it got the cancel and when it
		// answers it, D (0) later: its own cancel time, apart from the
		// client's.
		a.chunk(sid, "working…")
		if !t.waitCancel() {
			return
		}
		got := time.Now()
		if d := dur(arg(0, "0s")); d > 0 && !t.wait(d) {
			return
		}
		a.chunk(sid, fmt.Sprintf("\ncancel=%d answered=%d\n", got.UnixNano(), time.Now().UnixNano()))
		t.stop("cancelled")
	case "ignore-cancel":
		a.chunk(sid, "working…")
		<-a.ctx.Done()
	case "late":
		if t.wait(dur(arg(0, "1s"))) {
			a.chunk(sid, rest(1))
			t.stop("end_turn")
		}
	case "crash":
		a.chunk(sid, "about to crash")
		a.logf("fatal: simulated crash")
		a.exit(atoi(arg(0, "1")))
	case "leak-env":
		// Prints an environment variable's value to stderr and dies: a
		// secret in an error message.
		a.logf("fatal: bad credentials %s", os.Getenv(arg(0, "API_KEY")))
		a.exit(3)
	case "read-sparse":
		// A 4 GiB sparse file in the workspace, its first line asked for
		// through the client.
		a.mu.Lock()
		cwd := a.cwds[sid]
		a.mu.Unlock()
		path := filepath.Join(cwd, "sparse.txt")
		if err := os.WriteFile(path, []byte("first line\n"), 0o644); err == nil {
			os.Truncate(path, 4<<30)
		}
		start := time.Now()
		resp, ok := a.request("fs/read_text_file", map[string]any{"sessionId": sid, "path": path, "line": 1, "limit": 1}, "")
		if !ok {
			return
		}
		var res struct{ Content string }
		json.Unmarshal(resp.Result, &res)
		a.chunk(sid, fmt.Sprintf("read %q in %s\n", res.Content, time.Since(start).Round(time.Millisecond)))
		t.stop("end_turn")
	case "whoami":
		a.chunk(sid, fmt.Sprintf("uid=%d gid=%d", os.Getuid(), os.Getgid()))
		t.stop("end_turn")
	case "run":
		// Runs a program itself, in its working directory (as an agent
		// runs git), and says what it printed and how it ended.
		if len(args) == 0 {
			a.chunk(sid, "run what?\n")
			t.stop("end_turn")
			return
		}
		cmd := exec.Command(args[0], args[1:]...)
		out, err := cmd.CombinedOutput()
		a.chunk(sid, fmt.Sprintf("%s\nexit: %v\n", out, err))
		t.stop("end_turn")
	case "sh":
		// Runs the rest of the prompt, as typed, as one shell script in
		// its working directory (a hostile agent's), and says what it
		// printed and how it ended.
		script := strings.TrimPrefix(strings.TrimLeft(full, " \t\r\n"), "sh")
		out, err := exec.Command("sh", "-c", script).CombinedOutput()
		a.chunk(sid, fmt.Sprintf("%s\nexit: %v\n", out, err))
		t.stop("end_turn")
	case "probe":
		// A hostile agent: tries each of its arguments (r:PATH reads,
		// w:PATH writes, get:URL fetches, environ:TEXT looks for TEXT in
		// every /proc/*/environ it can read, unix:PATH asks a unix
		// socket with a JSON line) and says what happened.
		for _, what := range args {
			a.chunk(sid, what+" "+Probe(what)+"\n")
		}
		t.stop("end_turn")
	case "fs-fifo":
		// A hostile agent: a named pipe in its workspace, read and
		// written through the client, which must answer at once.
		a.fsFifo(t)
	case "flood":
		// A hostile agent: n permission requests at once; the answer
		// says how many were refused.
		a.flood(t, atoi(arg(0, "100")))
	case "answer-exit":
		// Answers, then exits at once: the answer and the exit reach the
		// client together.
		a.chunk(sid, "done")
		t.stop("end_turn")
		a.exit(atoi(arg(0, "0")))
	case "die":
		// Dies right after a stamped chunk, for measuring how fast the
		// user learns of it.
		a.chunk(sid, fmt.Sprintf("t=%d\n", time.Now().UnixNano()))
		a.exit(atoi(arg(0, "1")))
	case "exit-after":
		if t.wait(dur(arg(0, "1s"))) {
			a.logf("exiting without an answer")
			a.exit(atoi(arg(1, "1")))
		}
	case "junk":
		a.raw("this is not json")
		a.raw(`{"hello":"world"}`)
		a.raw(`[1,2,3]`)
		a.chunk(sid, "after junk")
		t.stop("end_turn")
	case "big":
		a.chunk(sid, strings.Repeat("x", atoi(arg(0, "12"))<<20))
		a.chunk(sid, "after big")
		t.stop("end_turn")
	case "permission", "permission-twice", "same-id":
		a.permission(t, cmd, id)
	case "permission-for":
		a.permissionFor(t, arg(0, "-"), arg(1, "-"), rest(2))
	case "elicit-form", "elicit-url", "elicit-big", "elicit-odd", "elicit-cancel-request":
		a.elicit(t, cmd, args)
	case "elicit-json":
		// The rest of the prompt, as typed, is the question's params.
		a.elicitJSON(t, strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(full), cmd)))
	case "tool-stuck":
		a.tool(sid, "call-s", "Long build", "in_progress")
		if t.waitCancel() {
			t.stop("cancelled")
		}
	case "tool-progress":
		every, n := dur(arg(0, "100ms")), atoi(arg(1, "3"))
		a.tool(sid, "call-p", "Compile", "in_progress")
		for i := range n {
			if !t.sleep(every) {
				t.stop("cancelled")
				return
			}
			a.update(sid, map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": "call-p",
				"content": []any{map[string]any{"type": "content", "content": map[string]any{"type": "text", "text": fmt.Sprintf("step %d", i+1)}}}})
		}
		a.toolStatus(sid, "call-p", "completed")
		a.chunk(sid, "compiled")
		t.stop("end_turn")
	case "silent":
		if !t.sleep(dur(arg(0, "1s"))) {
			t.stop("cancelled")
			return
		}
		a.chunk(sid, "done after silence")
		t.stop("end_turn")
	case "spawn-child":
		a.spawnChild(t)
	case "alloc":
		a.alloc(t, atoi(arg(0, "256")))
	case "fork-bomb":
		a.forkBomb(t, atoi(arg(0, "1000")))
	case "terminal":
		a.terminal(t, arg(0, "true"), args[min(1, len(args)):], nil)
	case "terminal-env":
		// A hostile agent: the variables before "--" in the terminal's
		// environment (a loader's, say), then the command.
		i := slices.Index(args, "--")
		if i < 0 || i+1 >= len(args) {
			a.chunk(sid, "terminal-env NAME=VALUE... -- CMD [ARGS...]\n")
			t.stop("end_turn")
			return
		}
		a.terminal(t, args[i+1], args[i+2:], args[:i])
	case "terminals":
		a.terminals(t, atoi(arg(0, "2")))
	case "terminal-long":
		// A shell loop that prints, with a grandchild that sleeps.
		a.terminalUntilCancel(t, `sleep 300 & echo "grandchild $!"; echo "shell $$"; while :; do echo tick; sleep 0.2; done`)
	case "terminal-ignore-term":
		a.terminalUntilCancel(t, `trap "" TERM; sleep 300 & echo "grandchild $!"; echo "shell $$"; while :; do sleep 0.2; done`)
	case "fs-read", "fs-write", "unknown-request":
		a.clientRequest(t, cmd, arg(0, ""), rest(1))
	case "stderr":
		for i := range atoi(arg(0, "10")) {
			a.logf("noise %d %s", i, strings.Repeat("y", 300))
		}
		a.logf("%s", strings.Repeat("z", 100<<10))
		a.chunk(sid, "ok")
		t.stop("end_turn")
	case "update-after":
		a.chunk(sid, "first")
		t.stop("end_turn")
		if t.wait(50 * time.Millisecond) {
			a.chunk(sid, "straggler")
		}
	case "answer-twice":
		// A buggy agent: the same response again, D later, when the
		// next prompt may be running.
		a.chunk(sid, "once")
		t.stop("end_turn")
		if t.wait(dur(arg(0, "300ms"))) {
			a.reply(t.id, map[string]string{"stopReason": "end_turn"})
		}
	case "other-session":
		a.chunk("sess-unknown", "not yours")
		a.chunk(sid, "mine")
		t.stop("end_turn")
	case "mcp-servers":
		a.mu.Lock()
		got := a.mcp[sid]
		a.mu.Unlock()
		a.chunk(sid, string(got))
		t.stop("end_turn")
	case "env":
		env := os.Environ()
		sort.Strings(env)
		a.chunk(sid, strings.Join(env, "\n"))
		t.stop("end_turn")
	default:
		if a.show(t, cmd, args, rest(0)) || a.floods(t, cmd, args) {
			return
		}
		a.demo(t, full, images, files, resumed)
	}
}

func (a *agent) permission(t *turn, cmd string, promptID *json.RawMessage) {
	sid := t.sid
	rounds := 1
	if cmd == "permission-twice" {
		rounds = 2
	}
	idRaw := ""
	if cmd == "same-id" {
		idRaw = string(*promptID)
	}
	var chosen []string
	for i := range rounds {
		callID := fmt.Sprintf("call-p%d", i)
		a.tool(sid, callID, "Run rm -rf build", "pending")
		resp, ok := a.request("session/request_permission", map[string]any{"sessionId": sid,
			"toolCall": map[string]any{"toolCallId": callID, "title": "Run rm -rf build"},
			"options": []map[string]string{
				{"optionId": "allow", "name": "Allow", "kind": "allow_once"},
				{"optionId": "allow-always", "name": "Always allow", "kind": "allow_always"},
				{"optionId": "reject", "name": "Reject", "kind": "reject_once"}}}, idRaw)
		if !ok {
			return
		}
		var out struct {
			Outcome struct{ Outcome, OptionID string }
		}
		json.Unmarshal(resp.Result, &out)
		if out.Outcome.Outcome != "selected" {
			a.toolStatus(sid, callID, "failed")
			select {
			case <-t.cancel:
				t.stop("cancelled")
			default:
				// Like claude-agent-acp: a permission answered "cancelled"
				// before session/cancel arrives is a refused tool call, and
				// the turn goes on.
				a.chunk(sid, "permission cancelled before session/cancel; carrying on\n")
				t.stop("end_turn")
			}
			return
		}
		status := "completed"
		if !strings.HasPrefix(out.Outcome.OptionID, "allow") {
			status = "failed"
		}
		a.toolStatus(sid, callID, status)
		chosen = append(chosen, out.Outcome.OptionID)
	}
	for _, c := range chosen {
		if strings.HasPrefix(c, "allow") {
			a.chunk(sid, "permission granted: "+c+"\n")
		} else {
			a.chunk(sid, "permission denied: "+c+"\n")
		}
	}
	t.stop("end_turn")
}

// permissionFor asks permission for a tool call of kind ("-": none given)
// and title, offering one option per kind in opts (comma-separated, "-":
// the four kinds), each with the kind as its id; then says what was
// chosen. Without session/cancel, a cancelled answer ends the turn too.
func (a *agent) permissionFor(t *turn, kind, opts, title string) {
	sid := t.sid
	if opts == "-" {
		opts = "allow_once,allow_always,reject_once,reject_always"
	}
	var options []map[string]string
	for _, k := range strings.Split(opts, ",") {
		options = append(options, map[string]string{"optionId": k, "name": k, "kind": k})
	}
	call := map[string]any{"toolCallId": "call-f", "title": title}
	update := map[string]any{"sessionUpdate": "tool_call", "toolCallId": "call-f", "title": title, "status": "pending"}
	if kind != "-" {
		call["kind"], update["kind"] = kind, kind
	}
	a.update(sid, update)
	resp, ok := a.request("session/request_permission", map[string]any{"sessionId": sid, "toolCall": call, "options": options}, "")
	if !ok {
		return
	}
	var out struct {
		Outcome struct{ Outcome, OptionID string }
	}
	json.Unmarshal(resp.Result, &out)
	select {
	case <-t.cancel:
		t.stop("cancelled")
		return
	default:
	}
	if out.Outcome.Outcome != "selected" {
		a.toolStatus(sid, "call-f", "failed")
		a.chunk(sid, "chose nothing (cancelled)\n")
	} else {
		a.toolStatus(sid, "call-f", "completed")
		a.chunk(sid, "chose "+out.Outcome.OptionID+"\n")
	}
	t.stop("end_turn")
}

func (a *agent) spawnChild(t *turn) {
	if a.opts.Executable == "" {
		a.chunk(t.sid, "spawn-child needs a real process")
		t.stop("end_turn")
		return
	}
	c := exec.Command(a.opts.Executable, "--child-ignore-term")
	if err := c.Start(); err != nil {
		a.logf("spawn child: %v", err)
		t.stop("end_turn")
		return
	}
	// The child is deliberately never waited for: it outlives this agent
	// unless its process group is killed.
	a.chunk(t.sid, fmt.Sprintf("child:%d", c.Process.Pid))
	if t.waitCancel() {
		t.stop("cancelled")
	}
}

// alloc is a runaway agent: it touches mib MiB of memory, a MiB at a
// time, keeps it, and says so; past a memory limit the kernel kills it
// on the way.
func (a *agent) alloc(t *turn, mib int) {
	if a.opts.Executable == "" {
		a.chunk(t.sid, "alloc needs a real process")
		t.stop("end_turn")
		return
	}
	a.chunk(t.sid, fmt.Sprintf("allocating %d MiB\n", mib))
	for range mib {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		a.mu.Lock()
		a.hog = append(a.hog, b)
		a.mu.Unlock()
	}
	a.chunk(t.sid, fmt.Sprintf("allocated %d MiB", mib))
	t.stop("end_turn")
}

// forkBomb is a runaway agent: it answers at once, and from then on
// starts processes (sleep 600) as fast as it can, trying again at once
// whenever fork fails, until n of them have started or the agent stops.
// It never waits for them: only killing the agent's group, or its
// control group, ends them.
func (a *agent) forkBomb(t *turn, n int) {
	sleep, err := exec.LookPath("sleep")
	if a.opts.Executable == "" || err != nil {
		a.chunk(t.sid, "fork-bomb needs a real process and sleep(1)")
		t.stop("end_turn")
		return
	}
	a.chunk(t.sid, fmt.Sprintf("fork bomb started: %d processes", n))
	t.stop("end_turn")
	a.wg.Go(func() {
		for started := 0; started < n && a.ctx.Err() == nil; {
			c := exec.Command(sleep, "600")
			if c.Start() == nil {
				started++
				c.Process.Release()
			}
		}
	})
}

// createTerminal asks the client for a terminal running command with
// args and env (NAME=VALUE entries), and shows it in a tool call; "" if
// the client refused.
func (a *agent) createTerminal(t *turn, command string, args, env []string) string {
	sid := t.sid
	vars := []map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars = append(vars, map[string]string{"name": k, "value": v})
	}
	resp, ok := a.request("terminal/create", map[string]any{"sessionId": sid, "command": command, "args": args, "env": vars}, "")
	if !ok {
		return ""
	}
	if resp.Error != nil {
		a.chunk(sid, fmt.Sprintf("terminal refused: error %d: %s", resp.Error.Code, resp.Error.Message))
		t.stop("end_turn")
		return ""
	}
	var res struct{ TerminalID string }
	json.Unmarshal(resp.Result, &res)
	a.update(sid, map[string]any{"sessionUpdate": "tool_call", "toolCallId": "call-t", "title": strings.Join(append([]string{command}, args...), " "),
		"kind": "execute", "status": "in_progress", "content": []any{map[string]any{"type": "terminal", "terminalId": res.TerminalID}}})
	return res.TerminalID
}

// terminal runs command with env through the client, waits for it to
// exit, and answers with its exit status and output.
func (a *agent) terminal(t *turn, command string, args, env []string) {
	sid := t.sid
	id := a.createTerminal(t, command, args, env)
	if id == "" {
		return
	}
	ids := map[string]any{"sessionId": sid, "terminalId": id}
	exit, ok := a.request("terminal/wait_for_exit", ids, "")
	if !ok {
		return
	}
	out, ok := a.request("terminal/output", ids, "")
	if !ok {
		return
	}
	if _, ok := a.request("terminal/release", ids, ""); !ok {
		return
	}
	a.toolStatus(sid, "call-t", "completed")
	var o struct {
		Output    string
		Truncated bool
	}
	json.Unmarshal(out.Result, &o)
	a.chunk(sid, fmt.Sprintf("exit: %s\ntruncated: %v\n%s", exit.Result, o.Truncated, o.Output))
	t.stop("end_turn")
}

// terminals opens n client terminals at once, each running sleep, says
// how many it got ("opened K of N") and why the next was refused, then
// releases them.
func (a *agent) terminals(t *turn, n int) {
	sid := t.sid
	var ids []string
	refused := ""
	for range n {
		resp, ok := a.request("terminal/create", map[string]any{"sessionId": sid, "command": "sleep", "args": []string{"30"}}, "")
		if !ok {
			return
		}
		if resp.Error != nil {
			refused = fmt.Sprintf("\nrefused: error %d: %s", resp.Error.Code, resp.Error.Message)
			break
		}
		var res struct{ TerminalID string }
		json.Unmarshal(resp.Result, &res)
		ids = append(ids, res.TerminalID)
	}
	for _, id := range ids {
		if _, ok := a.request("terminal/release", map[string]any{"sessionId": sid, "terminalId": id}, ""); !ok {
			return
		}
	}
	a.chunk(sid, fmt.Sprintf("opened %d of %d%s", len(ids), n, refused))
	t.stop("end_turn")
}

// terminalUntilCancel runs script in a client terminal, says the pids it
// prints ("grandchild:N shell:M"), and waits for session/cancel; it
// leaves the terminal to the client.
func (a *agent) terminalUntilCancel(t *turn, script string) {
	sid := t.sid
	id := a.createTerminal(t, "sh", []string{"-c", script}, nil)
	if id == "" {
		return
	}
	var grandchild, shell int
	for grandchild == 0 || shell == 0 {
		if !t.sleep(20 * time.Millisecond) {
			t.stop("cancelled")
			return
		}
		out, ok := a.request("terminal/output", map[string]any{"sessionId": sid, "terminalId": id}, "")
		if !ok {
			return
		}
		var o struct{ Output string }
		json.Unmarshal(out.Result, &o)
		for _, line := range strings.Split(o.Output, "\n") {
			fmt.Sscanf(line, "grandchild %d", &grandchild)
			fmt.Sscanf(line, "shell %d", &shell)
		}
	}
	a.chunk(sid, fmt.Sprintf("grandchild:%d shell:%d", grandchild, shell))
	if t.waitCancel() {
		t.stop("cancelled")
	}
}

func (a *agent) clientRequest(t *turn, cmd, path, text string) {
	sid := t.sid
	var (
		resp message
		ok   bool
	)
	switch cmd {
	case "fs-read":
		resp, ok = a.request("fs/read_text_file", map[string]any{"sessionId": sid, "path": path}, "")
	case "fs-write":
		resp, ok = a.request("fs/write_text_file", map[string]any{"sessionId": sid, "path": path, "content": text}, "")
	default:
		resp, ok = a.request("x/unknown", map[string]any{}, "")
	}
	if !ok {
		return
	}
	switch {
	case resp.Error != nil:
		a.chunk(sid, fmt.Sprintf("error %d: %s", resp.Error.Code, resp.Error.Message))
	case cmd == "fs-read":
		var r struct{ Content string }
		json.Unmarshal(resp.Result, &r)
		a.chunk(sid, "read: "+r.Content)
	default:
		a.chunk(sid, "wrote")
	}
	t.stop("end_turn")
}

// demo is a pleasant default turn: a thought, a tool call, a plan, and the
// echoed prompt in a few chunks.
func (a *agent) demo(t *turn, text string, images, files int, resumed bool) {
	sid := t.sid
	a.update(sid, map[string]any{"sessionUpdate": "agent_thought_chunk", "content": map[string]any{"type": "text", "text": "Thinking about it…"}})
	a.tool(sid, "call-1", "Read notes", "pending")
	if !t.sleep(20 * time.Millisecond) {
		t.stop("cancelled")
		return
	}
	a.toolStatus(sid, "call-1", "completed")
	a.update(sid, map[string]any{"sessionUpdate": "plan", "entries": []map[string]string{
		{"content": "Read the message", "priority": "medium", "status": "completed"},
		{"content": "Answer it", "priority": "medium", "status": "completed"}}})
	answer := "You said: " + text
	if images > 0 {
		answer += fmt.Sprintf(" (and %d image(s))", images)
	}
	if files > 0 {
		answer += fmt.Sprintf(" (and %d file(s))", files)
	}
	if resumed {
		answer = "(resumed) " + answer
	}
	for _, piece := range pieces(answer, 3) {
		if !t.sleep(20 * time.Millisecond) {
			t.stop("cancelled")
			return
		}
		a.chunk(sid, piece)
	}
	t.stop("end_turn")
}

func pieces(s string, n int) []string {
	r := []rune(s)
	size := max(1, (len(r)+n-1)/n)
	var out []string
	for len(r) > 0 {
		k := min(size, len(r))
		out = append(out, string(r[:k]))
		r = r[k:]
	}
	return out
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}

func dur(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0
	}
	return d
}

func (a *agent) fsFifo(t *turn) {
	sid := t.sid
	a.mu.Lock()
	cwd := a.cwds[sid]
	a.mu.Unlock()
	fifo := filepath.Join(cwd, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil && !errors.Is(err, os.ErrExist) {
		a.chunk(sid, "mkfifo failed: "+err.Error())
		t.stop("end_turn")
		return
	}
	for _, method := range []string{"fs/read_text_file", "fs/write_text_file"} {
		start := time.Now()
		resp, ok := a.request(method, map[string]any{"sessionId": sid, "path": fifo, "content": "x"}, "")
		if !ok {
			return
		}
		what := "answered"
		if resp.Error != nil {
			what = "refused: " + resp.Error.Message
		}
		a.chunk(sid, fmt.Sprintf("%s %s in %s\n", method, what, time.Since(start).Round(time.Millisecond)))
	}
	t.stop("end_turn")
}

func (a *agent) flood(t *turn, n int) {
	sid := t.sid
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused, answered := 0, 0
	for i := range n {
		wg.Go(func() {
			resp, ok := a.request("session/request_permission", map[string]any{"sessionId": sid,
				"toolCall": map[string]any{"toolCallId": fmt.Sprintf("flood-%d", i), "title": "flood"},
				"options":  []map[string]string{{"optionId": "reject", "name": "Reject", "kind": "reject_once"}}}, "")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case !ok:
			case resp.Error != nil:
				refused++
			default:
				answered++
			}
		})
	}
	wg.Wait()
	a.chunk(sid, fmt.Sprintf("flood: %d answered, %d refused\n", answered, refused))
	t.stop("end_turn")
}

// viaProxy fetches url through the proxy its environment names
// (HTTP_PROXY, or HTTPS_PROXY for https), loopback addresses too, and
// says "ok" for a 2xx, else the status and the first line of the body.
func viaProxy(raw string) string {
	name := "HTTP_PROXY"
	if strings.HasPrefix(raw, "https:") {
		name = "HTTPS_PROXY"
	}
	proxy, err := url.Parse(os.Getenv(name))
	if err != nil || proxy.Host == "" {
		return "denied: no " + name
	}
	c := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
	resp, err := c.Get(raw)
	if err != nil {
		return "denied: " + err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode/100 == 2 {
		return "ok: " + strings.TrimSpace(string(body))
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	return fmt.Sprintf("denied: %s: %s", resp.Status, first)
}

// connectVia asks the proxy HTTPS_PROXY names for a tunnel to
// hostport, and says "ok" or its answer.
func connectVia(hostport string) string {
	proxy, err := url.Parse(os.Getenv("HTTPS_PROXY"))
	if err != nil || proxy.Host == "" {
		return "denied: no HTTPS_PROXY"
	}
	c, err := net.DialTimeout("tcp", proxy.Host, 5*time.Second)
	if err != nil {
		return "denied: " + err.Error()
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", hostport, hostport)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		return "denied: " + err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return "ok"
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	first, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	return fmt.Sprintf("denied: %s: %s", resp.Status, first)
}

// Probe tries one thing a hostile agent might (see the probe command),
// and says "ok" or why not.
func Probe(what string) string {
	kind, arg, _ := strings.Cut(what, ":")
	var err error
	switch kind {
	case "r":
		_, err = os.ReadFile(arg)
	case "w":
		err = os.WriteFile(arg, []byte("written by an agent"), 0o644)
	case "get":
		var resp *http.Response
		c := http.Client{Timeout: 5 * time.Second}
		if resp, err = c.Get(arg); err == nil {
			resp.Body.Close()
		}
	case "tcp":
		var c net.Conn
		if c, err = net.DialTimeout("tcp", arg, 5*time.Second); err == nil {
			c.Close()
		}
	case "proxy":
		return viaProxy(arg)
	case "connect":
		return connectVia(arg)
	case "unix":
		var c net.Conn
		if c, err = net.DialTimeout("unix", arg, 5*time.Second); err == nil {
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintln(c, `{}`)
			b, _ := io.ReadAll(io.LimitReader(c, 4<<10))
			return "ok: " + strings.TrimSpace(string(b))
		}
	case "environ":
		paths, _ := filepath.Glob("/proc/[0-9]*/environ")
		readable := 0
		for _, p := range paths {
			b, rerr := os.ReadFile(p)
			if rerr != nil {
				continue
			}
			readable++
			if strings.Contains(string(b), arg) {
				return "FOUND in " + p
			}
		}
		return fmt.Sprintf("absent from %d readable of %d", readable, len(paths))
	default:
		return "unknown probe"
	}
	if err != nil {
		return "denied: " + err.Error()
	}
	return "ok"
}
