package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// Worktrees makes and removes one git worktree per thread, each on its own
// branch. Its methods are safe for concurrent use; its fields must not
// change once one has been called. Every method that runs git returns when
// ctx ends, having killed the git command it was running.
type Worktrees struct {
	// Repo is the repository the worktrees are made from.
	Repo string
	// Base is the commit a thread's branch starts from: a branch, tag or
	// commit id (default HEAD). It is read when the branch is made.
	Base string
	// Dir is the directory holding the worktrees, one subdirectory per
	// thread; it is made when needed.
	Dir string
	// DeleteBranches makes Remove delete the thread's branch too. By
	// default the branch, with whatever the agent committed, is kept.
	DeleteBranches bool
	// Git is the git binary (default "git", found in PATH).
	Git string
	// Timeout bounds each git command (default DefaultTimeout).
	Timeout time.Duration
	// Logger receives a line for each worktree made or removed.
	Logger zerolog.Logger
}

// Check reports whether the worktrees can be made: git runs, Repo is a git
// repository and Base names a commit in it. Its errors wrap
// ErrGitNotFound, ErrNotRepository or ErrBaseNotFound, so the caller can
// name the setting at fault.
func (w *Worktrees) Check(ctx context.Context) error {
	repo, _, err := w.paths()
	if err != nil {
		return err
	}
	if _, err := w.run(ctx, os.TempDir(), "version"); err != nil {
		return err
	}
	if err := w.checkRepo(ctx, repo); err != nil {
		return err
	}
	_, err = w.resolveBase(ctx, repo)
	return err
}

// Prepare returns the directory of thread's worktree and the name of its
// branch, making them first if need be: the branch (acp/ and the thread
// id, escaped) from Base, checked out in a new worktree under Dir; a
// branch kept from an earlier worktree is checked out again. Calling it
// again, also from another Worktrees after a restart, returns the same
// worktree as it is. A worktree whose making was cut short is made anew.
// A directory in the way that is not a worktree of Repo is left alone and
// reported (ErrInTheWay).
func (w *Worktrees) Prepare(ctx context.Context, thread string) (dir, branch string, err error) {
	name, err := escapeThread(thread)
	if err != nil {
		return "", "", err
	}
	repo, root, err := w.paths()
	if err != nil {
		return "", "", err
	}
	dir, branch = filepath.Join(root, name), branchPrefix+name
	log := w.Logger.With().Str("thread", thread).Str("dir", dir).Str("branch", branch).Logger()

	unlock, err := lockRepo(ctx, repo)
	if err != nil {
		return "", "", err
	}
	defer unlock()
	if err := w.checkRepo(ctx, repo); err != nil {
		return "", "", err
	}
	wt, err := w.find(ctx, repo, dir)
	if err != nil {
		return "", "", err
	}
	if wt != nil {
		problem := wt.problem()
		if problem == "" {
			log.Debug().Msg("worktree reused")
			return dir, branch, nil
		}
		log.Warn().Str("problem", problem).Msg("unusable worktree removed to be made again")
		if _, err := w.run(ctx, repo, "worktree", "remove", "--force", "--force", "--", dir); err != nil {
			return "", "", err
		}
	}
	if err := clearWay(dir, repo); err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", "", fmt.Errorf("worktree directory: %w", err)
	}
	kept, err := w.branchExists(ctx, repo, branch)
	if err != nil {
		return "", "", err
	}
	if kept {
		_, err = w.run(ctx, repo, "worktree", "add", "--", dir, branch)
	} else {
		var base string
		if base, err = w.resolveBase(ctx, repo); err == nil {
			_, err = w.run(ctx, repo, "worktree", "add", "-b", branch, "--", dir, base)
		}
	}
	if err != nil {
		return "", "", err
	}
	log.Info().Bool("kept_branch", kept).Msg("worktree made")
	return dir, branch, nil
}

// Remove removes thread's worktree, discarding what the agent left in it
// uncommitted (logged first, as git status shows it), and deletes its
// branch if DeleteBranches is set. Stop the thread's agent first. Removing
// a thread that has no worktree does nothing, so Remove is safe to call
// twice.
func (w *Worktrees) Remove(ctx context.Context, thread string) error {
	name, err := escapeThread(thread)
	if err != nil {
		return err
	}
	repo, root, err := w.paths()
	if err != nil {
		return err
	}
	dir, branch := filepath.Join(root, name), branchPrefix+name
	log := w.Logger.With().Str("thread", thread).Str("dir", dir).Str("branch", branch).Logger()

	unlock, err := lockRepo(ctx, repo)
	if err != nil {
		return err
	}
	defer unlock()
	if err := w.checkRepo(ctx, repo); err != nil {
		return err
	}
	wt, err := w.find(ctx, repo, dir)
	if err != nil {
		return err
	}
	if wt != nil {
		ev := log.Info()
		if wt.problem() == "" {
			status, err := w.run(ctx, dir, "status", "--porcelain", "--untracked-files=all")
			switch {
			case err != nil:
				ev = log.Warn().AnErr("status_error", err)
			case status != "":
				ev = log.Warn().Int("changes", strings.Count(status, "\n")).Str("status", clip(status, 4<<10))
			}
		}
		if _, err := w.run(ctx, repo, "worktree", "remove", "--force", "--force", "--", dir); err != nil {
			return err
		}
		ev.Msg("worktree removed")
	} else if err := clearWay(dir, repo); err != nil {
		return err
	}
	if _, err := w.run(ctx, repo, "worktree", "prune"); err != nil {
		return err
	}
	if !w.DeleteBranches {
		return nil
	}
	exists, err := w.branchExists(ctx, repo, branch)
	if err != nil || !exists {
		return err
	}
	out, err := w.run(ctx, repo, "branch", "-D", "--", branch)
	if err != nil {
		return err
	}
	log.Info().Str("output", strings.TrimSpace(out)).Msg("branch deleted")
	return nil
}

// List returns the threads that have a worktree under Dir, sorted. It
// reads the directory only; Remove deals with worktrees git no longer
// knows.
func (w *Worktrees) List() ([]string, error) {
	_, root, err := w.paths()
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("worktree directory: %w", err)
	}
	var threads []string
	for _, e := range entries {
		thread, ok := unescapeThread(e.Name())
		if !ok || !e.IsDir() {
			continue
		}
		if _, err := os.Lstat(filepath.Join(root, e.Name(), ".git")); err == nil {
			threads = append(threads, thread)
		}
	}
	sort.Strings(threads)
	return threads, nil
}

// paths returns Repo and Dir made absolute.
func (w *Worktrees) paths() (repo, root string, err error) {
	if w.Repo == "" {
		return "", "", &wordedError{msg: "no repository given", kind: ErrNotRepository}
	}
	if w.Dir == "" {
		return "", "", errors.New("no directory given for the worktrees")
	}
	if repo, err = filepath.Abs(w.Repo); err != nil {
		return "", "", err
	}
	root, err = filepath.Abs(w.Dir)
	return repo, root, err
}

// checkRepo reports whether repo is a git repository itself (not a
// directory inside one).
func (w *Worktrees) checkRepo(ctx context.Context, repo string) error {
	fi, err := os.Stat(repo)
	if err != nil || !fi.IsDir() {
		why := "does not exist"
		if err == nil {
			why = "is not a directory"
		} else if !errors.Is(err, fs.ErrNotExist) {
			why = "cannot be read: " + unwrapPath(err).Error()
		}
		return &wordedError{msg: fmt.Sprintf("%s %s", repo, why), kind: ErrNotRepository, err: err}
	}
	if _, err := w.run(ctx, repo, "rev-parse", "--git-dir"); err != nil {
		if exitCode(err) < 0 {
			return err
		}
		msg := fmt.Sprintf("%s is not a git repository", repo)
		if ge := (*gitError)(nil); errors.As(err, &ge) && !strings.Contains(ge.stderr, "not a git repository") {
			msg += " that git can use (" + ge.stderr + ")"
		}
		return &wordedError{msg: msg, kind: ErrNotRepository, err: err}
	}
	return nil
}

// resolveBase returns the commit id Base names.
func (w *Worktrees) resolveBase(ctx context.Context, repo string) (string, error) {
	base := w.Base
	if base == "" {
		base = "HEAD"
	}
	out, err := w.run(ctx, repo, "rev-parse", "--verify", "--quiet", "--end-of-options", base+"^{commit}")
	if err != nil {
		if exitCode(err) < 0 {
			return "", err
		}
		return "", &wordedError{msg: fmt.Sprintf("%q is not a commit in %s", base, repo), kind: ErrBaseNotFound, err: err}
	}
	return strings.TrimSpace(out), nil
}

// branchExists reports whether the local branch exists.
func (w *Worktrees) branchExists(ctx context.Context, repo, branch string) (bool, error) {
	_, err := w.run(ctx, repo, "rev-parse", "--verify", "--quiet", "--end-of-options", "refs/heads/"+branch)
	if exitCode(err) == 1 {
		return false, nil
	}
	return err == nil, err
}

// worktree is one entry of git worktree list.
type worktree struct {
	path     string
	locked   string // the reason, if locked
	isLocked bool
	prunable bool
}

// problem says why the worktree cannot be used, or "".
func (wt *worktree) problem() string {
	switch {
	case wt.prunable:
		return "git lists it as prunable"
	case wt.isLocked && wt.locked == "initializing":
		return "its making was cut short"
	}
	if _, err := os.Lstat(filepath.Join(wt.path, ".git")); err != nil {
		return "its directory is gone"
	}
	return ""
}

// find returns the worktree of repo at dir, or nil.
func (w *Worktrees) find(ctx context.Context, repo, dir string) (*worktree, error) {
	out, err := w.run(ctx, repo, "worktree", "list", "--porcelain", "-z")
	if err != nil {
		return nil, err
	}
	want := realPath(dir)
	var cur *worktree
	for _, line := range strings.Split(out, "\x00") {
		key, val, _ := strings.Cut(line, " ")
		switch {
		case key == "worktree":
			cur = nil
			if val == dir || realPath(val) == want {
				cur = &worktree{path: dir}
			}
		case cur == nil:
		case key == "locked":
			cur.isLocked, cur.locked = true, val
		case key == "prunable":
			cur.prunable = true
		case line == "" && cur != nil:
			return cur, nil
		}
	}
	return cur, nil
}

// clearWay makes sure nothing is at dir, removing an empty directory (one
// left by an interrupted removal) but nothing else.
func clearWay(dir, repo string) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := os.Remove(dir); err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return &wordedError{msg: fmt.Sprintf("%s is in the way: it is not a worktree of %s; move it away", dir, repo), kind: ErrInTheWay}
}

// realPath resolves symbolic links in p as far as they exist.
func realPath(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return filepath.Clean(p)
}

// clip shortens s to at most n bytes.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
