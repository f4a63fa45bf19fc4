package workspace

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/rs/zerolog"
)

// A thread's branch follows it from one agent host to another through
// SharedRepo: Publish pushes it there after each turn, and Prepare on
// another host (or on this one again) continues from there.
//
// The agents' repository is theirs (its configuration, hooks and remotes
// included), and a push is the one git command of the broker's that
// carries something out of the machine, with the host's credentials. So
// no git command that reaches SharedRepo ever runs in the agents'
// repository: it runs in the broker's own copy of SharedRepo (a bare
// git directory in Dir, see sharedCopy), whose configuration is git's
// defaults and the settings below. None of the agents' remotes, url.*.insteadOf
// rewrites, core.sshCommand, http.* settings or hooks applies to it;
// SharedRepo, from the broker's configuration, is named on its command
// line. The branch goes between the agents' repository and that copy as
// a bundle file (leaving out the history both have), made or unpacked there by git bundle, with no transport
// (so no URL their configuration could rewrite) and confined when
// Confine is set, like every other command on that repository. The git
// that reaches SharedRepo runs as the broker, unconfined, since it needs
// the network and the host's ssh keys, which a confined git has not; it
// reads nothing of the agents' but the bundle, which is data, checked as
// git checks what it fetches.

// reach are the settings of a git command that reaches SharedRepo, on top
// of the hardened ones. Its transports are file (a path, file://), ssh
// and https: not ext:: (which runs a command), not git:// or http://
// (neither authenticates the server), whatever else allows them. Over
// ssh it runs the system's ssh, never prompting: the host's keys (from
// the broker's user's ~/.ssh, or the ssh agent SSH_AUTH_SOCK names) are
// its credentials. Over https no credential helper is asked.
var reach = [][2]string{
	{"protocol.allow", "never"},
	{"protocol.file.allow", "always"},
	{"protocol.ssh.allow", "always"},
	{"protocol.https.allow", "always"},
	{"protocol.ext.allow", "never"},
	{"core.sshCommand", "ssh -o BatchMode=yes"},
	{"ssh.variant", "ssh"},
	{"push.recurseSubmodules", "no"},
	{"push.gpgSign", "false"},
	{"fetch.recurseSubmodules", "false"},
}

// reachProtocols are reach's transports, as GIT_ALLOW_PROTOCOL names
// them: it wins over every setting.
const reachProtocols = "file:ssh:https"

// Publish pushes thread's branch (acp/ and the thread id, escaped) to
// SharedRepo, so that the thread can continue from its last commit on
// another agent host. It pushes only what is committed, and only as a
// fast-forward: when SharedRepo's branch has commits this host's has not
// (the thread moved on elsewhere), nothing is pushed and the error,
// which wraps ErrPushRejected, says that the thread's work since is only
// on this host; nothing is lost or overwritten on either side. A thread
// with no branch yet, or whose branch has nothing the shared one has not
// (it is at it or behind it), has nothing to publish: that is not an
// error. A SharedRepo that cannot be reached is ErrSharedRepo. Publish
// returns when ctx ends, having killed the git command it was running.
// It is meant to be called after each turn of a worktree thread on an
// agent host, its agent idle. The Publish and Prepare calls of one Dir
// reach SharedRepo one at a time, through the host's copy of it.
func (w *Worktrees) Publish(ctx context.Context, thread string) error {
	name, err := escapeThread(thread)
	if err != nil {
		return err
	}
	repo, _, err := w.paths()
	if err != nil {
		return err
	}
	if err := w.checkShared(); err != nil {
		return err
	}
	branch := branchPrefix + name
	log := w.Logger.With().Str("thread", thread).Str("branch", branch).Str("shared_repo", w.sharedName()).Logger()
	s, err := w.newStage(ctx)
	if err != nil {
		return err
	}
	defer s.remove(log)
	ref := "refs/heads/" + branch
	published, err := w.sharedCommit(ctx, s, ref)
	if err != nil {
		return w.unreachable("looking for "+branch, err)
	}
	commit, err := w.copyOut(ctx, repo, branch, s, published)
	switch {
	case err != nil:
		return err
	case commit == "":
		log.Debug().Msg("no branch to publish")
		return nil
	case commit == published:
		log.Debug().Str("commit", commit).Msg("nothing to publish that the shared branch has not")
		return nil
	}
	// No + before the refspec: a fast-forward or nothing.
	out, err := w.run(ctx, s.reaching("push", "--porcelain", "--no-verify", "--", w.SharedRepo, commit+":"+ref))
	if err != nil {
		if why, ok := pushRejected(out, ref); ok {
			// This clone lacked the shared branch's commits: whether it
			// is behind them, with nothing new, is asked of them.
			if behind, ferr := w.behindShared(ctx, s, ref, commit); ferr == nil && behind {
				log.Debug().Str("commit", commit).Msg("nothing to publish that the shared branch has not")
				return nil
			}
			return &wordedError{msg: fmt.Sprintf("%s was not published to %s (%s): the branch there has commits this host's has not, so the thread's work since is only on this host",
				branch, w.sharedName(), why), kind: ErrPushRejected, err: err}
		}
		return w.unreachable("publishing "+branch, err)
	}
	log.Info().Str("commit", commit).Msg("branch published")
	if err := s.repack(ctx, w); err != nil {
		log.Warn().Err(err).Str("dir", s.xport).Msg("the copy of the shared repository was not repacked")
	}
	return nil
}

// behindShared fetches SharedRepo's ref into s, which has commit, and
// reports whether commit is in its history.
func (w *Worktrees) behindShared(ctx context.Context, s *stage, ref, commit string) (bool, error) {
	if _, err := w.run(ctx, s.reaching("fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--", w.SharedRepo, "+"+ref+":"+ref)); err != nil {
		return false, err
	}
	_, err := w.run(ctx, gitCmd{args: []string{"merge-base", "--is-ancestor", commit, ref}, gitDir: s.xport, unconfined: true})
	if exitCode(err) == 1 {
		return false, nil
	}
	return err == nil, err
}

// pushRejected says why git push --porcelain's output out shows ref
// rejected, if it does.
func pushRejected(out, ref string) (why string, rejected bool) {
	for line := range strings.Lines(out) {
		f := strings.SplitN(strings.TrimSuffix(line, "\n"), "\t", 3)
		if len(f) == 3 && f[0] == "!" && strings.HasSuffix(f[1], ":"+ref) {
			return clip(f[2], 200), true
		}
	}
	return "", false
}

// copyOut copies branch, with its history, from the agents' repository
// into s, and returns the commit it is at there; "" if there is no such
// branch. A branch at published, the commit SharedRepo has, or behind
// it, is not copied, and published is returned.
func (w *Worktrees) copyOut(ctx context.Context, repo, branch string, s *stage, published string) (string, error) {
	ref := "refs/heads/" + branch
	bundle := filepath.Join(s.box, "out.bundle")
	local, err := func() (string, error) {
		unlock, err := lockRepo(ctx, repo)
		if err != nil {
			return "", err
		}
		defer unlock()
		common, err := w.repository(ctx, repo)
		if err != nil {
			return "", err
		}
		exists, err := w.branchExists(ctx, common, branch)
		if err != nil || !exists {
			return "", err
		}
		local, err := w.commitAt(ctx, gitCmd{gitDir: common, common: common, readOnly: []string{common}}, ref)
		if err != nil || local == published {
			return local, err
		}
		if published != "" {
			// Behind it: the thread went on elsewhere, and nothing new
			// was committed here.
			_, err := w.commitAt(ctx, gitCmd{gitDir: common, common: common, readOnly: []string{common}}, published)
			switch {
			case err == nil:
				if behind, err := w.isAncestor(ctx, common, local, published); err != nil || behind {
					return published, err
				}
			case exitCode(err) != 1:
				return "", err
			}
		}
		had, _ := w.commitAt(ctx, gitCmd{gitDir: s.xport, unconfined: true}, ref)
		base, _ := w.resolveBase(ctx, repo, common)
		args := append([]string{"bundle", "create", "--quiet", bundle, ref},
			w.thin(ctx, s, gitCmd{gitDir: common, common: common, readOnly: []string{common}}, local, published, had, base)...)
		_, err = w.run(ctx, gitCmd{args: args, gitDir: common, common: common,
			readOnly: []string{common}, writable: []string{s.box}, own: []string{s.box}})
		return local, err
	}()
	if err != nil || local == "" || local == published {
		return local, err
	}
	commit, err := s.unbundle(ctx, w, bundle, ref)
	if err != nil {
		return "", fmt.Errorf("%s, copied out of %s: %w", branch, repo, err)
	}
	return commit, nil
}

// unbundle unpacks bundle into s's xport and returns the commit it has
// at ref.
func (s *stage) unbundle(ctx context.Context, w *Worktrees, bundle, ref string) (string, error) {
	out, err := w.run(ctx, gitCmd{args: []string{"bundle", "list-heads", bundle, ref}, gitDir: s.xport, unconfined: true})
	if err != nil {
		return "", err
	}
	commit, name, _ := strings.Cut(strings.TrimSpace(out), " ")
	if name != ref || !isObjectID(commit) {
		return "", fmt.Errorf("the bundle made of it has no %s", ref)
	}
	if _, err := w.run(ctx, gitCmd{args: []string{"bundle", "unbundle", bundle, ref}, gitDir: s.xport, unconfined: true}); err != nil {
		return "", err
	}
	if commit, err = w.commitAt(ctx, gitCmd{gitDir: s.xport, unconfined: true}, commit); err != nil {
		return "", err
	}
	// Kept, for the next turn's bundle to leave out.
	_, err = w.run(ctx, gitCmd{args: []string{"update-ref", ref, commit}, gitDir: s.xport, unconfined: true})
	return commit, err
}

// isObjectID reports whether s is a full object id (SHA-1 or SHA-256).
func isObjectID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// fetchShared fetches branch from SharedRepo into s, unless the agents'
// repository repo has its commit already, and returns the commit it is
// at there; "" if SharedRepo has no such branch.
func (w *Worktrees) fetchShared(ctx context.Context, s *stage, repo, branch string) (string, error) {
	if err := w.checkShared(); err != nil {
		return "", err
	}
	ref := "refs/heads/" + branch
	published, err := w.sharedCommit(ctx, s, ref)
	if err != nil {
		return "", w.unreachable("looking for "+branch, err)
	}
	if published == "" {
		return "", nil
	}
	if common, err := GitDir(repo); err == nil {
		if _, err := w.commitAt(ctx, gitCmd{gitDir: common, common: common, readOnly: []string{common}}, published); err == nil {
			return published, nil // the thread's last turn was here
		}
	}
	if _, err := w.run(ctx, s.reaching("fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--", w.SharedRepo, "+"+ref+":"+ref)); err != nil {
		return "", w.unreachable("fetching "+branch, err)
	}
	return w.commitAt(ctx, gitCmd{gitDir: s.xport, unconfined: true}, ref)
}

// sharedCommit asks SharedRepo which commit its ref is at: "" if it has
// no such ref.
func (w *Worktrees) sharedCommit(ctx context.Context, s *stage, ref string) (string, error) {
	out, err := w.run(ctx, s.reaching("ls-remote", "--refs", "--", w.SharedRepo, ref))
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(out) {
		if commit, name, ok := strings.Cut(strings.TrimSpace(line), "\t"); ok && name == ref && isObjectID(commit) {
			return commit, nil
		}
	}
	return "", nil
}

// copyIn copies commit, which s has at ref, with its history, into the
// agents' repository common.
// Its history up to have (commits the agents' repository has) is left
// out when the shared copy has it too.
func (w *Worktrees) copyIn(ctx context.Context, common string, s *stage, ref, commit string, have ...string) error {
	bundle := filepath.Join(s.box, "in.bundle")
	args := append([]string{"bundle", "create", "--quiet", bundle, ref},
		w.thin(ctx, s, gitCmd{gitDir: common, common: common, readOnly: []string{common}}, commit, have...)...)
	if _, err := w.run(ctx, gitCmd{args: args, gitDir: s.xport, unconfined: true}); err != nil {
		return err
	}
	if _, err := w.run(ctx, gitCmd{args: []string{"bundle", "unbundle", bundle, ref}, gitDir: common, common: common,
		readOnly: []string{s.box}, writable: []string{common}}); err != nil {
		return err
	}
	got, err := w.commitAt(ctx, gitCmd{gitDir: common, common: common, readOnly: []string{common}}, commit)
	if err != nil || got != commit {
		return fmt.Errorf("commit %s of the shared repository's %s is not in %s after unbundling it (%v)", commit, ref, common, err)
	}
	return nil
}

// commitAt returns the commit rev names in c's git directory.
func (w *Worktrees) commitAt(ctx context.Context, c gitCmd, rev string) (string, error) {
	c.args = []string{"rev-parse", "--verify", "--quiet", "--end-of-options", rev + "^{commit}"}
	out, err := w.run(ctx, c)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

// isAncestor reports whether commit a is an ancestor of commit b (or b).
func (w *Worktrees) isAncestor(ctx context.Context, common, a, b string) (bool, error) {
	_, err := w.run(ctx, gitCmd{args: []string{"merge-base", "--is-ancestor", a, b}, gitDir: common, common: common, readOnly: []string{common}})
	if exitCode(err) == 1 {
		return false, nil
	}
	return err == nil, err
}

// checkShared refuses a SharedRepo git must not reach (see
// CheckSharedRepo).
func (w *Worktrees) checkShared() error {
	if w.SharedRepo == "" {
		return &wordedError{msg: "no shared repository given", kind: ErrSharedRepo}
	}
	if err := CheckSharedRepo(w.SharedRepo); err != nil {
		return &wordedError{msg: fmt.Sprintf("shared repository %q: %v", w.sharedName(), err), kind: ErrSharedRepo}
	}
	return nil
}

// CheckSharedRepo says why repo cannot be a SharedRepo, if it cannot: it
// must be an absolute path, a file://, ssh:// or https:// URL, or git's
// short form of ssh (host:path); not http:// or git:// (neither
// authenticates the server), not a transport helper such as ext:: (which
// runs a command).
func CheckSharedRepo(repo string) error {
	switch {
	case strings.HasPrefix(repo, "-"):
		return errors.New("begins with -")
	case strings.ContainsAny(repo, "\n\x00"):
		return errors.New("has a line break")
	case filepath.IsAbs(repo):
		return nil
	}
	const want = "is not an absolute path, a file://, ssh:// or https:// URL, or host:path"
	if scheme, _, ok := strings.Cut(repo, "://"); ok {
		switch strings.ToLower(scheme) {
		case "file", "ssh", "https":
			return nil
		}
		return errors.New(want)
	}
	// host:path, with no :: (a transport helper) and no / before the
	// colon (which makes it a relative path to git).
	if i := strings.IndexByte(repo, ':'); i > 0 && !strings.Contains(repo, "::") && !strings.Contains(repo[:i], "/") {
		return nil
	}
	return errors.New(want)
}

// sharedName is SharedRepo as it may be shown: without a password.
func (w *Worktrees) sharedName() string {
	if u, err := url.Parse(w.SharedRepo); err == nil && u.User != nil {
		return u.Redacted()
	}
	return w.SharedRepo
}

// unreachable words a failure to reach SharedRepo.
func (w *Worktrees) unreachable(doing string, err error) error {
	var ge *gitError
	if !errors.As(err, &ge) {
		return err
	}
	msg := fmt.Sprintf("%s in the shared repository %s: %v", doing, w.sharedName(), err)
	if u, perr := url.Parse(w.SharedRepo); perr == nil && u.User != nil {
		// What git said may quote the URL whole.
		if password, ok := u.User.Password(); ok && password != "" {
			msg = strings.ReplaceAll(msg, password, "xxxxx")
		}
	}
	return &wordedError{msg: msg, kind: ErrSharedRepo, err: ge}
}

// sharedCopy is the name, in Dir, of the broker's copy of SharedRepo:
// its git directory that reaches SharedRepo and keeps what it fetched and
// pushed, so that each turn copies only what is new. A thread's escaped
// id never begins with a dot.
const sharedCopy = ".shared.git"

// maxPacks bounds the packs the shared copy gathers (one a fetch or a
// published turn) before they are packed into one.
const maxPacks = 32

// stage is where the broker's git reaches SharedRepo from: its shared
// copy, held for one Publish or Prepare at a time, and a temporary
// directory for the bundles going to and from the agents' repository.
type stage struct {
	// xport is the shared copy, the git directory that reaches
	// SharedRepo: the broker makes it and writes its configuration
	// (none), and runs git in it as itself, unconfined. Nothing of the
	// agents' is in it but objects, which git checks as it takes them.
	xport string
	// tmp holds box, where bundles going to and from the agents'
	// repository are written: given to the user a confined git runs
	// as, for one that writes there.
	tmp, box string
	unlock   func()
}

// newStage holds the shared copy, making it first if need be, and makes
// a directory for bundles; remove the stage when done.
func (w *Worktrees) newStage(ctx context.Context) (*stage, error) {
	_, root, err := w.paths()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("worktree directory: %w", err)
	}
	xport := filepath.Join(realPath(root), sharedCopy)
	unlock, err := lockRepo(ctx, xport)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "acp-share-")
	if err != nil {
		unlock()
		return nil, fmt.Errorf("a directory to reach the shared repository from: %w", err)
	}
	s := &stage{xport: xport, tmp: tmp, box: filepath.Join(tmp, "box"), unlock: unlock}
	fail := func(err error) (*stage, error) {
		s.remove(w.Logger)
		return nil, err
	}
	// Others may pass through to box, not list what is here.
	if err := os.Chmod(tmp, 0o711); err != nil {
		return fail(err)
	}
	if err := os.Mkdir(s.box, 0o755); err != nil {
		return fail(err)
	}
	if fi, err := os.Lstat(filepath.Join(xport, "HEAD")); err != nil || !fi.Mode().IsRegular() {
		// No template: nothing but what git init makes itself (no
		// hooks). One whose making was cut short is made again.
		if _, err := w.run(ctx, gitCmd{args: []string{"init", "--quiet", "--bare", "--template=", "--", xport}, unconfined: true}); err != nil {
			return fail(err)
		}
	}
	return s, nil
}

// has reports whether the shared copy has commit.
func (s *stage) has(ctx context.Context, w *Worktrees, commit string) bool {
	_, err := w.commitAt(ctx, gitCmd{gitDir: s.xport, unconfined: true}, commit)
	return err == nil
}

// thin returns the arguments that leave out of a bundle of tip the
// history of those of commits both the shared copy and the other side
// (which c reads) have.
func (w *Worktrees) thin(ctx context.Context, s *stage, c gitCmd, tip string, commits ...string) []string {
	var not []string
	for _, commit := range commits {
		if commit == "" || commit == tip || !s.has(ctx, w, commit) {
			continue
		}
		if _, err := w.commitAt(ctx, c, commit); err == nil {
			not = append(not, "^"+commit)
		}
	}
	return not
}

// repack packs the shared copy's packs into one when there are more
// than maxPacks.
func (s *stage) repack(ctx context.Context, w *Worktrees) error {
	packs, err := filepath.Glob(filepath.Join(s.xport, "objects", "pack", "*.pack"))
	if err != nil || len(packs) <= maxPacks {
		return err
	}
	_, err = w.run(ctx, gitCmd{args: []string{"repack", "-a", "-d", "-q"}, gitDir: s.xport, unconfined: true})
	return err
}

// reaching is git command args run in s's xport, reaching SharedRepo.
func (s *stage) reaching(args ...string) gitCmd {
	return gitCmd{args: args, gitDir: s.xport, protocols: reachProtocols, settings: reach, unconfined: true}
}

// remove removes the stage's bundles and lets the shared copy go.
func (s *stage) remove(log zerolog.Logger) {
	if err := os.RemoveAll(s.tmp); err != nil {
		log.Warn().Err(err).Str("dir", s.tmp).Msg("a directory used to reach the shared repository was not removed")
	}
	s.unlock()
}

// followShared brings thread's branch here up to the shared one (at
// commit shared, fetched into s; "" if SharedRepo has none; sharedErr
// why it could not be fetched), and returns the commit a branch made
// anew starts at: the shared one, when this clone has no such branch.
// st is the thread's worktree here.
func (w *Worktrees) followShared(ctx context.Context, common string, st *worktreeState, branch string, s *stage, shared string, sharedErr error, log zerolog.Logger) (string, error) {
	kept, err := w.branchExists(ctx, common, branch)
	if err != nil {
		return "", err
	}
	if sharedErr != nil {
		if !kept {
			return "", sharedErr
		}
		log.Warn().Err(sharedErr).Msg("the shared repository could not be reached: the thread continues from this host's branch")
		return "", nil
	}
	if shared == "" {
		return "", nil
	}
	ref := "refs/heads/" + branch
	var local string
	if kept {
		if local, err = w.commitAt(ctx, gitCmd{gitDir: common, common: common, readOnly: []string{common}}, ref); err != nil || local == shared {
			return "", err
		}
	}
	if _, err := w.commitAt(ctx, gitCmd{gitDir: common, common: common, readOnly: []string{common}}, shared); exitCode(err) == 1 {
		base, _ := w.resolveBase(ctx, w.Repo, common)
		if err := w.copyIn(ctx, common, s, ref, shared, local, base); err != nil {
			return "", err
		}
	} else if err != nil {
		return "", err
	}
	if !kept {
		log.Info().Str("commit", shared).Msg("branch continues from the shared repository's")
		return shared, nil
	}
	if ahead, err := w.isAncestor(ctx, common, shared, local); err != nil || ahead {
		return "", err // this host's has more: Publish takes it there
	}
	behind, err := w.isAncestor(ctx, common, local, shared)
	if err != nil {
		return "", err
	}
	if !behind {
		log.Warn().Str("local", local).Str("shared", shared).
			Msg("the thread's branch here and in the shared repository have diverged: this host's is kept as it is, without the shared one's commits, and will not be published")
		return "", nil
	}
	if err := w.fastForward(ctx, common, st, ref, local, shared); err != nil {
		if cause := context.Cause(ctx); cause != nil {
			return "", err
		}
		log.Warn().Err(err).Str("local", local).Str("shared", shared).
			Msg("the thread's branch here could not be fast-forwarded to the shared one's: this host's is kept as it is")
		return "", nil
	}
	log.Info().Str("from", local).Str("to", shared).Msg("branch fast-forwarded to the shared repository's")
	return "", nil
}

// fastForward moves ref from commit from to commit to, a descendant of
// it. Where the thread's worktree st has it checked out, its files and
// index move too, keeping what was left uncommitted there: git refuses,
// and nothing changes, when that is in the way.
func (w *Worktrees) fastForward(ctx context.Context, common string, st *worktreeState, ref, from, to string) error {
	if st.present && st.problem == "" {
		c := gitCmd{gitDir: st.admin(common), common: common, workTree: st.dir, writable: []string{common, st.dir}}
		var err error
		if c.filters, err = w.filterDrivers(ctx, c); err != nil {
			return err
		}
		refresh := c
		refresh.args = []string{"update-index", "-q", "--refresh"}
		if _, err := w.run(ctx, refresh); err != nil && exitCode(err) != 1 {
			return err
		}
		move := c
		move.args = []string{"read-tree", "-m", "-u", from, to}
		if _, err := w.run(ctx, move); err != nil {
			return err
		}
	}
	_, err := w.run(ctx, gitCmd{args: []string{"update-ref", "-m", "fast-forward to the shared repository's", ref, to, from},
		gitDir: common, common: common, writable: []string{common}})
	return err
}
