package faults

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"acpbroker/internal/agenttest"
)

// An API token kept in a file under /etc (in a directory of its own or
// in /etc itself), under /opt, or inside a path agents are shown
// read-only (agent.sandbox_ro) is hidden from a sandboxed agent: it
// reads none of them, though every user may read each, while it reads
// /etc/passwd and a file beside the last, in the path it is shown.
func TestSandbox_AnAgentReadsNoAPITokenFile(t *testing.T) {
	needBwrap(t)
	if os.Getuid() != 0 {
		t.Skip("needs root: the token files are kept under /etc and /opt")
	}
	w := newWorld(t, withAPI(nil))
	tag := fmt.Sprintf("acp-broker-test-%d-%s", os.Getpid(), filepath.Base(w.Dir))
	shown := filepath.Join(w.Dir, "shown")
	files := []string{
		filepath.Join("/etc", tag, "api-token"),
		filepath.Join("/etc", tag+"-api-token"),
		filepath.Join("/opt", tag, "api-token"),
		filepath.Join(shown, "secrets", "api-token"),
	}
	t.Cleanup(func() {
		os.RemoveAll(filepath.Join("/etc", tag))
		os.Remove(filepath.Join("/etc", tag+"-api-token"))
		os.RemoveAll(filepath.Join("/opt", tag))
	})
	for i, f := range files {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(fmt.Sprintf("api-token-%d-0123456789abcdef", i)), 0o644); err != nil {
			t.Fatal(err)
		}
		w.Raw += fmt.Sprintf("\n[[api.tokens]]\nname = \"t%d\"\ntoken_file = %q\nchannels = [\"*\"]\n", i, f)
	}
	beside := filepath.Join(shown, "notes.txt")
	os.WriteFile(beside, []byte("notes"), 0o644)
	agenttest.Traversable(t, shown)
	w.Conf = w.Conf.With(settings{"agent.sandbox_ro": []string{shown}})
	w.start()

	var probes []string
	for _, f := range files {
		probes = append(probes, "r:"+f)
	}
	thread := w.mention(alice, "probe "+strings.Join(probes, " ")+" r:/etc/passwd r:"+beside)
	got := w.awaitAnswers(thread, 1)[0].Text
	for _, p := range probes {
		if r := probeLine(t, got, p); !strings.HasPrefix(r, "denied") {
			t.Errorf("%s: %s", p, r)
		}
	}
	for _, p := range []string{"r:/etc/passwd", "r:" + beside} {
		if r := probeLine(t, got, p); r != "ok" {
			t.Errorf("%s: %s: the sandbox shows less than it should, and the test cannot tell", p, r)
		}
	}
}
