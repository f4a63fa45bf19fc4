package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A fork's worktree starts where its parent's branch is, with what was
// committed there, not at the base.
func TestPrepareFrom_StartsAtTheOtherThreadsBranch(t *testing.T) {
	repo := newRepo(t)
	w := newWorktrees(t, repo)
	parent, _, err := w.Prepare(t.Context(), "1")
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(parent, "work.txt"), []byte("done so far\n"), 0o644))
	gitT(t, parent, "add", "work.txt")
	gitT(t, parent, "commit", "-q", "-m", "parent's work")
	must(t, os.WriteFile(filepath.Join(parent, "draft.txt"), []byte("uncommitted\n"), 0o644))

	child, branch, err := w.PrepareFrom(t.Context(), "2", "1")
	if err != nil {
		t.Fatal(err)
	}
	if branch != "acp/2" {
		t.Errorf("the fork's branch is %s, want acp/2", branch)
	}
	if b, err := os.ReadFile(filepath.Join(child, "work.txt")); err != nil || string(b) != "done so far\n" {
		t.Errorf("the fork does not have the parent's commit: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(child, "draft.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the parent's uncommitted file came along: %v", err)
	}
	if got, want := strings.TrimSpace(gitT(t, child, "rev-parse", "HEAD")), strings.TrimSpace(gitT(t, parent, "rev-parse", "HEAD")); got != want {
		t.Errorf("the fork is at %s, the parent at %s", got, want)
	}
	if _, _, err := w.PrepareFrom(t.Context(), "3", "404"); !errors.Is(err, ErrBaseNotFound) {
		t.Errorf("forking a thread that has no branch: %v, want ErrBaseNotFound", err)
	}
}
