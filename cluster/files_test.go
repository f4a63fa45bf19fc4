package cluster

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"acpbroker/acp"
)

// Files and terminals are served by the host's own Host, from the
// workspace on its disk, and its errors keep their codes.
func TestFiles_ServedThroughTheWire(t *testing.T) {
	ns := runNATS(t, 0, 256<<10)
	dir := t.TempDir()
	serve(t, dial(t, ns.ClientURL()), &procStarter{argv: []string{"cat"}, dir: dir}, ServerOptions{Name: "h1"})
	c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{})
	waitHosts(t, c, 1)
	r, readerDone := startCat(t, c)
	defer close(readerDone)
	if r.Dir != dir {
		t.Fatalf("Dir = %q, want the host's %q", r.Dir, dir)
	}
	h := r.Host
	if !h.Terminals() {
		t.Fatal("Terminals() = false, want the host's answer (true)")
	}
	h.OpenSession("s1", dir)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	if err := h.WriteTextFile(ctx, &acp.WriteTextFileParams{SessionID: "s1", Path: filepath.Join(dir, "a.txt"), Content: "hello\nthere\n"}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a.txt")); err != nil || string(b) != "hello\nthere\n" {
		t.Fatalf("the host's file holds %q (%v)", b, err)
	}
	res, err := h.ReadTextFile(ctx, &acp.ReadTextFileParams{SessionID: "s1", Path: filepath.Join(dir, "a.txt")})
	if err != nil || res.Content != "hello\nthere\n" {
		t.Fatalf("ReadTextFile = %+v, %v", res, err)
	}
	_, err = h.ReadTextFile(ctx, &acp.ReadTextFileParams{SessionID: "s1", Path: filepath.Join(dir, "missing.txt")})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("reading a missing file: %v, want an error that is fs.ErrNotExist (code %d)", err, acp.CodeNotFound)
	}
	_, err = h.ReadTextFile(ctx, &acp.ReadTextFileParams{SessionID: "s1", Path: "/etc/passwd"})
	if !errors.Is(err, acp.ErrInvalidParams) {
		t.Fatalf("reading outside the workspace: %v, want an invalid-params error (code %d)", err, acp.CodeInvalidParams)
	}
	_, err = h.ReadTextFile(ctx, &acp.ReadTextFileParams{SessionID: "nope", Path: filepath.Join(dir, "a.txt")})
	if !errors.Is(err, acp.ErrInvalidParams) {
		t.Fatalf("reading in an unknown session: %v, want an invalid-params error", err)
	}

	// A file bigger than a message may hold is refused in words, not sent.
	big := strings.Repeat("x", 400<<10)
	if err := os.WriteFile(filepath.Join(dir, "big.txt"), []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = h.ReadTextFile(ctx, &acp.ReadTextFileParams{SessionID: "s1", Path: filepath.Join(dir, "big.txt")})
	if !errors.Is(err, acp.ErrInvalidParams) || !strings.Contains(err.Error(), "read it in parts") {
		t.Fatalf("reading a file larger than a message: %v, want a refusal in words", err)
	}

	// A terminal whose output is larger than a message gives its tail.
	term, err := h.CreateTerminal(ctx, &acp.CreateTerminalParams{SessionID: "s1", Command: "sh",
		Args: []string{"-c", "head -c 900000 /dev/zero | tr '\\0' a; echo END"}, Cwd: dir})
	if err != nil {
		t.Fatal(err)
	}
	tp := &acp.TerminalParams{SessionID: "s1", TerminalID: term.TerminalID}
	st, err := h.WaitForTerminalExit(ctx, tp)
	if err != nil || st.ExitCode == nil || *st.ExitCode != 0 {
		t.Fatalf("WaitForTerminalExit = %+v, %v", st, err)
	}
	out, err := h.TerminalOutput(ctx, tp)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Output) > 256<<10 || !out.Truncated || !strings.HasSuffix(out.Output, "aaaaEND\n") {
		t.Fatalf("TerminalOutput gave %d bytes, truncated %v, ending %q; want its tail within a message", len(out.Output), out.Truncated, out.Output[max(0, len(out.Output)-10):])
	}
	o, ok := h.Output("s1", term.TerminalID, 2<<20)
	if !ok || len(o.Output) > 256<<10 || !o.Truncated || !strings.HasSuffix(o.Output, "END\n") || o.Exit == nil {
		t.Fatalf("Output gave ok %v, %d bytes, truncated %v, exit %v", ok, len(o.Output), o.Truncated, o.Exit)
	}
	if _, ok := h.Output("s1", "no-such-terminal", 100); ok {
		t.Fatal("Output of an unknown terminal says ok")
	}
	if err := h.ReleaseTerminal(ctx, tp); err != nil {
		t.Fatal(err)
	}
	if _, err := h.TerminalOutput(ctx, tp); err == nil {
		t.Fatal("a released terminal still answers")
	}

	// A call withdrawn by its ctx returns its cause.
	cause := errors.New("the agent withdrew it")
	wctx, wcancel := context.WithCancelCause(ctx)
	sleeper, err := h.CreateTerminal(ctx, &acp.CreateTerminalParams{SessionID: "s1", Command: "sleep", Args: []string{"30"}, Cwd: dir})
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(200*time.Millisecond, func() { wcancel(cause) })
	if _, err := h.WaitForTerminalExit(wctx, &acp.TerminalParams{SessionID: "s1", TerminalID: sleeper.TerminalID}); !errors.Is(err, cause) {
		t.Fatalf("a withdrawn wait returned %v, want its cause", err)
	}
	if err := h.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
