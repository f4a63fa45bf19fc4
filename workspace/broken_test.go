package workspace

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A worktree its agent broke is removed without git, without following
// anything it links to, and its record in the repository with it; the
// thread gets a worktree again afterwards. Removing it again does
// nothing.
func TestRemove_BrokenWorktreesAreRemovedWithoutFollowingLinks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		breakIt func(t *testing.T, dir, precious string)
	}{
		{"directory replaced by a link", func(t *testing.T, dir, precious string) {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(precious, dir); err != nil {
				t.Fatal(err)
			}
		}},
		{".git deleted", func(t *testing.T, dir, precious string) {
			if err := os.Remove(filepath.Join(dir, ".git")); err != nil {
				t.Fatal(err)
			}
		}},
		{"junk", func(t *testing.T, dir, precious string) {
			deep := dir
			for range 200 {
				deep = filepath.Join(deep, "d")
			}
			must(t, os.MkdirAll(deep, 0o755))
			must(t, os.WriteFile(filepath.Join(deep, "f"), []byte("x"), 0o644))
			must(t, os.Symlink(precious, filepath.Join(dir, "link")))
			must(t, os.Symlink(filepath.Join(precious, "keep"), filepath.Join(dir, "file-link")))
			must(t, os.Link(filepath.Join(precious, "keep"), filepath.Join(dir, "hard-link")))
			must(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
			must(t, os.WriteFile(filepath.Join(dir, "new\nline"), []byte("x"), 0o644))
			locked := filepath.Join(dir, "locked", "inner")
			must(t, os.MkdirAll(locked, 0o755))
			must(t, os.WriteFile(filepath.Join(locked, "f"), []byte("x"), 0o644))
			must(t, os.Chmod(locked, 0))
			must(t, os.Chmod(filepath.Dir(locked), 0o500))
			for i := range 1200 { // more than a batch
				must(t, os.WriteFile(filepath.Join(dir, "many-"+string(rune('a'+i%26))+strings.Repeat("x", i/26)), nil, 0o644))
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repo := newRepo(t)
			w := newWorktrees(t, repo)
			var logs logBuffer
			w.Logger = w.Logger.Output(&logs)
			dir, _, err := w.Prepare(t.Context(), "9")
			if err != nil {
				t.Fatal(err)
			}
			precious := t.TempDir()
			must(t, os.WriteFile(filepath.Join(precious, "keep"), []byte("keep"), 0o644))
			must(t, os.WriteFile(filepath.Join(precious, ".git"), []byte("gitdir: "+filepath.Join(repo, ".git")+"\n"), 0o644))
			tc.breakIt(t, dir, precious)

			if err := w.Remove(t.Context(), "9"); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(dir); !os.IsNotExist(err) {
				t.Fatalf("the broken worktree is still there: %v", err)
			}
			if b, err := os.ReadFile(filepath.Join(precious, "keep")); err != nil || string(b) != "keep" {
				t.Fatalf("what the worktree linked to was touched: %q, %v", b, err)
			}
			if _, err := os.Stat(filepath.Join(precious, ".git")); err != nil {
				t.Fatalf("what the worktree linked to was touched: %v", err)
			}
			if out := gitT(t, repo, "worktree", "list", "--porcelain"); strings.Contains(out, dir) {
				t.Fatalf("the repository still records the worktree:\n%s", out)
			}
			entries, _ := os.ReadDir(w.Dir)
			if len(entries) != 0 {
				t.Fatalf("left in %s: %v", w.Dir, entries)
			}
			if tc.name != "junk" && !strings.Contains(logs.String(), "broken worktree removed without running git in it") {
				t.Fatalf("not logged as broken:\n%s", logs.String())
			}
			before := logs.String()
			if err := w.Remove(t.Context(), "9"); err != nil {
				t.Fatalf("Remove again: %v", err)
			}
			if after := logs.String(); after != before {
				t.Fatalf("Remove again did something:\n%s", after[len(before):])
			}
			if _, _, err := w.Prepare(t.Context(), "9"); err != nil {
				t.Fatalf("the thread gets no worktree again: %v", err)
			}
			if _, err := os.Stat(filepath.Join(dir, "README")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// What cannot be removed is moved out of the thread's way and out of
// List's sight, reported once (ErrLeftBehind, naming where it is), and
// never tried again; the thread can have a worktree again.
func TestRemove_WhatCannotBeRemovedIsReportedOnceAndLeft(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, to make a file no one can remove")
	}
	repo := newRepo(t)
	w := newWorktrees(t, repo)
	dir, _, err := w.Prepare(t.Context(), "7")
	if err != nil {
		t.Fatal(err)
	}
	stuck := filepath.Join(dir, "stuck")
	must(t, os.WriteFile(stuck, []byte("x"), 0o644))
	if out, err := exec.Command("chattr", "+i", stuck).CombinedOutput(); err != nil {
		t.Skipf("chattr +i: %v %s", err, out)
	}
	var aside string
	t.Cleanup(func() {
		if aside != "" {
			exec.Command("chattr", "-i", filepath.Join(aside, "7", "stuck")).Run()
		}
	})

	err = w.Remove(t.Context(), "7")
	if !errors.Is(err, ErrLeftBehind) {
		exec.Command("chattr", "-i", stuck).Run()
		t.Fatalf("Remove = %v; want ErrLeftBehind", err)
	}
	matches, _ := filepath.Glob(filepath.Join(w.Dir, ".removing-7-*"))
	if len(matches) != 1 {
		t.Fatalf("what is left is not in one place aside: %q", matches)
	}
	aside = matches[0]
	if !strings.Contains(err.Error(), aside) {
		t.Fatalf("the error does not say where what is left is: %v", err)
	}
	t.Log(err)
	if _, err := os.Stat(filepath.Join(aside, "7", "stuck")); err != nil {
		t.Fatalf("what could not be removed is not where the error says: %v", err)
	}
	if threads, err := w.List(); err != nil || len(threads) != 0 {
		t.Fatalf("List = %q, %v; want nothing", threads, err)
	}
	if err := w.Remove(t.Context(), "7"); err != nil {
		t.Fatalf("Remove again: %v", err)
	}
	if _, err := os.Stat(filepath.Join(aside, "7", "stuck")); err != nil {
		t.Fatalf("what was left was touched again: %v", err)
	}
	if _, _, err := w.Prepare(t.Context(), "7"); err != nil {
		t.Fatalf("the thread gets no worktree again: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A worktree of another repository (its profile's repo changed while
// its thread lived) is left alone, not taken for a broken one; one whose
// .git names a record the agent made up inside its own worktree is
// removed as broken.
func TestPrepare_LeavesAnotherRepositorysWorktreeAlone(t *testing.T) {
	before := newWorktrees(t, newRepo(t))
	dir, _, err := before.Prepare(t.Context(), "5")
	if err != nil {
		t.Fatal(err)
	}
	after := newWorktrees(t, newRepo(t))
	after.Dir = before.Dir
	if _, _, err := after.Prepare(t.Context(), "5"); !errors.Is(err, ErrInTheWay) {
		t.Fatalf("Prepare with another repository = %v; want ErrInTheWay", err)
	}
	if err := after.Remove(t.Context(), "5"); !errors.Is(err, ErrInTheWay) {
		t.Fatalf("Remove with another repository = %v; want ErrInTheWay", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "README")); err != nil {
		t.Fatalf("the other repository's worktree was touched: %v", err)
	}

	// The agent's own forgery of such a record.
	fake := filepath.Join(dir, "fake", "worktrees", "5")
	must(t, os.MkdirAll(fake, 0o755))
	must(t, os.WriteFile(filepath.Join(fake, "gitdir"), []byte(filepath.Join(dir, ".git")+"\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, ".git"), []byte("gitdir: "+fake+"\n"), 0o644))
	if err := after.Remove(t.Context(), "5"); err != nil {
		t.Fatalf("Remove of a worktree pointing at a record inside itself: %v", err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("the forged worktree is still there: %v", err)
	}
}
