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
//   - On agent hosts that share a repository ([Worktrees.SharedRepo]),
//     [Worktrees.Publish] pushes a thread's branch there after each turn,
//     fast-forward only ([ErrPushRejected] otherwise), and Prepare on any
//     host continues the thread from there: from the shared branch when
//     the clone has none, fast-forwarding one that fell behind.
//   - A retention sweep lists the threads that have a worktree
//     ([Worktrees.List]) and calls [Worktrees.Remove] for those idle longer
//     than state.retention, after their agent has stopped. Remove logs what
//     the agent left uncommitted, then discards it; the branch stays unless
//     DeleteBranches is set, and a later Prepare for the thread checks it out
//     again.
//
// Agents write the repository's git directory (to commit) and their own
// worktrees, so nothing there is trusted, and no git command of the
// broker's runs anything of theirs:
//
//   - Every git command runs in its own process group with stdin closed,
//     a time bound, and an environment chosen here: nothing of the
//     broker's GIT_* variables or secrets, no system or user
//     configuration, no HOME, no terminal prompts, no transport. Settings
//     on its command line, which win over the repository's, turn off
//     hooks, the file system monitor, submodules and automatic
//     maintenance; every filter driver the repository's configuration
//     defines (as git reads it for that very command: includes,
//     conditional ones and a worktree's own configuration counted) is
//     emptied, so no attribute can run one. It is killed, with whatever it
//     started, as soon as its context ends.
//   - git never finds a repository or a worktree itself: the git
//     directory, the common directory and the worktree are named to it,
//     and a worktree's .git is read by the broker, never followed by git.
//   - A push to or fetch from SharedRepo never runs in the agents'
//     repository, whose remotes, URL rewrites, ssh command and hooks
//     are theirs: it runs in the broker's own copy of SharedRepo
//     (.shared.git in Dir), with SharedRepo on its command line and no transport but file, ssh
//     and https, as the broker and unconfined (it needs the network and
//     the host's keys). The branch goes between the two as a bundle,
//     unpacked or made in the agents' repository by a git that reaches
//     nothing, confined like the others.
//   - With [Worktrees.Confine] set, each command also runs confined (in
//     bubblewrap, as the agents' user), seeing only what it works on.
//   - A worktree an agent broke (its .git replaced, deleted or pointing
//     elsewhere, its directory replaced by a link) has no git run in it:
//     it is removed without following links, with its record in the
//     repository; what cannot be removed is moved aside and reported
//     ([ErrLeftBehind]), never tried again.
//
// Git commands on one repository run one at a time, since concurrent
// worktree and branch changes collide on git's own lock files.
package workspace
