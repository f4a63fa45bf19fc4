package workspace

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// hosts makes a bare repository standing for the shared one and n clones
// of it, each a host's, with worktrees of their own next to it, sharing
// through it.
func hosts(t *testing.T, n int) (shared string, w []*Worktrees) {
	t.Helper()
	shared = filepath.Join(t.TempDir(), "shared.git")
	gitT(t, "", "clone", "-q", "--bare", newRepo(t), shared)
	for range n {
		clone := filepath.Join(t.TempDir(), "repo")
		gitT(t, "", "clone", "-q", shared, clone)
		h := newWorktrees(t, clone)
		h.SharedRepo = shared
		w = append(w, h)
	}
	return shared, w
}

// commitIn commits a file of the given content in dir, as an agent does,
// and returns the commit.
func commitIn(t *testing.T, dir, file, content string) string {
	t.Helper()
	must(t, os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644))
	gitT(t, dir, "add", file)
	gitT(t, dir, "commit", "-q", "-m", "wrote "+file)
	return strings.TrimSpace(gitT(t, dir, "rev-parse", "HEAD"))
}

// branchAt is the commit branch is at in the git directory gitDir, or "".
func branchAt(t *testing.T, gitDir, branch string) string {
	t.Helper()
	out, _ := gitOut(gitDir, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch)
	return strings.TrimSpace(out)
}

// gitOut runs git in gitDir for the test, returning its output and error.
func gitOut(gitDir string, args ...string) (string, error) {
	w := &Worktrees{}
	return w.run(context.Background(), gitCmd{args: args, gitDir: gitDir, unconfined: true})
}

func TestShare_ThreadContinuesOnAnotherHostAndBack(t *testing.T) {
	shared, h := hosts(t, 2)
	a, b := h[0], h[1]
	ctx := t.Context()

	dirA, branch, err := a.Prepare(ctx, "42")
	if err != nil {
		t.Fatal(err)
	}
	first := commitIn(t, dirA, "plan", "step one\n")
	if err := a.Publish(ctx, "42"); err != nil {
		t.Fatal(err)
	}
	if got := branchAt(t, shared, branch); got != first {
		t.Fatalf("the shared repository's %s is at %q after host A published, want %s", branch, got, first)
	}

	// Host A is lost: the thread's next message starts on host B.
	dirB, _, err := b.Prepare(ctx, "42")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(gitT(t, dirB, "rev-parse", "HEAD")); got != first {
		t.Fatalf("on host B the thread starts at %s, want host A's last commit %s", got, first)
	}
	if got, _ := os.ReadFile(filepath.Join(dirB, "plan")); string(got) != "step one\n" {
		t.Fatalf("on host B the thread's file is %q", got)
	}
	second := commitIn(t, dirB, "plan", "step one\nstep two\n")
	if err := b.Publish(ctx, "42"); err != nil {
		t.Fatal(err)
	}
	if got := branchAt(t, shared, branch); got != second {
		t.Fatalf("the shared repository's %s is at %q after host B published, want %s", branch, got, second)
	}

	// Back on host A, whose worktree is still there with something its
	// agent left uncommitted: fast-forwarded, and that is kept.
	must(t, os.WriteFile(filepath.Join(dirA, "notes"), []byte("uncommitted on A\n"), 0o644))
	again, _, err := a.Prepare(ctx, "42")
	if err != nil || again != dirA {
		t.Fatalf("Prepare on host A again = %q, %v; want %q", again, err, dirA)
	}
	if got := strings.TrimSpace(gitT(t, dirA, "rev-parse", "HEAD")); got != second {
		t.Fatalf("back on host A the thread is at %s, want host B's last commit %s", got, second)
	}
	if got, _ := os.ReadFile(filepath.Join(dirA, "plan")); string(got) != "step one\nstep two\n" {
		t.Errorf("back on host A the thread's file is %q, want host B's", got)
	}
	if got, _ := os.ReadFile(filepath.Join(dirA, "notes")); string(got) != "uncommitted on A\n" {
		t.Errorf("what the agent left uncommitted on host A is %q after the fast-forward", got)
	}
	if st := gitT(t, dirA, "status", "--porcelain"); st != "?? notes\n" {
		t.Errorf("host A's worktree after the fast-forward:\n%s", st)
	}
}

// A host whose worktree of the thread was removed (past retention) but
// whose branch was kept fast-forwards the branch, and checks it out.
func TestShare_KeptBranchWithoutWorktreeFastForwards(t *testing.T) {
	_, h := hosts(t, 2)
	a, b := h[0], h[1]
	ctx := t.Context()
	dirA, _, err := a.Prepare(ctx, "7")
	if err != nil {
		t.Fatal(err)
	}
	commitIn(t, dirA, "x", "1\n")
	must(t, a.Publish(ctx, "7"))
	must(t, a.Remove(ctx, "7"))
	dirB, _, err := b.Prepare(ctx, "7")
	if err != nil {
		t.Fatal(err)
	}
	later := commitIn(t, dirB, "x", "2\n")
	must(t, b.Publish(ctx, "7"))
	dirA, _, err = a.Prepare(ctx, "7")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(gitT(t, dirA, "rev-parse", "HEAD")); got != later {
		t.Fatalf("host A's kept branch is at %s, want host B's %s", got, later)
	}
}

func TestPublish_NoBranchIsNotAnError(t *testing.T) {
	shared, h := hosts(t, 1)
	if err := h[0].Publish(t.Context(), "never-started"); err != nil {
		t.Fatalf("Publish of a thread with no branch: %v", err)
	}
	if got := branchAt(t, shared, "acp/never-started"); got != "" {
		t.Fatalf("the shared repository has a branch at %s", got)
	}
}

// A host whose branch fell behind and moved on (it published, then the
// thread went on elsewhere, then its agent committed again here) is not
// let to overwrite the shared branch: the push is refused in words,
// nothing is lost on either side, and Prepare keeps this host's work.
func TestPublish_RejectedPushIsReportedAndLosesNothing(t *testing.T) {
	shared, h := hosts(t, 2)
	a, b := h[0], h[1]
	var logs logBuffer
	a.Logger = zerolog.New(&logs)
	ctx := t.Context()
	dirA, branch, err := a.Prepare(ctx, "9")
	if err != nil {
		t.Fatal(err)
	}
	commitIn(t, dirA, "f", "a1\n")
	must(t, a.Publish(ctx, "9"))
	dirB, _, err := b.Prepare(ctx, "9")
	if err != nil {
		t.Fatal(err)
	}
	onB := commitIn(t, dirB, "g", "b1\n")
	must(t, b.Publish(ctx, "9"))
	// Behind, with nothing new: nothing to publish, not a rejection.
	if err := a.Publish(ctx, "9"); err != nil {
		t.Fatalf("Publish of a branch behind the shared one, with nothing new: %v", err)
	}
	onA := commitIn(t, dirA, "f", "a2\n")

	err = a.Publish(ctx, "9")
	if !errors.Is(err, ErrPushRejected) {
		t.Fatalf("Publish of a branch behind the shared one = %v, want ErrPushRejected", err)
	}
	t.Logf("the rejected push says: %v", err)
	if !strings.Contains(err.Error(), "only on this host") {
		t.Errorf("the rejection does not say where the work is: %v", err)
	}
	if got := branchAt(t, shared, branch); got != onB {
		t.Fatalf("the shared branch is at %s after the rejected push, want host B's %s", got, onB)
	}
	if got := branchAt(t, filepath.Join(a.Repo, ".git"), branch); got != onA {
		t.Fatalf("host A's branch is at %s after the rejected push, want its own %s", got, onA)
	}

	// Prepare on A now: diverged, so A's is kept, and the log says so.
	again, _, err := a.Prepare(ctx, "9")
	if err != nil || again != dirA {
		t.Fatalf("Prepare = %q, %v", again, err)
	}
	if got := strings.TrimSpace(gitT(t, dirA, "rev-parse", "HEAD")); got != onA {
		t.Fatalf("host A's worktree is at %s after Prepare, want its own %s", got, onA)
	}
	if !strings.Contains(logs.String(), "diverged") {
		t.Errorf("the log does not say the branches diverged:\n%s", logs.String())
	}
}

// What the agents may write in their repository's configuration and hooks
// changes nothing: the push goes to SharedRepo, the fetch comes from it,
// and nothing of theirs runs.
func TestShare_HostileRepositoryChangesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		// plant writes the agents' configuration or hooks in the git
		// directory common, given the shared repository, one elsewhere
		// and a file whose existence shows something of theirs ran.
		plant func(t *testing.T, common, shared, elsewhere, marker string)
	}{
		{"origin points elsewhere", func(t *testing.T, common, shared, elsewhere, marker string) {
			gitT(t, "", "--git-dir="+common, "config", "remote.origin.url", elsewhere)
			gitT(t, "", "--git-dir="+common, "config", "remote.origin.pushurl", elsewhere)
		}},
		{"insteadOf rewrites", func(t *testing.T, common, shared, elsewhere, marker string) {
			gitT(t, "", "--git-dir="+common, "config", "url."+elsewhere+".insteadOf", shared)
			gitT(t, "", "--git-dir="+common, "config", "url."+elsewhere+".pushInsteadOf", shared)
			gitT(t, "", "--git-dir="+common, "config", "url."+elsewhere+".insteadOf", "/")
		}},
		{"a pre-push hook", func(t *testing.T, common, shared, elsewhere, marker string) {
			hook := "#!/bin/sh\ntouch " + marker + "\n"
			must(t, os.MkdirAll(filepath.Join(common, "hooks"), 0o755))
			must(t, os.WriteFile(filepath.Join(common, "hooks", "pre-push"), []byte(hook), 0o755))
			must(t, os.WriteFile(filepath.Join(common, "hooks", "reference-transaction"), []byte(hook), 0o755))
			other := filepath.Join(t.TempDir(), "hooks")
			must(t, os.MkdirAll(other, 0o755))
			must(t, os.WriteFile(filepath.Join(other, "pre-push"), []byte(hook), 0o755))
			gitT(t, "", "--git-dir="+common, "config", "core.hooksPath", other)
		}},
		{"core.sshCommand over an ssh rewrite", func(t *testing.T, common, shared, elsewhere, marker string) {
			gitT(t, "", "--git-dir="+common, "config", "core.sshCommand", "touch "+marker+"; false")
			gitT(t, "", "--git-dir="+common, "config", "url.ssh://attacker.invalid/x.insteadOf", shared)
		}},
		{"an ext:: transport", func(t *testing.T, common, shared, elsewhere, marker string) {
			gitT(t, "", "--git-dir="+common, "config", "url.ext::sh -c touch% "+marker+".insteadOf", shared)
			gitT(t, "", "--git-dir="+common, "config", "protocol.allow", "always")
			gitT(t, "", "--git-dir="+common, "config", "protocol.ext.allow", "always")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shared, h := hosts(t, 2)
			a, b := h[0], h[1]
			ctx := t.Context()
			elsewhere := filepath.Join(t.TempDir(), "elsewhere.git")
			gitT(t, "", "init", "-q", "--bare", elsewhere)
			marker := filepath.Join(t.TempDir(), "ran")

			dirA, branch, err := a.Prepare(ctx, "5")
			if err != nil {
				t.Fatal(err)
			}
			onA := commitIn(t, dirA, "work", "from A\n")
			tc.plant(t, filepath.Join(a.Repo, ".git"), shared, elsewhere, marker)
			tc.plant(t, filepath.Join(b.Repo, ".git"), shared, elsewhere, marker)
			ran := func(when string) {
				if _, err := os.Stat(marker); err == nil {
					t.Fatalf("something the agents planted ran, %s", when)
				}
			}
			err = a.Publish(ctx, "5")
			ran("in Publish")
			if err != nil {
				t.Fatalf("Publish: %v", err)
			}
			if got := branchAt(t, shared, branch); got != onA {
				t.Errorf("the shared repository's %s is at %q, want %s", branch, got, onA)
			}
			dirB, _, err := b.Prepare(ctx, "5")
			ran("in Prepare")
			if err != nil {
				t.Fatalf("Prepare on host B: %v", err)
			}
			if got := strings.TrimSpace(gitT(t, dirB, "rev-parse", "HEAD")); got != onA {
				t.Errorf("host B's worktree is at %s, want host A's %s", got, onA)
			}
			if refs, _ := gitOut(elsewhere, "for-each-ref"); refs != "" {
				t.Errorf("the repository elsewhere was pushed to:\n%s", refs)
			}
		})
	}
}

// A shared repository git must not reach is refused in words.
func TestPublish_RefusesTransportsOtherThanFileSSHAndHTTPS(t *testing.T) {
	_, h := hosts(t, 1)
	a := h[0]
	dir, _, err := a.Prepare(t.Context(), "3")
	if err != nil {
		t.Fatal(err)
	}
	commitIn(t, dir, "a", "a\n")
	marker := filepath.Join(t.TempDir(), "ran")
	for _, bad := range []string{"ext::sh -c touch% " + marker, "git://127.0.0.1/x", "http://127.0.0.1/x", "--upload-pack=touch " + marker, "relative/path", "fd::3"} {
		a.SharedRepo = bad
		err := a.Publish(t.Context(), "3")
		if !errors.Is(err, ErrSharedRepo) {
			t.Errorf("Publish to %q = %v, want ErrSharedRepo", bad, err)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("a shared repository URL ran a command")
	}
}

// silentServer accepts connections and never says anything: an ssh
// server that hangs.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// Publish and Prepare's fetch end with their ctx, killing the git (and the
// ssh) that waits for a shared repository that does not answer.
func TestShare_EndsWithItsContext(t *testing.T) {
	_, h := hosts(t, 1)
	a := h[0]
	dir, _, err := a.Prepare(t.Context(), "1")
	if err != nil {
		t.Fatal(err)
	}
	commitIn(t, dir, "a", "a\n")
	a.SharedRepo = "ssh://git@" + silentServer(t) + "/repo.git"
	for name, call := range map[string]func(context.Context) error{
		"Publish": func(ctx context.Context) error { return a.Publish(ctx, "1") },
		"Prepare": func(ctx context.Context) error { _, _, err := a.Prepare(ctx, "2"); return err },
	} {
		cause := errors.New("the thread was abandoned")
		ctx, cancel := context.WithCancelCause(t.Context())
		time.AfterFunc(500*time.Millisecond, func() { cancel(cause) })
		start := time.Now()
		err := call(ctx)
		took := time.Since(start)
		if !errors.Is(err, cause) {
			t.Errorf("%s against a silent server = %v, want the context's cause", name, err)
		}
		if took > 5*time.Second {
			t.Errorf("%s took %s to end after its context", name, took)
		}
		t.Logf("%s ended %s after it began, cancelled at 500ms: %v", name, took.Round(time.Millisecond), err)
	}
}

// Confined (in bubblewrap, as the agents' user when the tests run as
// root), the branch still goes from one host to the other and back: the
// bundles cross between the broker's stage and the agents' repository.
func TestShare_Confined(t *testing.T) {
	shared, h := hosts(t, 2)
	a, b := h[0], h[1]
	owner := confineT(t, a)
	confineT(t, b)
	ctx := t.Context()
	dirA, branch, err := a.Prepare(ctx, "77")
	if err != nil {
		t.Fatal(err)
	}
	first := commitIn(t, dirA, "f", "1\n")
	giveTo(t, owner, a.Repo, dirA) // committed as the agents' user would
	must(t, a.Publish(ctx, "77"))
	if got := branchAt(t, shared, branch); got != first {
		t.Fatalf("the shared branch is at %q, want %s", got, first)
	}
	dirB, _, err := b.Prepare(ctx, "77")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(gitT(t, dirB, "rev-parse", "HEAD")); got != first {
		t.Fatalf("host B's worktree is at %s, want %s", got, first)
	}
	second := commitIn(t, dirB, "f", "2\n")
	giveTo(t, owner, b.Repo, dirB)
	must(t, b.Publish(ctx, "77"))
	if _, _, err := a.Prepare(ctx, "77"); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(gitT(t, dirA, "rev-parse", "HEAD")); got != second {
		t.Fatalf("back on host A the worktree is at %s, want %s", got, second)
	}
	if got, _ := os.ReadFile(filepath.Join(dirA, "f")); string(got) != "2\n" {
		t.Fatalf("back on host A the file is %q", got)
	}
}

// What an agent left uncommitted on a host, in the way of the commits
// made since on another, is kept as it was, with the branch: the
// fast-forward is not made, and the log says so.
func TestShare_UncommittedWorkInTheWayIsKept(t *testing.T) {
	_, h := hosts(t, 2)
	a, b := h[0], h[1]
	var logs logBuffer
	a.Logger = zerolog.New(&logs)
	ctx := t.Context()
	dirA, branch, err := a.Prepare(ctx, "8")
	if err != nil {
		t.Fatal(err)
	}
	onA := commitIn(t, dirA, "plan", "1\n")
	must(t, a.Publish(ctx, "8"))
	dirB, _, err := b.Prepare(ctx, "8")
	if err != nil {
		t.Fatal(err)
	}
	commitIn(t, dirB, "plan", "2 from B\n")
	must(t, b.Publish(ctx, "8"))
	must(t, os.WriteFile(filepath.Join(dirA, "plan"), []byte("uncommitted on A\n"), 0o644))

	if _, _, err := a.Prepare(ctx, "8"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dirA, "plan")); string(got) != "uncommitted on A\n" {
		t.Errorf("host A's uncommitted file is %q after Prepare", got)
	}
	if got := branchAt(t, filepath.Join(a.Repo, ".git"), branch); got != onA {
		t.Errorf("host A's branch moved to %s with its worktree left behind, want it at %s", got, onA)
	}
	if !strings.Contains(logs.String(), "could not be fast-forwarded") {
		t.Errorf("the log does not say the branch was kept:\n%s", logs.String())
	}
}

// A turn that committed nothing pushes nothing, and a thread prepared
// again on the host of its last turn fetches nothing: the commit the
// shared repository has is asked for, found here, and nothing more is
// run.
func TestShare_NothingNewCrossesNothing(t *testing.T) {
	_, h := hosts(t, 1)
	a := h[0]
	ctx := t.Context()
	dir, _, err := a.Prepare(ctx, "11")
	if err != nil {
		t.Fatal(err)
	}
	commitIn(t, dir, "f", "1\n")
	must(t, a.Publish(ctx, "11"))
	real, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	calls := filepath.Join(t.TempDir(), "calls")
	a.Git = fakeGit(t, `for a in "$@"; do case "$a" in push|fetch|bundle) echo "$a" >> `+calls+`;; esac; done
exec `+real+` "$@"
`)
	must(t, a.Publish(ctx, "11"))
	if _, _, err := a.Prepare(ctx, "11"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(calls); err == nil {
		t.Errorf("with nothing new, git ran:\n%s", b)
	}
	// The wrapper counts what it should: a new commit is bundled and pushed.
	commitIn(t, dir, "f", "2\n")
	must(t, a.Publish(ctx, "11"))
	if b, _ := os.ReadFile(calls); !strings.Contains(string(b), "push") || !strings.Contains(string(b), "bundle") {
		t.Errorf("publishing a new commit ran %q, want a bundle and a push", b)
	}
}

// A password in SharedRepo's URL is not in what Publish and Prepare say.
func TestShare_ErrorsDoNotShowThePassword(t *testing.T) {
	_, h := hosts(t, 1)
	a := h[0]
	dir, _, err := a.Prepare(t.Context(), "4")
	if err != nil {
		t.Fatal(err)
	}
	commitIn(t, dir, "a", "a\n")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: refused at once
	a.SharedRepo = "https://user:s3cret-token@" + addr + "/repo.git"
	errPublish := a.Publish(t.Context(), "4")
	_, _, errPrepare := a.Prepare(t.Context(), "5")
	for name, err := range map[string]error{"Publish": errPublish, "Prepare": errPrepare} {
		if !errors.Is(err, ErrSharedRepo) {
			t.Errorf("%s to a closed port = %v, want ErrSharedRepo", name, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cret-token") {
			t.Errorf("%s says the password: %v", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
}

// Once a host's copy of the shared repository has the history, a turn's
// bundle, and a thread's on its way to another host, leave out what both
// sides have: each carries what is new, not the whole history.
func TestShare_BundlesCarryOnlyWhatIsNew(t *testing.T) {
	_, h := hosts(t, 2)
	a, b := h[0], h[1]
	ctx := t.Context()
	real, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	calls := filepath.Join(t.TempDir(), "calls")
	wrapper := fakeGit(t, `case " $* " in *" bundle create "*) echo "$*" >> `+calls+`;; esac
exec `+real+` "$@"
`)
	a.Git, b.Git = wrapper, wrapper
	bundles := func() []string {
		out, _ := os.ReadFile(calls)
		os.Remove(calls)
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	for i, thread := range []string{"first", "second"} {
		dirA, _, err := a.Prepare(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		commitIn(t, dirA, "f", thread)
		must(t, a.Publish(ctx, thread))
		out := bundles()
		if _, _, err := b.Prepare(ctx, thread); err != nil {
			t.Fatal(err)
		}
		in := bundles()
		if len(out) != 1 || len(in) != 1 {
			t.Fatalf("thread %s: bundles made %q and %q, want one each way", thread, out, in)
		}
		if i == 0 {
			continue // each host's copy was empty
		}
		for what, call := range map[string]string{"host A's turn": out[0], "the thread's way to host B": in[0]} {
			if !strings.Contains(call, " ^") {
				t.Errorf("the bundle of %s leaves nothing out: %s", what, call)
			}
		}
	}
}
