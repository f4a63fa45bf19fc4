package workspace

import "errors"

// Sentinels for what a caller branches on. The errors returned wrap them in
// a sentence that names the path, commit or thread concerned.
var (
	// ErrGitNotFound: the git binary cannot be found or run.
	ErrGitNotFound = errors.New("git not found")
	// ErrNotRepository: Repo is missing or is not a git repository.
	ErrNotRepository = errors.New("not a git repository")
	// ErrBaseNotFound: Base does not name a commit of the repository.
	ErrBaseNotFound = errors.New("base commit not found")
	// ErrBadThread: the thread id cannot name a worktree (empty or too long).
	ErrBadThread = errors.New("unusable thread id")
	// ErrInTheWay: a thread's worktree directory exists but is not a
	// worktree of the repository, so it is left alone.
	ErrInTheWay = errors.New("directory in the way")
	// ErrLeftBehind: a worktree could not be removed; what is left of it
	// was moved out of the thread's way and is reported, not retried.
	ErrLeftBehind = errors.New("worktree left behind")
	// ErrTimeout: a git command ran longer than Worktrees.Timeout.
	ErrTimeout = errors.New("git took too long")
	// ErrPushRejected: SharedRepo would not take a thread's branch, which
	// there has commits this host's has not (or the shared repository
	// refused it); the thread's work since is only on this host.
	ErrPushRejected = errors.New("push rejected")
	// ErrSharedRepo: SharedRepo could not be reached, or is not a
	// repository git may reach (a transport other than file, ssh or
	// https).
	ErrSharedRepo = errors.New("shared repository unusable")
)

// wordedError is a sentence for people that unwraps to a sentinel for code.
type wordedError struct {
	msg  string
	kind error
	err  error // the underlying failure, if any
}

func (e *wordedError) Error() string { return e.msg }

func (e *wordedError) Unwrap() []error {
	if e.err == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.err}
}
