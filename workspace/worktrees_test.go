package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
)

func TestPrepare_TwiceReturnsTheSameWorktree(t *testing.T) {
	repo := newRepo(t)
	w := newWorktrees(t, repo)
	dir, branch, err := w.Prepare(t.Context(), "1234567890")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(w.Dir, "1234567890"); dir != want || branch != "acp/1234567890" {
		t.Fatalf("Prepare = %q, %q; want %q, acp/1234567890", dir, branch, want)
	}
	if got := strings.TrimSpace(gitT(t, dir, "branch", "--show-current")); got != branch {
		t.Fatalf("worktree is on %q, want %q", got, branch)
	}
	if err := os.WriteFile(filepath.Join(dir, "work"), []byte("in progress"), 0o644); err != nil {
		t.Fatal(err)
	}

	again, branch2, err := w.Prepare(t.Context(), "1234567890")
	if err != nil || again != dir || branch2 != branch {
		t.Fatalf("second Prepare = %q, %q, %v; want %q, %q", again, branch2, err, dir, branch)
	}
	// After a restart: a new value with the same settings.
	restarted := newWorktrees(t, repo)
	again, _, err = restarted.Prepare(t.Context(), "1234567890")
	if err != nil || again != dir {
		t.Fatalf("Prepare after a restart = %q, %v; want %q", again, err, dir)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "work")); err != nil || string(b) != "in progress" {
		t.Fatalf("the agent's file after Prepare again: %q, %v", b, err)
	}
}

func TestPrepare_ThreadsDoNotSeeEachOther(t *testing.T) {
	w := newWorktrees(t, newRepo(t))
	a, _, err := w.Prepare(t.Context(), "111")
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := w.Prepare(t.Context(), "222")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a, "secret-plan"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitT(t, a, "add", "secret-plan")
	if err := os.WriteFile(filepath.Join(a, "README"), []byte("changed in 111\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(b, "secret-plan")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("thread 222 sees thread 111's new file (stat: %v)", err)
	}
	if got, _ := os.ReadFile(filepath.Join(b, "README")); string(got) != "hello\n" {
		t.Errorf("thread 222's README = %q, want the base's", got)
	}
	if st := gitT(t, b, "status", "--porcelain"); st != "" {
		t.Errorf("thread 222's status shows thread 111's changes:\n%s", st)
	}
}

func TestPrepare_BranchStartsAtBase(t *testing.T) {
	repo := newRepo(t)
	first := strings.TrimSpace(gitT(t, repo, "rev-parse", "HEAD"))
	gitT(t, repo, "tag", "v1")
	gitT(t, repo, "commit", "-q", "--allow-empty", "-m", "second")
	w := newWorktrees(t, repo)
	w.Base = "v1"
	dir, _, err := w.Prepare(t.Context(), "42")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(gitT(t, dir, "rev-parse", "HEAD")); got != first {
		t.Fatalf("worktree at %s, want the base v1 = %s", got, first)
	}
}

func TestCheck_AcceptsAGoodSetup(t *testing.T) {
	w := newWorktrees(t, newRepo(t))
	w.Base = "main"
	if err := w.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestCheck_BaseNotFound(t *testing.T) {
	w := newWorktrees(t, newRepo(t))
	w.Base = "no-such-branch"
	err := w.Check(t.Context())
	if !errors.Is(err, ErrBaseNotFound) || !strings.Contains(err.Error(), `"no-such-branch" is not a commit in `) {
		t.Fatalf("Check = %v; want ErrBaseNotFound naming the base", err)
	}
	t.Log(err)
	if _, _, err := w.Prepare(t.Context(), "1"); !errors.Is(err, ErrBaseNotFound) {
		t.Fatalf("Prepare = %v; want ErrBaseNotFound", err)
	}
}

func TestCheck_NotARepository(t *testing.T) {
	plain := t.TempDir()
	repo := newRepo(t)
	sub := filepath.Join(repo, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, repo, says string }{
		{"plain directory", plain, plain + " is not a git repository"},
		{"missing", filepath.Join(plain, "gone"), filepath.Join(plain, "gone") + " does not exist"},
		{"inside a repository", sub, sub + " is not a git repository"},
		{"a file", filepath.Join(repo, "README"), filepath.Join(repo, "README") + " is not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorktrees(t, tc.repo)
			w.Dir = filepath.Join(t.TempDir(), "worktrees")
			err := w.Check(t.Context())
			if !errors.Is(err, ErrNotRepository) || err.Error() != tc.says {
				t.Fatalf("Check = %v; want ErrNotRepository saying %q", err, tc.says)
			}
			if _, _, err := w.Prepare(t.Context(), "1"); !errors.Is(err, ErrNotRepository) {
				t.Fatalf("Prepare = %v; want ErrNotRepository", err)
			}
		})
	}
}

func TestCheck_GitMissing(t *testing.T) {
	w := newWorktrees(t, newRepo(t))
	w.Git = filepath.Join(t.TempDir(), "bin", "git")
	err := w.Check(t.Context())
	if !errors.Is(err, ErrGitNotFound) || !strings.Contains(err.Error(), w.Git) {
		t.Fatalf("Check = %v; want ErrGitNotFound naming %s", err, w.Git)
	}
	t.Log(err)
	if _, _, err := w.Prepare(t.Context(), "1"); !errors.Is(err, ErrGitNotFound) {
		t.Fatalf("Prepare = %v; want ErrGitNotFound", err)
	}
	w.Git = "no-such-git-anywhere"
	if err := w.Check(t.Context()); !errors.Is(err, ErrGitNotFound) {
		t.Fatalf("Check with a name not in PATH = %v; want ErrGitNotFound", err)
	}
}

// Remove logs what the agent left uncommitted and keeps its branch, which
// a later Prepare checks out again; hardened and confined alike.
func TestRemove_KeepsTheBranchByDefault(t *testing.T) {
	for _, m := range gitModes {
		t.Run(m.name, func(t *testing.T) {
			repo := newRepo(t)
			w := newWorktrees(t, repo)
			var logs logBuffer
			w.Logger = zerolog.New(&logs)
			owner := m.set(t, w)
			dir, branch, err := w.Prepare(t.Context(), "77")
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "committed"), []byte("c"), 0o644); err != nil {
				t.Fatal(err)
			}
			gitT(t, dir, "add", "committed")
			gitT(t, dir, "commit", "-q", "-m", "agent's work")
			if err := os.WriteFile(filepath.Join(dir, "left-over"), []byte("u"), 0o644); err != nil {
				t.Fatal(err)
			}
			giveTo(t, owner, repo, dir)

			if err := w.Remove(t.Context(), "77"); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("worktree directory still there (stat: %v)", err)
			}
			if list := gitT(t, repo, "worktree", "list"); strings.Contains(list, dir) {
				t.Fatalf("git still lists the worktree:\n%s", list)
			}
			gitT(t, repo, "rev-parse", "--verify", "refs/heads/"+branch)
			if !strings.Contains(logs.String(), "?? left-over") {
				t.Fatalf("the discarded file is not in the log:\n%s", logs.String())
			}
			if err := w.Remove(t.Context(), "77"); err != nil {
				t.Fatalf("Remove again: %v", err)
			}

			// The thread comes back: its kept branch is checked out again.
			again, _, err := w.Prepare(t.Context(), "77")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(again, "committed")); err != nil {
				t.Fatalf("the kept branch's commit is not in the new worktree: %v", err)
			}
		})
	}
}

func TestRemove_DeletesTheBranchWhenAsked(t *testing.T) {
	for _, m := range gitModes {
		t.Run(m.name, func(t *testing.T) {
			repo := newRepo(t)
			w := newWorktrees(t, repo)
			w.DeleteBranches = true
			m.set(t, w)
			_, branch, err := w.Prepare(t.Context(), "88")
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Remove(t.Context(), "88"); err != nil {
				t.Fatal(err)
			}
			if out := gitT(t, repo, "branch", "--list", branch); out != "" {
				t.Fatalf("branch %s still there: %s", branch, out)
			}
			if err := w.Remove(t.Context(), "88"); err != nil {
				t.Fatalf("Remove again: %v", err)
			}
		})
	}
}

func TestPrepare_ConcurrentThreadsAllSucceed(t *testing.T) {
	repo := newRepo(t)
	// Two values on one repository, as two agents configured with it.
	ws := []*Worktrees{newWorktrees(t, repo), newWorktrees(t, repo)}
	const n = 8
	dirs := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			dirs[i], _, errs[i] = ws[i%2].Prepare(t.Context(), "9000"+string(rune('0'+i)))
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("thread %d: %v", i, err)
		}
	}
	if got := len(slices.Compact(slices.Sorted(slices.Values(dirs)))); got != n {
		t.Errorf("%d distinct directories, want %d: %q", got, n, dirs)
	}
	threads, err := ws[0].List()
	if err != nil || len(threads) != n {
		t.Fatalf("List = %q, %v; want %d threads", threads, err, n)
	}
}

func TestPrepare_HostileThreadIsConfined(t *testing.T) {
	repo := newRepo(t)
	w := newWorktrees(t, repo)
	hostile := []string{"../x", "-b", "--force", "..", ".", "a/../../b", "/etc", "x.lock",
		"@{-1}", "HEAD", "a b", "~1", "a:b", "x\x00y", "\n", "%2E%2E", "..%2F", "refs/heads/main"}
	for _, thread := range hostile {
		dir, branch, err := w.Prepare(t.Context(), thread)
		if err != nil {
			t.Errorf("Prepare(%q): %v", thread, err)
			continue
		}
		if filepath.Dir(dir) != w.Dir {
			t.Errorf("Prepare(%q) made %s, outside %s", thread, dir, w.Dir)
		}
		if !strings.HasPrefix(branch, "acp/") || strings.Count(branch, "/") != 1 {
			t.Errorf("Prepare(%q) made branch %q", thread, branch)
		}
		gitT(t, repo, "check-ref-format", "--branch", branch)
	}
	got, err := w.List()
	if err != nil {
		t.Fatal(err)
	}
	if want := slices.Sorted(slices.Values(hostile)); !slices.Equal(got, want) {
		t.Errorf("List = %q\nwant   %q", got, want)
	}
	entries, _ := os.ReadDir(filepath.Dir(repo))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"repo", "worktrees"}) {
		t.Errorf("next to the repository: %q; want only repo and worktrees", names)
	}
	if head := strings.TrimSpace(gitT(t, repo, "branch", "--show-current")); head != "main" {
		t.Errorf("the repository's own checkout moved to %q", head)
	}
	for _, thread := range hostile {
		if err := w.Remove(t.Context(), thread); err != nil {
			t.Errorf("Remove(%q): %v", thread, err)
		}
	}
	if got, _ := w.List(); len(got) != 0 {
		t.Errorf("List after removing all = %q", got)
	}

	for _, thread := range []string{"", strings.Repeat("9", maxThread+1)} {
		if _, _, err := w.Prepare(t.Context(), thread); !errors.Is(err, ErrBadThread) {
			t.Errorf("Prepare(%q) = %v; want ErrBadThread", thread, err)
		}
	}
}

func TestPrepare_RemakesAnInterruptedWorktree(t *testing.T) {
	repo := newRepo(t)
	w := newWorktrees(t, repo)
	dir, _, err := w.Prepare(t.Context(), "5")
	if err != nil {
		t.Fatal(err)
	}
	// What a git killed halfway through worktree add leaves behind.
	admin := strings.TrimSpace(gitT(t, dir, "rev-parse", "--absolute-git-dir"))
	if err := os.WriteFile(filepath.Join(admin, "locked"), []byte("initializing"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.Prepare(t.Context(), "5"); err != nil {
		t.Fatal(err)
	}
	if list := gitT(t, repo, "worktree", "list", "--porcelain"); strings.Contains(list, "locked") {
		t.Fatalf("worktree still marked as being made:\n%s", list)
	}

	// A worktree directory deleted by hand.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.Prepare(t.Context(), "5"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "README")); err != nil {
		t.Fatalf("worktree not checked out again: %v", err)
	}
}

func TestPrepare_LeavesAStrangeDirectoryAlone(t *testing.T) {
	w := newWorktrees(t, newRepo(t))
	dir := filepath.Join(w.Dir, "6")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "precious"), []byte("p"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := w.Prepare(t.Context(), "6")
	if !errors.Is(err, ErrInTheWay) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Prepare = %v; want ErrInTheWay naming %s", err, dir)
	}
	if err := w.Remove(t.Context(), "6"); !errors.Is(err, ErrInTheWay) {
		t.Fatalf("Remove = %v; want ErrInTheWay", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "precious")); err != nil {
		t.Fatalf("the directory's content was touched: %v", err)
	}
}

func TestPrepare_IgnoresTheBrokersGitVariables(t *testing.T) {
	repo := newRepo(t)
	other := newRepo(t)
	t.Setenv("GIT_DIR", filepath.Join(other, ".git"))
	t.Setenv("GIT_WORK_TREE", other)
	t.Setenv("GIT_INDEX_FILE", filepath.Join(other, ".git", "index"))
	w := newWorktrees(t, repo)
	_, branch, err := w.Prepare(t.Context(), "3")
	if err != nil {
		t.Fatal(err)
	}
	gitT(t, repo, "rev-parse", "--verify", "refs/heads/"+branch)
	if out := gitT(t, other, "branch", "--list", branch); out != "" {
		t.Fatalf("branch made in the repository GIT_DIR names")
	}
}
