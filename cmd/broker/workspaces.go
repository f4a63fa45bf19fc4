package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"acpbroker/workspace"

	"github.com/rs/zerolog"
)

// worktreesFor is the git worktrees of a profile with workspace =
// "worktree" (nil otherwise): under its cwd, in "worktrees".
func worktreesFor(p *Profile, log zerolog.Logger) *workspace.Worktrees {
	if p.Workspace != "worktree" {
		return nil
	}
	return &workspace.Worktrees{
		Repo: p.Repo, Base: p.Base, DeleteBranches: p.DeleteBranches,
		Dir:    filepath.Join(p.Cwd, "worktrees", p.Name),
		Logger: log.With().Str("profile", p.Name).Logger(),
	}
}

// gitDir is where a repository keeps its objects and its worktrees'
// records: repo/.git, or repo itself when it is bare.
func gitDir(repo string) string {
	abs, err := filepath.Abs(repo)
	if err != nil {
		abs = repo
	}
	if st, err := os.Stat(filepath.Join(abs, ".git")); err == nil && st.IsDir() {
		return filepath.Join(abs, ".git")
	}
	return abs
}

// profileKey names a profile's key for errors: agents.NAME.key, or
// agent.key for the one profile of [agent].
func profileKeyName(c *Config, p *Profile, field string) string {
	if _, ok := c.Profiles[DefaultProfileName]; ok && len(c.Profiles) == 1 && p.Name == DefaultProfileName {
		return "agent." + field
	}
	return "agents." + p.Name + "." + field
}

// checkProfiles checks what LoadConfig cannot without touching the
// machine: each profile's cwd can be written, and a worktree profile's
// repository and base are what git says they must be.
func checkProfiles(ctx context.Context, c *Config) []error {
	var problems []error
	seen := map[string]bool{}
	for _, name := range sortedKeys(c.Profiles) {
		p := c.Profiles[name]
		if !seen[p.Cwd] {
			seen[p.Cwd] = true
			if err := checkWritable(profileKeyName(c, p, "cwd"), p.Cwd); err != nil {
				problems = append(problems, err)
			}
		}
		wt := worktreesFor(p, zerolog.Nop())
		if wt == nil {
			continue
		}
		checkCtx, cancel := context.WithTimeout(ctx, worktreeCheckTimeout)
		err := wt.Check(checkCtx)
		cancel()
		switch {
		case err == nil:
		case errors.Is(err, workspace.ErrBaseNotFound):
			problems = append(problems, fmt.Errorf("%s = %q: %w", profileKeyName(c, p, "base"), p.Base, err))
		case errors.Is(err, workspace.ErrGitNotFound):
			problems = append(problems, fmt.Errorf("%s = \"worktree\" needs git: %w", profileKeyName(c, p, "workspace"), err))
		default:
			problems = append(problems, fmt.Errorf("%s = %q: %w", profileKeyName(c, p, "repo"), p.Repo, err))
		}
	}
	return problems
}

// worktreeCheckTimeout bounds the git calls of one profile's check at
// start.
const worktreeCheckTimeout = 30 * time.Second

// threadKeeper says which threads the state store still keeps.
type threadKeeper interface {
	ThreadKept(thread string) bool
}

// sweepWorktrees removes the worktrees of threads the store no longer
// keeps (idle past state.retention), for each worktree profile, each
// removal bounded by perRemoval; live reports threads whose agent runs,
// never touched. It returns how many were removed.
func sweepWorktrees(ctx context.Context, profiles map[string]*Profile, kept threadKeeper, live func(thread string) bool, perRemoval time.Duration, log zerolog.Logger) int {
	removed := 0
	names := make([]string, 0, len(profiles))
	for name := range profiles {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		wt := worktreesFor(profiles[name], log)
		if wt == nil {
			continue
		}
		threads, err := wt.List()
		if err != nil {
			log.Warn().Err(err).Str("profile", name).Msg("worktrees not listed")
			continue
		}
		for _, thread := range threads {
			if ctx.Err() != nil {
				return removed
			}
			if kept.ThreadKept(thread) || live(thread) {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, perRemoval)
			err := wt.Remove(rctx, thread)
			cancel()
			if err != nil {
				log.Warn().Err(err).Str("profile", name).Str("thread", thread).Msg("worktree past retention not removed")
				continue
			}
			removed++
			log.Info().Str("profile", name).Str("thread", thread).Msg("worktree past retention removed")
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
// worktreeSweepEvery, until ctx ends (which also stops a git call).
func (b *broker) sweepLoop(ctx context.Context) {
	t := time.NewTicker(worktreeSweepEvery)
	defer t.Stop()
	for {
		profiles := *b.profiles.Load()
		sweepWorktrees(ctx, profiles, b.store, func(thread string) bool { return b.pool.Lookup(thread) != nil }, worktreeRemoveTimeout, b.log)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
