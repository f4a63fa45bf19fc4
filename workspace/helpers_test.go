package workspace

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
)

// newRepo makes a repository with one commit on main, in a directory of
// its own (next to which the tests put the worktrees).
func newRepo(t testing.TB) string {
	t.Helper()
	repo := filepath.Join(t.TempDir(), "repo")
	gitT(t, "", "init", "-q", "-b", "main", repo)
	if err := os.WriteFile(filepath.Join(repo, "README"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitT(t, repo, "add", "README")
	gitT(t, repo, "commit", "-q", "-m", "first")
	return repo
}

// gitT runs git for the test itself, with an identity to commit with,
// none of the test process's GIT_* variables, and whatever user owns the
// repository. What an agent planted that this runs marks nothing
// (MARKS, see payload).
func gitT(t testing.TB, dir string, args ...string) string {
	t.Helper()
	args = append([]string{"-c", "user.name=Test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false", "-c", "safe.directory=*"}, args...)
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "MARKS="+os.DevNull)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// newWorktrees returns worktrees of repo kept in a directory next to it.
func newWorktrees(t *testing.T, repo string) *Worktrees {
	return &Worktrees{
		Repo:   repo,
		Dir:    filepath.Join(filepath.Dir(repo), "worktrees"),
		Logger: zerolog.New(zerolog.NewTestWriter(t)),
	}
}

// fakeGit writes a shell script standing in for git and returns its path.
func fakeGit(t *testing.T, script string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "git")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// logBuffer collects log lines written from several goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
