package host

import (
	"acpbroker/acp"
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
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, b))
	select {
	case m := <-p.Msg:
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
	for i, method := range []string{acp.MethodReadTextFile, acp.MethodWriteTextFile} {
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
			got := fsCall(t, p, 1, acp.MethodReadTextFile, map[string]any{"path": path, "line": 1, "limit": 1}, 10*time.Second)
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
	got := fsCall(t, p, 1, acp.MethodWriteTextFile, map[string]any{"path": path, "content": strings.Repeat("x", 11)}, 10*time.Second)
	if !strings.Contains(got, "-32602") || !strings.Contains(got, "more than the 10 allowed") {
		t.Fatalf("write over the cap: %s", got)
	}
	if _, err := os.Stat(path); err == nil {
		t.Fatal("the refused write created the file")
	}
	if got := fsCall(t, p, 2, acp.MethodWriteTextFile, map[string]any{"path": path, "content": "0123456789"}, 10*time.Second); !strings.Contains(got, `"result":{}`) {
		t.Fatalf("write at the cap: %s", got)
	}
}

func TestFS_ConfinedToTheSessionDirectory(t *testing.T) {
	c, p := newPair(t, Options{})
	root := t.TempDir()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(root, "in.txt"), []byte("one\ntwo\nthree\n"), 0o644)
	os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("secret"), 0o644)
	os.Symlink(outside, filepath.Join(root, "link"))
	os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(root, "secret-link"))

	c.register("s", root)
	cases := []struct {
		name, method string
		params       map[string]any
		want         string
	}{
		{"read inside", "fs/read_text_file", map[string]any{"path": filepath.Join(root, "in.txt")}, `"content":"one\ntwo\nthree\n"`},
		{"read lines", "fs/read_text_file", map[string]any{"path": filepath.Join(root, "in.txt"), "line": 2, "limit": 1}, `"content":"two\n"`},
		{"dotdot", "fs/read_text_file", map[string]any{"path": filepath.Join(root, "..", filepath.Base(outside), "secret.txt")}, "-32602"},
		{"symlinked dir", "fs/read_text_file", map[string]any{"path": filepath.Join(root, "link", "secret.txt")}, "-32602"},
		{"symlinked file", "fs/read_text_file", map[string]any{"path": filepath.Join(root, "secret-link")}, "-32602"},
		{"relative", "fs/read_text_file", map[string]any{"path": "in.txt"}, "-32602"},
		{"missing", "fs/read_text_file", map[string]any{"path": filepath.Join(root, "nope")}, "-32002"},
		{"write new", "fs/write_text_file", map[string]any{"path": filepath.Join(root, "sub", "new.txt"), "content": "hi"}, `"result":{}`},
		{"write through link", "fs/write_text_file", map[string]any{"path": filepath.Join(root, "link", "evil.txt"), "content": "x"}, "-32602"},
		{"unknown session", "fs/read_text_file", map[string]any{"sessionId": "zzz", "path": filepath.Join(root, "in.txt")}, "-32602"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, ok := tc.params["sessionId"]; !ok {
				tc.params["sessionId"] = "s"
			}
			params, _ := json.Marshal(tc.params)
			p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, i, tc.method, params))
			m := p.Next()
			raw, _ := json.Marshal(m)
			if !strings.Contains(string(raw), tc.want) {
				t.Fatalf("reply %s does not contain %s", raw, tc.want)
			}
		})
	}
	if b, err := os.ReadFile(filepath.Join(root, "sub", "new.txt")); err != nil || string(b) != "hi" {
		t.Fatalf("written file = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(outside, "evil.txt")); err == nil {
		t.Fatal("a write escaped through a symlink")
	}
}
