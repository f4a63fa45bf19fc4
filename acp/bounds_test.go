package acp

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fsCall sends one fs request and returns the reply, failing unless it
// comes within the given time.
func fsCall(t *testing.T, p *peer, id int, method string, params map[string]any, within time.Duration) string {
	t.Helper()
	if _, ok := params["sessionId"]; !ok {
		params["sessionId"] = "s"
	}
	b, _ := json.Marshal(params)
	p.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, b))
	select {
	case m := <-p.msg:
		raw, _ := json.Marshal(m)
		return string(raw)
	case <-time.After(within):
		t.Fatalf("%s: no answer within %s", method, within)
		return ""
	}
}

// A named pipe in the workspace is refused at once, for reading and for
// writing, instead of blocking the request (and the Conn's Close) for ever.
func TestFS_NamedPipeIsRefusedAtOnce(t *testing.T) {
	c, p := newPair(t, Options{})
	root := t.TempDir()
	fifo := filepath.Join(root, "pipe")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip("no mkfifo here:", err)
	}
	c.register("s", root)
	for i, method := range []string{MethodReadTextFile, MethodWriteTextFile} {
		got := fsCall(t, p, i, method, map[string]any{"path": fifo, "content": "x"}, time.Second)
		if !strings.Contains(got, "-32602") || !strings.Contains(got, "named pipe") {
			t.Fatalf("%s on a fifo: %s", method, got)
		}
	}
	waitServed(t, c, 0)
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("Close waited on a file request")
	}
}

// The first line of a multi-GiB sparse file is read without reading the
// file: memory stays bounded, and a line past agent.max_read_bytes is
// refused in words rather than read whole.
func TestFS_FirstLineOfAHugeSparseFileIsReadWithBoundedMemory(t *testing.T) {
	c, p := newPair(t, Options{MaxReadBytes: 1 << 20})
	root := t.TempDir()
	c.register("s", root)
	for _, tc := range []struct {
		name, head, want string
	}{
		{"with a first line", "first line\nsecond\n", `"content":"first line\n"`},
		{"one endless line", "", "more than 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(root, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(path, []byte(tc.head), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, 4<<30); err != nil {
				t.Skip("no sparse files here:", err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			got := fsCall(t, p, 1, MethodReadTextFile, map[string]any{"path": path, "line": 1, "limit": 1}, 10*time.Second)
			runtime.ReadMemStats(&after)
			if !strings.Contains(got, tc.want) {
				t.Fatalf("read = %s, want %s", got, tc.want)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
				t.Fatalf("reading one line of a 4 GiB file allocated %d MiB", alloc>>20)
			}
		})
	}
}

// agent.max_write_bytes is consumed: a write over it is refused, and the
// file is not touched.
func TestFS_WriteOverTheCapIsRefused(t *testing.T) {
	c, p := newPair(t, Options{MaxWriteBytes: 10})
	root := t.TempDir()
	c.register("s", root)
	path := filepath.Join(root, "f.txt")
	got := fsCall(t, p, 1, MethodWriteTextFile, map[string]any{"path": path, "content": strings.Repeat("x", 11)}, 10*time.Second)
	if !strings.Contains(got, "-32602") || !strings.Contains(got, "more than the 10 allowed") {
		t.Fatalf("write over the cap: %s", got)
	}
	if _, err := os.Stat(path); err == nil {
		t.Fatal("the refused write created the file")
	}
	if got := fsCall(t, p, 2, MethodWriteTextFile, map[string]any{"path": path, "content": "0123456789"}, 10*time.Second); !strings.Contains(got, `"result":{}`) {
		t.Fatalf("write at the cap: %s", got)
	}
}

// A flood of agent requests past MaxAgentRequests is refused at once with
// an error; those admitted are served, and the count returns to zero.
func TestConn_AgentRequestFloodPastTheCapIsRefused(t *testing.T) {
	const max, flood = 4, 40
	c, p := newPair(t, Options{MaxAgentRequests: max})
	release := make(chan struct{})
	sub, err := c.Subscribe("s", ApproverFunc(func(ctx context.Context, r *PermissionRequest) PermissionOutcome {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return PermissionOutcome{OptionID: "a"}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for i := range flood {
		p.send(permissionRequest(fmt.Sprint(i), "s"))
	}
	refused := 0
	for range flood - max {
		m := p.next()
		if !strings.Contains(string(m["error"]), "too many requests in flight") {
			t.Fatalf("a request past the cap got %s %s", m["result"], m["error"])
		}
		refused++
	}
	if st := c.Stats(); st.AgentRequests != max || st.RefusedRequests != flood-max {
		t.Fatalf("served %d, refused %d; want %d and %d", st.AgentRequests, st.RefusedRequests, max, flood-max)
	}
	close(release)
	for range max {
		if m := p.next(); !strings.Contains(string(m["result"]), `"optionId":"a"`) {
			t.Fatalf("an admitted request got %s %s", m["result"], m["error"])
		}
	}
	waitServed(t, c, 0)
}

// waitServed waits up to 2s for the agent requests being served to be n:
// a request is counted out just after its answer is written.
func waitServed(t *testing.T, c *Conn, n int) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(2 * time.Second)
	for c.Stats().AgentRequests != n {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("agent requests served = %d, want %d", c.Stats().AgentRequests, n)
		}
	}
}

// Nothing from the agent waits unanswered: a batch gets -32600 for each
// request in it (or one with a null id), a request whose id cannot be
// read gets -32600 with a null id, and one whose id is a number the
// broker does not use gets -32600 with that id as written.
func TestRoute_BatchesAndUnreadableIdsAreAnswered(t *testing.T) {
	c, p := newPair(t, Options{})
	for _, tc := range []struct{ line, id string }{
		{`[{"jsonrpc":"2.0","id":7,"method":"fs/read_text_file","params":{}},{"jsonrpc":"2.0","method":"x"}]`, `7`},
		{`[1,2,3]`, `null`},
		{`{"jsonrpc":"2.0","id":{"a":1},"method":"session/request_permission","params":{}}`, `null`},
		{`{"jsonrpc":"2.0","id":true,"method":"fs/read_text_file"}`, `null`},
		{`{"jsonrpc":"2.0","id":1.5,"method":"fs/read_text_file"}`, `1.5`},
		{`{"jsonrpc":"2.0","id":-0.5e3,"method":"fs/read_text_file"}`, `-0.5e3`},
	} {
		p.send(tc.line)
		m := p.next()
		if string(m["id"]) != tc.id || !strings.Contains(string(m["error"]), "-32600") {
			t.Fatalf("%s: answered id %s %s, want -32600 with id %s", tc.line, m["id"], m["error"], tc.id)
		}
	}
	if n := c.Stats().InvalidRequests; n != 6 {
		t.Fatalf("invalid requests counted = %d, want 6", n)
	}
}

// os.Root's refusal of a way out is told from its other failures: a
// symbolic link that leads out, ".." and an absolute path are escapes; a
// missing file is not.
func TestIsPathEscape_TellsAWayOutFromOtherFailures(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink(t.TempDir(), filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, p := range []string{"out/x", "../x", "/etc/passwd"} {
		if _, err := root.Open(p); !IsPathEscape(err) {
			t.Errorf("open %q: %v is not an escape", p, err)
		}
	}
	if _, err := root.Open("missing"); err == nil || IsPathEscape(err) {
		t.Errorf("open of a missing file: %v taken for an escape", err)
	}
}
