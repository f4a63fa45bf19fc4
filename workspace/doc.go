// Package workspace gives each chat thread its own git worktree of a
// repository, so that agents working in different threads never see each
// other's changes.
//
// A [Worktrees] is meant to be used like this:
//
//   - At startup, [Worktrees.Check] tells whether the configuration can
//     work: git runs, the repository is one, the base names a commit. Its
//     errors are sentinels ([ErrGitNotFound], [ErrNotRepository],
//     [ErrBaseNotFound]) wrapped in a sentence, so the caller can put the
//     right configuration key in front (agents.NAME.repo, agents.NAME.base).
//   - Before a thread's agent starts, [Worktrees.Prepare] returns the
//     worktree directory to start it in, creating the worktree and its branch
//     (acp/<thread>) from the base on the thread's first turn and reusing
//     them afterwards, across broker restarts too.
//   - /status shows the directory and branch Prepare returned.
//   - A retention sweep lists the threads that have a worktree
//     ([Worktrees.List]) and calls [Worktrees.Remove] for those idle longer
//     than state.retention, after their agent has stopped. Remove logs what
//     the agent left uncommitted, then discards it; the branch stays unless
//     DeleteBranches is set, and a later Prepare for the thread checks it out
//     again.
//
// Every git command runs in its own process group with stdin closed, a
// minimal environment (nothing of the broker's GIT_* variables or secrets,
// no terminal prompts) and a time bound; it is killed, with whatever it
// started, as soon as its context ends. Git commands on one repository run
// one at a time, since concurrent worktree and branch changes collide on
// git's own lock files.
package workspace
