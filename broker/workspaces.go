package broker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"acpbroker/config"
	"acpbroker/store"
	"acpbroker/workspace"

	"github.com/rs/zerolog"
)

// worktreesFor is the git worktrees of a profile with workspace =
// "worktree" (nil otherwise): under its cwd, in "worktrees", their git
// commands confined by confine.
func worktreesFor(p *config.Profile, confine workspace.Confiner, log zerolog.Logger) *workspace.Worktrees {
	if p.Workspace != "worktree" {
		return nil
	}
	return &workspace.Worktrees{
		Repo: p.Repo, Base: p.Base, DeleteBranches: p.DeleteBranches, SharedRepo: p.SharedRepo,
		Dir:     filepath.Join(p.Cwd, "worktrees", p.Name),
		Confine: confine,
		Logger:  log.With().Str("profile", p.Name).Logger(),
	}
}

// gitConfiner confines the broker's own git commands on the repositories
// of worktree profiles, which their agents write: in bubblewrap, as an
// agent is, when agents are sandboxed (see pool.Sandbox.ConfineGit), and
// as agent.run_as_user when one is set. Otherwise (nil) git runs
// hardened but as the broker.
func gitConfiner(cfg *config.Config) workspace.Confiner {
	sb, runAs := sandboxFor(cfg), cfg.Agent.RunAs
	switch {
	case sb.Enabled():
		return func(argv, env []string, dir string, readOnly, writable []string) ([]string, *syscall.Credential) {
			return sb.ConfineGit(argv, env, dir, readOnly, writable), runAs
		}
	case runAs != nil:
		return func(argv, _ []string, _ string, _, _ []string) ([]string, *syscall.Credential) { return argv, runAs }
	}
	return nil
}

// checkProfiles checks what config.Load cannot without touching the
// machine: each profile's cwd can be written, and a worktree profile's
// repository and base are what git says they must be, git confined by
// confine as it will be when serving.
func checkProfiles(ctx context.Context, c *config.Config, confine workspace.Confiner) []error {
	var problems []error
	seen := map[string]bool{}
	for _, name := range sortedKeys(c.Profiles) {
		p := c.Profiles[name]
		if !seen[p.Cwd] {
			seen[p.Cwd] = true
			if err := checkWritable(c.ProfileKey(p, "cwd"), p.Cwd); err != nil {
				problems = append(problems, err)
			}
		}
		wt := worktreesFor(p, confine, zerolog.Nop())
		if wt == nil {
			continue
		}
		checkCtx, cancel := context.WithTimeout(ctx, worktreeCheckTimeout)
		err := wt.Check(checkCtx)
		cancel()
		switch {
		case err == nil:
			if err := ownedByAgents(p, c.Agent.RunAs); err != nil {
				problems = append(problems, fmt.Errorf("%s = %q: %w", c.ProfileKey(p, "repo"), p.Repo, err))
			}
		case errors.Is(err, workspace.ErrBaseNotFound):
			problems = append(problems, fmt.Errorf("%s = %q: %w", c.ProfileKey(p, "base"), p.Base, err))
		case errors.Is(err, workspace.ErrGitNotFound):
			problems = append(problems, fmt.Errorf("%s = \"worktree\" needs git: %w", c.ProfileKey(p, "workspace"), err))
		default:
			problems = append(problems, fmt.Errorf("%s = %q: %w", c.ProfileKey(p, "repo"), p.Repo, err))
		}
	}
	return problems
}

// ownedByAgents says what to do when agents run as runAs and p's git
// directory is not theirs: they commit there, and the broker's git makes
// their worktrees there, as that user.
func ownedByAgents(p *config.Profile, runAs *syscall.Credential) error {
	if runAs == nil {
		return nil
	}
	dir := gitDir(p)
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != runAs.Uid {
		return fmt.Errorf("its git directory %s belongs to uid %d, not to agent.run_as_user (uid %d), as whom its agents and the broker's git write it: chown -R %d:%d %s",
			dir, st.Uid, runAs.Uid, runAs.Uid, runAs.Gid, dir)
	}
	return nil
}

// worktreeCheckTimeout bounds the git calls of one profile's check at
// start.
const worktreeCheckTimeout = 30 * time.Second

// worktreeBook says which threads the state store still keeps, and
// keeps the worktrees made for threads until they are removed.
type worktreeBook interface {
	ThreadKept(thread string) bool
	Worktrees() []store.Worktree
	WorktreeRemoved(dir string)
}

// sweepWorktrees removes the worktrees of threads the store no longer
// keeps (idle past state.retention), each removal bounded by perRemoval
// and its git commands confined by confine; live reports threads whose
// agent runs, never touched. It goes by the worktrees the book recorded
// as made, whatever their profile is called now or whether it is still
// configured, and then by the worktree directories of the profiles
// configured now (for worktrees made before they were recorded). A
// worktree that cannot be removed, or a directory in its place that
// never was one, is reported once and forgotten, never tried again. It
// returns how many were removed.
func sweepWorktrees(ctx context.Context, profiles map[string]*config.Profile, book worktreeBook, live func(thread string) bool, perRemoval time.Duration, confine workspace.Confiner, log zerolog.Logger) int {
	removed := 0
	// remove reports whether the thread's worktree is done with: removed,
	// or reported and left.
	remove := func(wt *workspace.Worktrees, thread string, log zerolog.Logger) bool {
		rctx, cancel := context.WithTimeout(ctx, perRemoval)
		err := wt.Remove(rctx, worktreeThread(thread))
		cancel()
		switch {
		case err == nil:
			removed++
			log.Info().Str("thread", thread).Msg("worktree past retention removed")
			return true
		case errors.Is(err, workspace.ErrLeftBehind) || errors.Is(err, workspace.ErrInTheWay):
			log.Error().Err(err).Str("thread", thread).Msg("worktree past retention left where it is; it will not be tried again")
			return true
		}
		log.Warn().Err(err).Str("thread", thread).Msg("worktree past retention not removed")
		return false
	}
	for _, rec := range book.Worktrees() {
		if ctx.Err() != nil {
			return removed
		}
		if book.ThreadKept(rec.Thread) || live(rec.Thread) {
			continue
		}
		rlog := log.With().Str("profile", rec.Profile).Str("dir", rec.Dir).Logger()
		wt := &workspace.Worktrees{Repo: rec.Repo, Dir: rec.Root, DeleteBranches: rec.DeleteBranches, Confine: confine, Logger: rlog}
		if remove(wt, rec.Thread, rlog) {
			book.WorktreeRemoved(rec.Dir)
			continue
		}
		if _, err := os.Lstat(rec.Dir); errors.Is(err, fs.ErrNotExist) && ctx.Err() == nil {
			// Its repository is gone or unusable, and so is the worktree:
			// nothing is left to remove.
			rlog.Warn().Str("thread", rec.Thread).Msg("worktree and its repository gone; forgotten")
			book.WorktreeRemoved(rec.Dir)
		}
	}
	for _, name := range sortedKeys(profiles) {
		wt := worktreesFor(profiles[name], confine, log)
		if wt == nil {
			continue
		}
		threads, err := wt.List()
		if err != nil {
			log.Warn().Err(err).Str("profile", name).Msg("worktrees not listed")
			continue
		}
		for _, listed := range threads {
			if ctx.Err() != nil {
				return removed
			}
			thread := legacyThread(listed) // as worktreeThread named it
			if book.ThreadKept(thread) || live(thread) {
				continue
			}
			remove(wt, thread, log.With().Str("profile", name).Logger())
		}
	}
	return removed
}

// worktreeSweepEvery is how often worktrees past retention are looked
// for: retention is counted in hours and days.
const worktreeSweepEvery = time.Hour

// worktreeRemoveTimeout bounds one worktree's removal in a sweep.
const worktreeRemoveTimeout = 2 * time.Minute

// sweepLoop removes worktrees past retention at start and then every
// worktreeSweepEvery, until ctx ends (which also stops a git call). Each
// sweep first prunes the store, so that a thread past retention by then
// (one idle since before a long stop, at start) loses its worktree in
// that sweep, not an hour later.
func (b *Broker) sweepLoop(ctx context.Context) {
	t := time.NewTicker(worktreeSweepEvery)
	defer t.Stop()
	for {
		b.store.Prune()
		profiles := b.live.Load().Profiles
		sweepWorktrees(ctx, profiles, b.store, func(thread string) bool { return b.pool.Lookup(thread) != nil }, worktreeRemoveTimeout, b.gitConfine, b.log)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
