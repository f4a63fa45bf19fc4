package host

import (
	"acpbroker/acp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// While more agents than the broker has read slots loop reads that each
// run for their whole FileTimeout (line 2 of a 40 GiB file with no
// newline, no scan bound), another agent's read of a 6-byte file is
// answered at once, and its read of the last line of a 1 MiB file
// promptly, each time: reads are shared between agents, not queued
// behind the slow ones. The slow reads still end at their time.
func TestFS_ASmallReadIsAnsweredAtOnceWhileOtherAgentsLoopSlowReads(t *testing.T) {
	const slow = 8 * time.Second
	hostile := max(2, runtime.GOMAXPROCS(0))
	quit := make(chan struct{})
	var loops sync.WaitGroup
	ended := make(chan int, hostile)
	refusals := make(chan string, hostile)
	for i := range hostile {
		c, p := newPair(t, Options{MaxScanBytes: 1 << 40, FileTimeout: slow})
		root := t.TempDir()
		c.register("s", root)
		path := sparseFile(t, root, 40<<30)
		loops.Go(func() {
			for id := 0; ; id++ {
				b, _ := json.Marshal(map[string]any{"sessionId": "s", "path": path, "line": 2})
				p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"fs/read_text_file","params":%s}`, id, b))
				select {
				case m := <-p.Msg:
					if !strings.Contains(string(m["error"]), "a file request is given 8s") {
						refusals <- fmt.Sprintf("agent %d's slow read answered %s %s", i, m["result"], m["error"])
						return
					}
					select {
					case ended <- i:
					default:
					}
				case <-quit:
					return
				}
			}
		})
	}
	defer func() {
		close(quit)
		loops.Wait()
	}()

	c, p := newPair(t, Options{})
	root := t.TempDir()
	c.register("s", root)
	small := filepath.Join(root, "small.txt")
	if err := os.WriteFile(small, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Past the first buffer, a read needs one of the broker's slots.
	const lines = 1 << 16
	large := filepath.Join(root, "large.txt")
	if err := os.WriteFile(large, []byte(strings.Repeat("0123456789abcde\n", lines-1)+"last\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The slow reads are under way, every slot of the broker's taken.
	time.Sleep(500 * time.Millisecond)
	for i := range 6 {
		params, want := map[string]any{"path": small}, `"content":"hello\n"`
		if i%2 == 1 {
			params, want = map[string]any{"path": large, "line": lines}, `"content":"last\n"`
		}
		start := time.Now()
		got := fsCall(t, p, i, acp.MethodReadTextFile, params, 3*slow)
		took := time.Since(start)
		if !strings.Contains(got, want) {
			t.Fatalf("read %v answered %s after %s", params, got, took)
		}
		t.Logf("%d agents looping reads of %s each: read %v answered in %s", hostile, slow, params, took)
		// On a quiet machine a few milliseconds; waiting for one of the
		// slow reads would take seconds.
		if took > slow/4 {
			t.Fatalf("read %v took %s while %d other agents read slowly", params, took, hostile)
		}
	}

	// The slow reads still end at their FileTimeout, each agent's.
	deadline := time.After(3 * slow)
	for seen := map[int]bool{}; len(seen) < hostile; {
		select {
		case i := <-ended:
			seen[i] = true
		case msg := <-refusals:
			t.Fatal(msg)
		case <-deadline:
			t.Fatalf("within %s, only %d of %d agents' slow reads ended", 3*slow, len(seen), hostile)
		}
	}
}
