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
	"syscall"
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
	// thread, and with SharedRepo the broker's copy of it (.shared.git);
	// it is made when needed.
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
	// Confine, if set, confines every git command: agents can write the
	// repository's git directory and their own worktrees, so whatever of
	// theirs git might run despite the hardened invocation (see package
	// doc) must not run as the broker. Directories Worktrees makes for a
	// git command to write in are given to the user it returns.
	Confine Confiner
	// SharedRepo, if set, is the repository every agent host's clone of
	// Repo shares (a path, or a file://, ssh:// or https:// URL), from
	// the broker's configuration: Publish pushes a thread's branch there,
	// and Prepare continues a thread from there (see Publish, Prepare),
	// each through the broker's copy of it in Dir, which keeps what they
	// carried so that the next carries only what is new.
	SharedRepo string
}

// Confiner confines one git command of the broker's (see
// Worktrees.Confine). argv is git's command line, its absolute path
// first; env its whole environment; dir its working directory; readOnly
// and writable the paths it must read, and write. It returns the command
// line to run instead and the user to start it as (nil: the broker's).
type Confiner func(argv, env []string, dir string, readOnly, writable []string) ([]string, *syscall.Credential)

// Check reports whether the worktrees can be made: git runs, Repo is a git
// repository and Base names a commit in it. Its errors wrap
// ErrGitNotFound, ErrNotRepository or ErrBaseNotFound, so the caller can
// name the setting at fault.
func (w *Worktrees) Check(ctx context.Context) error {
	repo, _, err := w.paths()
	if err != nil {
		return err
	}
	if _, err := w.run(ctx, gitCmd{args: []string{"version"}}); err != nil {
		if exitCode(err) >= 0 { // git, or its confinement, starts and fails
			err = &wordedError{msg: "git cannot be run: " + err.Error(), kind: ErrGitNotFound, err: err}
		}
		return err
	}
	common, err := w.repository(ctx, repo)
	if err != nil {
		return err
	}
	_, err = w.resolveBase(ctx, repo, common)
	return err
}

// Prepare returns the directory of thread's worktree and the name of its
// branch, making them first if need be: the branch (acp/ and the thread
// id, escaped) from Base, checked out in a new worktree under Dir; a
// branch kept from an earlier worktree is checked out again. Calling it
// again, also from another Worktrees after a restart, returns the same
// worktree as it is. A worktree whose making was cut short, or that its
// agent broke (its directory or its .git replaced, its record in the
// repository gone), is removed without running git in it and made anew.
// A directory in the way that was never a worktree is left alone and
// reported (ErrInTheWay).
//
// With SharedRepo set, Prepare first fetches the thread's branch from
// there. A branch this clone has not is made from it, so the thread
// continues from the last commit published on any host (from Base when
// SharedRepo has no such branch either). A branch this clone has that is
// behind the shared one (the thread ran here, then elsewhere) is
// fast-forwarded to it, its worktree too, keeping what the agent left
// uncommitted; when it cannot be (the two have diverged, or what was left
// uncommitted here is in the way) this clone's branch and worktree are
// kept as they are, untouched, and the log says so. A SharedRepo that
// cannot be reached fails Prepare (ErrSharedRepo) only for a thread with
// no branch here, which would otherwise start afresh.
func (w *Worktrees) Prepare(ctx context.Context, thread string) (dir, branch string, err error) {
	return w.prepare(ctx, thread, "")
}

// PrepareFrom is Prepare for a thread that starts from another: a branch
// it makes starts where from's branch is now, with what from's agent
// committed (what it left uncommitted is not carried), rather than at
// Base. From's branch must exist (from's worktree was made).
func (w *Worktrees) PrepareFrom(ctx context.Context, thread, from string) (dir, branch string, err error) {
	fromName, err := escapeThread(from)
	if err != nil {
		return "", "", err
	}
	return w.prepare(ctx, thread, branchPrefix+fromName)
}

// prepare is Prepare, a new branch starting at fromBranch ("": at Base)
// unless the shared repository has it.
func (w *Worktrees) prepare(ctx context.Context, thread, fromBranch string) (dir, branch string, err error) {
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

	// The shared repository is reached before this one is locked: its
	// branch is fetched into a stage of the broker's.
	var s *stage
	var shared string // the commit the shared branch is at; "": none
	var sharedErr error
	var startAt string // the commit a new branch starts at, if not Base or fromBranch
	if w.SharedRepo != "" {
		if s, err = w.newStage(ctx); err != nil {
			return "", "", err
		}
		defer s.remove(log)
		shared, sharedErr = w.fetchShared(ctx, s, repo, branch)
		if err := context.Cause(ctx); err != nil {
			return "", "", err
		}
	}

	unlock, err := lockRepo(ctx, repo)
	if err != nil {
		return "", "", err
	}
	defer unlock()
	common, err := w.repository(ctx, repo)
	if err != nil {
		return "", "", err
	}
	st, err := inspect(ctx, common, root, name)
	if err != nil {
		return "", "", err
	}
	if w.SharedRepo != "" {
		if startAt, err = w.followShared(ctx, common, st, branch, s, shared, sharedErr, log); err != nil {
			return "", "", err
		}
	}
	if !st.none() {
		if st.problem == "" {
			log.Debug().Msg("worktree reused")
			return dir, branch, nil
		}
		if st.ours() {
			log.Warn().Str("problem", st.problem).Msg("unusable worktree removed to be made again")
		}
		if err := discard(ctx, common, root, name, st, repo); err != nil {
			if _, lerr := os.Lstat(dir); !errors.Is(err, ErrLeftBehind) || !errors.Is(lerr, fs.ErrNotExist) {
				return "", "", err
			}
			// Out of the thread's way: said once, and left.
			log.Error().Err(err).Msg("what is left of the unusable worktree was moved aside")
		}
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", "", fmt.Errorf("worktree directory: %w", err)
	}
	// Made here, so that a confined git writes in it alone, not in root
	// beside the other threads' worktrees.
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("worktree directory: %w", err)
	}
	kept, err := w.branchExists(ctx, common, branch)
	if err != nil {
		return "", "", err
	}
	// The worktree is made locked and empty, then checked out: one cut
	// short is found locked, and made anew.
	add := []string{"worktree", "add", "--no-checkout", "--lock", "--reason", "initializing"}
	if kept {
		add = append(add, "--", dir, branch)
	} else {
		var base string
		switch {
		case startAt != "":
			base = startAt
		case fromBranch != "":
			base, err = w.resolveBranch(ctx, common, fromBranch)
		default:
			base, err = w.resolveBase(ctx, repo, common)
		}
		if err != nil {
			return "", "", err
		}
		add = append(add, "-b", branch, "--", dir, base)
	}
	if _, err := w.run(ctx, gitCmd{args: add, gitDir: common, common: common, writable: []string{common, dir}, own: []string{dir}}); err != nil {
		return "", "", err
	}
	if st, err = inspect(ctx, common, root, name); err != nil {
		return "", "", err
	}
	if !st.cutShort {
		return "", "", fmt.Errorf("git worktree add made no worktree at %s as asked", dir)
	}
	admin := st.admin(common)
	checkout := gitCmd{args: []string{"reset", "--hard", "--quiet", "--no-recurse-submodules"},
		gitDir: admin, common: common, workTree: dir, writable: []string{common, dir}}
	if checkout.filters, err = w.filterDrivers(ctx, checkout); err != nil {
		return "", "", err
	}
	if _, err := w.run(ctx, checkout); err != nil {
		return "", "", err
	}
	if _, err := w.run(ctx, gitCmd{args: []string{"worktree", "unlock", "--", dir}, gitDir: common, common: common,
		readOnly: []string{dir}, writable: []string{common}}); err != nil {
		return "", "", err
	}
	log.Info().Bool("kept_branch", kept).Msg("worktree made")
	return dir, branch, nil
}

// Remove removes thread's worktree, discarding what the agent left in it
// uncommitted (logged first, as git status shows it), and deletes its
// branch if DeleteBranches is set. Stop the thread's agent first. A
// worktree its agent broke is removed without running git in it (and
// logged so). The directory is removed without following symbolic
// links; what cannot be removed is moved out of the thread's way and
// reported (ErrLeftBehind). A directory that was never a worktree is
// left alone (ErrInTheWay). Removing a thread that has no worktree does
// nothing, so Remove is safe to call twice.
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
	common, err := w.repository(ctx, repo)
	if err != nil {
		return err
	}
	st, err := inspect(ctx, common, root, name)
	if err != nil {
		return err
	}
	var left error
	if !st.none() {
		ev := log.Info()
		switch {
		case st.problem == "":
			status, err := w.status(ctx, common, st.admin(common), dir)
			switch {
			case err != nil:
				ev = log.Warn().AnErr("status_error", err)
			case status != "":
				ev = log.Warn().Int("changes", strings.Count(status, "\n")).Str("status", clip(status, 4<<10))
			}
		case st.ours():
			ev = log.Warn().Str("problem", st.problem)
		}
		left = discard(ctx, common, root, name, st, repo)
		if left != nil && !errors.Is(left, ErrLeftBehind) {
			return left
		}
		switch {
		case left != nil:
			ev.Msg("worktree moved aside, not all of it removed")
		case st.problem != "" && st.ours():
			ev.Msg("broken worktree removed without running git in it")
		default:
			ev.Msg("worktree removed")
		}
	}
	if _, err := w.run(ctx, gitCmd{args: []string{"worktree", "prune"}, gitDir: common, common: common, writable: []string{common}}); err != nil {
		return errors.Join(left, err)
	}
	if !w.DeleteBranches {
		return left
	}
	exists, err := w.branchExists(ctx, common, branch)
	if err != nil || !exists {
		return errors.Join(left, err)
	}
	out, err := w.run(ctx, gitCmd{args: []string{"branch", "-D", "--", branch}, gitDir: common, common: common, writable: []string{common}})
	if err != nil {
		return errors.Join(left, err)
	}
	log.Info().Str("output", strings.TrimSpace(out)).Msg("branch deleted")
	return left
}

// status is git status of the worktree dir, whose record is admin: what
// its agent left uncommitted. Nothing is written, and nothing of the
// agent's runs: the repository's filter drivers are off, submodules
// ignored.
func (w *Worktrees) status(ctx context.Context, common, admin, dir string) (string, error) {
	c := gitCmd{args: []string{"status", "--porcelain", "--untracked-files=all", "--ignore-submodules=all"},
		gitDir: admin, common: common, workTree: dir, readOnly: []string{common, dir}}
	var err error
	if c.filters, err = w.filterDrivers(ctx, c); err != nil {
		return "", err
	}
	return w.run(ctx, c)
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

// repository returns Repo's git directory (see GitDir) once git has
// said it is a repository.
func (w *Worktrees) repository(ctx context.Context, repo string) (string, error) {
	common, err := GitDir(repo)
	if err != nil {
		return "", err
	}
	if _, err := w.run(ctx, gitCmd{args: []string{"rev-parse", "--git-dir"}, gitDir: common, common: common, readOnly: []string{common}}); err != nil {
		if exitCode(err) < 0 {
			return "", err
		}
		msg := fmt.Sprintf("%s is not a git repository", repo)
		if ge := (*gitError)(nil); errors.As(err, &ge) && !strings.Contains(ge.stderr, "not a git repository") {
			msg += " that git can use (" + ge.stderr + ")"
		}
		return "", &wordedError{msg: msg, kind: ErrNotRepository, err: err}
	}
	return common, nil
}

// resolveBase returns the commit id Base names.
func (w *Worktrees) resolveBase(ctx context.Context, repo, common string) (string, error) {
	base := w.Base
	if base == "" {
		base = "HEAD"
	}
	out, err := w.run(ctx, gitCmd{args: []string{"rev-parse", "--verify", "--quiet", "--end-of-options", base + "^{commit}"},
		gitDir: common, common: common, readOnly: []string{common}})
	if err != nil {
		if exitCode(err) < 0 {
			return "", err
		}
		return "", &wordedError{msg: fmt.Sprintf("%q is not a commit in %s", base, repo), kind: ErrBaseNotFound, err: err}
	}
	return strings.TrimSpace(out), nil
}

// resolveBranch returns the commit id a local branch is at.
func (w *Worktrees) resolveBranch(ctx context.Context, common, branch string) (string, error) {
	out, err := w.run(ctx, gitCmd{args: []string{"rev-parse", "--verify", "--quiet", "--end-of-options", "refs/heads/" + branch + "^{commit}"},
		gitDir: common, common: common, readOnly: []string{common}})
	if err != nil {
		if exitCode(err) < 0 {
			return "", err
		}
		return "", &wordedError{msg: fmt.Sprintf("there is no branch %s to start from", branch), kind: ErrBaseNotFound, err: err}
	}
	return strings.TrimSpace(out), nil
}

// branchExists reports whether the local branch exists.
func (w *Worktrees) branchExists(ctx context.Context, common, branch string) (bool, error) {
	_, err := w.run(ctx, gitCmd{args: []string{"rev-parse", "--verify", "--quiet", "--end-of-options", "refs/heads/" + branch},
		gitDir: common, common: common, readOnly: []string{common}})
	if exitCode(err) == 1 {
		return false, nil
	}
	return err == nil, err
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
