package host

import (
	"acpbroker/acp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sparseFile makes a file of size bytes in dir whose first line is
// endless (all zero bytes, no newline): reading its second line means
// reading all of it. It skips the test where sparse files are not to be
// had.
func sparseFile(t *testing.T, dir string, size int64) string {
	t.Helper()
	path := filepath.Join(dir, "sparse.txt")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, size); err != nil {
		t.Skip("no sparse files here:", err)
	}
	return path
}

// Line 2 of a 40 GiB sparse file is not looked for past the first
// MaxScanBytes of it: the read is answered with an error that says why,
// in a small fraction of the time reading the whole file would take.
func TestFS_ALineDeepInAHugeFileIsRefusedAfterTheScanBound(t *testing.T) {
	c, p := newPair(t, Options{})
	root := t.TempDir()
	c.register("s", root)
	path := sparseFile(t, root, 40<<30)
	start := time.Now()
	got := fsCall(t, p, 1, acp.MethodReadTextFile, map[string]any{"path": path, "line": 2, "limit": 1}, 2*time.Minute)
	took := time.Since(start)
	if !strings.Contains(got, "-32602") || !strings.Contains(got, fmt.Sprintf("line 2 is not within the first %d bytes of the file", DefaultMaxScanBytes)) {
		t.Fatalf("line 2 of a 40 GiB file: %s", got)
	}
	// The bound is 256 MiB of the 40 GiB: reading it all would take 160
	// times as long. Whatever the machine, 1/8 of that is generous.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	begin := time.Now()
	for range DefaultMaxScanBytes / len(buf) {
		if _, err := f.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	perBound := time.Since(begin)
	t.Logf("answered in %s; reading 256 MiB takes %s here", took, perBound)
	if took > 20*perBound+5*time.Second {
		t.Fatalf("answered in %s; reading the 256 MiB bound takes %s", took, perBound)
	}
	waitServed(t, c, 0)
}

// Options.FileTimeout is consumed: a read that takes longer is stopped
// and answered with the reason.
func TestFS_AReadPastItsTimeIsStoppedAndAnswered(t *testing.T) {
	c, p := newPair(t, Options{FileTimeout: 100 * time.Millisecond, MaxScanBytes: 1 << 40})
	root := t.TempDir()
	c.register("s", root)
	path := sparseFile(t, root, 40<<30)
	got := fsCall(t, p, 1, acp.MethodReadTextFile, map[string]any{"path": path, "line": 2}, time.Minute)
	if !strings.Contains(got, "a file request is given 100ms") {
		t.Fatalf("a read past its time: %s", got)
	}
	waitServed(t, c, 0)
}

// 64 reads of a huge file at once are each answered, one agent's reads
// taking turns; while every one of the broker's read slots is taken a
// small file is read all the same, and a read past the first buffer
// waits, can be withdrawn by the agent (-32800), and otherwise goes on
// once a slot is free; the waits are all gone after.
func TestFS_ManyReadsAtOnceAreEachAnsweredAndTakeTurns(t *testing.T) {
	const n = 64
	c, p := newPair(t, Options{MaxScanBytes: 4 << 20, FileTimeout: time.Minute})
	root := t.TempDir()
	c.register("s", root)
	path := sparseFile(t, root, 40<<30)
	for i := range n {
		b, _ := json.Marshal(map[string]any{"sessionId": "s", "path": path, "line": 2})
		p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"fs/read_text_file","params":%s}`, i, b))
	}
	seen := map[string]bool{}
	deadline := time.After(2 * time.Minute)
	for len(seen) < n {
		select {
		case m := <-p.Msg:
			if !strings.Contains(string(m["error"]), "is not within the first 4194304 bytes") {
				t.Fatalf("read %s answered %s %s", m["id"], m["result"], m["error"])
			}
			seen[string(m["id"])] = true
		case <-deadline:
			t.Fatalf("%d of %d reads answered within 2 minutes", len(seen), n)
		}
	}
	waitServed(t, c, 0)

	// Every slot of the broker's taken: a small file is read all the
	// same, and a read past the first buffer waits its turn.
	for range fileScans.size {
		if err := fileScans.take(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	freed := false
	free := func() {
		if !freed {
			for range fileScans.size {
				fileScans.put()
			}
			freed = true
		}
	}
	defer free()
	small := filepath.Join(root, "small.txt")
	if err := os.WriteFile(small, []byte("one\ntwo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := fsCall(t, p, 99, acp.MethodReadTextFile, map[string]any{"path": small, "line": 2}, 5*time.Second); !strings.Contains(got, `"content":"two\n"`) {
		t.Fatalf("a small read with no slot free answered %s", got)
	}
	read := func(id int) {
		b, _ := json.Marshal(map[string]any{"sessionId": "s", "path": path, "line": 2})
		p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"fs/read_text_file","params":%s}`, id, b))
	}
	read(100)
	select {
	case m := <-p.Msg:
		t.Fatalf("a read with no slot free was answered: %s %s", m["result"], m["error"])
	case <-time.After(200 * time.Millisecond):
	}
	p.Send(`{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":100}}`)
	if m := p.Next(); string(m["id"]) != "100" || !strings.Contains(string(m["error"]), "-32800") {
		t.Fatalf("a withdrawn read answered %s %s %s", m["id"], m["result"], m["error"])
	}
	read(101)
	free()
	if m := p.Next(); string(m["id"]) != "101" || !strings.Contains(string(m["error"]), "is not within the first 4194304 bytes") {
		t.Fatalf("a read once a slot is free answered %s %s %s", m["id"], m["result"], m["error"])
	}
	waitServed(t, c, 0) // the withdrawn read too, and forgotten with it
	fileScans.mu.Lock()
	taken, waiting := fileScans.size-fileScans.free, len(fileScans.waiting)
	fileScans.mu.Unlock()
	if len(c.scans) != 0 || taken != 0 || waiting != 0 {
		t.Fatalf("after the reads: %d of the agent's slots, %d of the broker's taken and %d reads waiting for one", len(c.scans), taken, waiting)
	}
}
