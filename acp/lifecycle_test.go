package acp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// fakeAgent is testdata/fakeagent, built by TestMain.
var fakeAgent string

// buildFakeAgent compiles testdata/fakeagent into dir.
func buildFakeAgent(dir string) (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	bin := filepath.Join(dir, "fakeagent")
	cmd := exec.Command("go", "build", "-o", bin, "./testdata/fakeagent")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(out)))
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build fake agent: %w\n%s", err, b)
	}
	return bin, nil
}

// spawnFake starts the fake agent as a real subprocess with args and
// returns a Conn to it, initialized. The test's cleanup closes the Conn
// and waits for the process.
func spawnFake(t *testing.T, args ...string) *Conn {
	t.Helper()
	cmd := exec.Command(fakeAgent, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := NewConn(stdout, stdin, Options{Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	t.Cleanup(func() {
		c.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// promptText runs one prompt in session sid and returns the answer's
// text.
func promptText(t *testing.T, c *Conn, sid, text string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub, err := c.Subscribe(sid, ApproverFunc(func(context.Context, *PermissionRequest) PermissionOutcome { return PermissionOutcome{} }))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	call, err := c.Prompt(ctx, sid, []ContentBlock{TextBlock(text)})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for {
		select {
		case u := <-sub.Updates():
			sub.Took(u)
			if u.Kind == UpdateMessageChunk && u.Content != nil {
				b.WriteString(u.Content.Text)
			}
		case <-call.Done():
			for {
				select {
				case u := <-sub.Updates():
					if u.Kind == UpdateMessageChunk && u.Content != nil {
						b.WriteString(u.Content.Text)
					}
					continue
				default:
				}
				break
			}
			if err := call.Result(nil); err != nil {
				t.Fatalf("prompt %q: %v", text, err)
			}
			return b.String()
		case <-ctx.Done():
			t.Fatalf("prompt %q: no answer", text)
		}
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// sessionCapabilities in initialize's answer say which of list, resume,
// close and fork the agent serves; left out, none.
func TestInitialize_ReadsTheSessionCapabilities(t *testing.T) {
	c := spawnFake(t, "-list-sessions", "-resume-session", "-close-session")
	s := c.Capabilities().Sessions
	if !s.CanList() || !s.CanResume() || !s.CanClose() || s.CanFork() {
		t.Errorf("list, resume, close offered: got list %v resume %v close %v fork %v", s.CanList(), s.CanResume(), s.CanClose(), s.CanFork())
	}
	if s := spawnFake(t).Capabilities().Sessions; s.CanList() || s.CanResume() || s.CanClose() || s.CanFork() {
		t.Errorf("nothing offered: got %+v", s)
	}
	if s := spawnFake(t, "-fork-session").Capabilities().Sessions; !s.CanFork() || s.CanList() {
		t.Errorf("fork alone offered: got %+v", s)
	}
}

// session/resume takes up in a new process a session an earlier one
// made, with nothing of its history replayed, and the turns that follow
// are that session's.
func TestResumeSession_ContinuesASessionWithoutReplayingIt(t *testing.T) {
	dir := t.TempDir()
	first := spawnFake(t, "-resume-session")
	sid, _, err := first.NewSession(testCtx(t), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	promptText(t, first, sid, "stream 1")

	second := spawnFake(t, "-resume-session")
	early, err := second.ResumeSession(testCtx(t), sid, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range early {
		if u.Kind == UpdateUserMessageChunk {
			t.Errorf("session/resume replayed history: %+v", u)
		}
	}
	if got, want := promptText(t, second, sid, "session"), "session "+sid+" (resumed); 1 earlier prompts; last: stream 1"; got != want {
		t.Errorf("the resumed session says %q, want %q", got, want)
	}

	if _, err := second.ResumeSession(testCtx(t), "sess-nope", dir, nil); err == nil {
		t.Error("resuming a session the agent does not have succeeded")
	}
	plain := spawnFake(t)
	_, err = plain.ResumeSession(testCtx(t), sid, dir, nil)
	if rpcErr, ok := errors.AsType[*RPCError](err); !ok || rpcErr.Code != CodeMethodNotFound {
		t.Errorf("session/resume to an agent that does not offer it: %v, want method not found", err)
	}
}

// session/fork makes a new session that starts with the earlier one's
// history, in the directory it names; the earlier one goes on apart.
func TestForkSession_StartsANewSessionFromAnother(t *testing.T) {
	dir := t.TempDir()
	c := spawnFake(t, "-fork-session")
	parent, _, err := c.NewSession(testCtx(t), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	promptText(t, c, parent, "stream 1")
	child, _, err := c.ForkSession(testCtx(t), parent, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if child == parent || child == "" {
		t.Fatalf("the fork's session is %q (the parent's is %q)", child, parent)
	}
	if got, want := promptText(t, c, child, "session"), "session "+child+" (forked from "+parent+"); 1 earlier prompts; last: stream 1"; got != want {
		t.Errorf("the fork says %q, want %q", got, want)
	}
	if got := promptText(t, c, parent, "session"); !strings.Contains(got, "(new); 1 earlier prompts") {
		t.Errorf("the parent after the fork says %q, want its own history alone", got)
	}
	if _, ok := c.SessionState(child); !ok {
		t.Error("the fork's session is not known to the Conn")
	}
}

// session/list is read page after page, newest first, with titles and
// dates, and no more sessions than asked for are kept.
func TestListSessions_ReadsEveryPageUpToTheBound(t *testing.T) {
	dir := t.TempDir()
	c := spawnFake(t, "-list-sessions", "-list-page", "2")
	var ids []string
	for i := range 3 {
		sid, _, err := c.NewSession(testCtx(t), dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		promptText(t, c, sid, fmt.Sprintf("title Session %d", i))
		ids = append(ids, sid)
		time.Sleep(20 * time.Millisecond) // distinct modification times
	}
	list, err := c.ListSessions(testCtx(t), dir, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 {
		t.Fatalf("listed %d sessions over two pages, want 3: %+v", len(list), list)
	}
	for i, s := range list {
		want := ids[2-i]
		if s.SessionID != want || s.Title != fmt.Sprintf("Session %d", 2-i) || s.Cwd != dir || s.Updated.IsZero() {
			t.Errorf("session %d is %+v, want %s titled “Session %d” in %s with a date", i, s, want, 2-i, dir)
		}
	}
	if list, err := c.ListSessions(testCtx(t), dir, 1); err != nil || len(list) != 1 || list[0].SessionID != ids[2] {
		t.Errorf("listed at most 1: %+v, %v", list, err)
	}
}

// session/close frees the session in the agent and the Conn forgets it.
func TestCloseSession_FreesTheSession(t *testing.T) {
	dir := t.TempDir()
	c := spawnFake(t, "-close-session")
	sid, _, err := c.NewSession(testCtx(t), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CloseSession(testCtx(t), sid); err != nil {
		t.Fatal(err)
	}
	closed, err := os.ReadFile(filepath.Join(dir, ".fakeagent", "closed"))
	if err != nil || strings.TrimSpace(string(closed)) != sid {
		t.Errorf("the agent closed %q (%v), want %s", closed, err, sid)
	}
	if _, ok := c.SessionState(sid); ok {
		t.Error("the Conn still knows the closed session")
	}
	if err := c.CloseSession(testCtx(t), sid); err == nil {
		t.Error("closing it again succeeded")
	}
}
