package acp

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

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
		p.Send(permissionRequest(fmt.Sprint(i), "s"))
	}
	refused := 0
	for range flood - max {
		m := p.Next()
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
		if m := p.Next(); !strings.Contains(string(m["result"]), `"optionId":"a"`) {
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
		p.Send(tc.line)
		m := p.Next()
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
