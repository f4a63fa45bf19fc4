package workspace

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A confined git sees nothing of the broker's but the system directories
// and what it works on: not another thread's worktree, not the
// repository's own working tree, not the test's files; it writes only
// where it must; it has no network, no capabilities, a private /tmp, no
// HOME, an environment of the broker's choosing, and runs as the agents'
// user (nobody when the tests run as root).
func TestConfine_GitSeesOnlyWhatItWorksOn(t *testing.T) {
	repo := newRepo(t)
	w := newWorktrees(t, repo)
	owner := confineT(t, w)
	other, _, err := w.Prepare(t.Context(), "other")
	if err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	reachable(t, outside)
	must(t, os.Chmod(outside, 0o777))
	made := filepath.Join(w.Dir, "new")
	must(t, os.Mkdir(made, 0o755))
	common := filepath.Join(repo, ".git")
	hostTmp, err := os.CreateTemp("", "host-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	hostTmp.Close()
	t.Cleanup(func() { os.Remove(hostTmp.Name()) })
	t.Setenv("BROKER_DISCORD_TOKEN", "secret-token")
	t.Setenv("HOME", outside)
	t.Setenv("XDG_CONFIG_HOME", outside)
	w.Git = fakeGit(t, `{
echo "uid=$(id -u)"
grep CapEff /proc/self/status
cat `+filepath.Join(other, "README")+` 2>/dev/null && echo "other-readable"
cat `+filepath.Join(repo, "README")+` 2>/dev/null && echo "main-readable"
touch `+filepath.Join(outside, "x")+` 2>/dev/null && echo "outside-writable"
touch `+filepath.Join(common, "x")+` 2>/dev/null && echo "common-writable"
echo "tmp=$(ls -A /tmp)"
echo "net=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ' ')"
echo "procs=$(ls /proc | grep -c '^[0-9]')"
env | sed 's/^/env: /'
} > seen
`)
	reachable(t, filepath.Dir(w.Git))
	if _, err := w.run(t.Context(), gitCmd{args: []string{"worktree", "add"}, gitDir: common, common: common, workTree: made,
		writable: []string{common, made}, own: []string{made}}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(made, "seen"))
	if err != nil {
		t.Fatal(err)
	}
	seen := string(b)
	t.Logf("a confined git saw:\n%s", seen)
	wantUID := strconv.Itoa(os.Getuid())
	if owner != nil {
		wantUID = strconv.Itoa(int(owner.Uid))
	}
	for _, want := range []string{"uid=" + wantUID + "\n", "CapEff:\t0000000000000000\n", "common-writable\n", "net=lo \n",
		"env: HOME=/dev/null\n", "env: GIT_CONFIG_NOSYSTEM=1\n", "env: GIT_CONFIG_GLOBAL=/dev/null\n", "env: GIT_COMMON_DIR=" + common + "\n"} {
		if !strings.Contains(seen, want) {
			t.Errorf("a confined git saw no %q", want)
		}
	}
	if m := regexp.MustCompile(`procs=(\d+)`).FindStringSubmatch(seen); m == nil || len(m[1]) > 1 {
		t.Errorf("a confined git sees more processes than its own: %v", m)
	}
	for _, bad := range []string{"other-readable", "main-readable", "outside-writable", "secret-token", "XDG_CONFIG_HOME", outside, filepath.Base(hostTmp.Name())} {
		if strings.Contains(seen, bad) {
			t.Errorf("a confined git saw %q", bad)
		}
	}
	if owner != nil {
		if fi, err := os.Stat(made); err != nil || fi.Sys().(*syscall.Stat_t).Uid != owner.Uid {
			t.Errorf("the directory made for git is not the agents' user's")
		}
	}
}

// Cancelling a confined git kills it and what it started, inside its
// sandbox, at once.
func TestConfine_CancelKillsTheSandboxedGitAndItsChildren(t *testing.T) {
	repo := newRepo(t)
	w := newWorktrees(t, repo)
	confineT(t, w)
	made := filepath.Join(w.Dir, "new")
	must(t, os.MkdirAll(made, 0o755))
	common := filepath.Join(repo, ".git")
	nap := "61." + strconv.Itoa(os.Getpid()) // a sleep no other test starts
	w.Git = fakeGit(t, "sleep "+nap+" &\necho started > started\nwait\n")
	reachable(t, filepath.Dir(w.Git))
	ctx, cancel := context.WithCancelCause(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := w.run(ctx, gitCmd{args: []string{"worktree", "add"}, gitDir: common, common: common, workTree: made,
			writable: []string{common, made}, own: []string{made}})
		errc <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for _, err := os.Stat(filepath.Join(made, "started")); err != nil; _, err = os.Stat(filepath.Join(made, "started")) {
		if time.Now().After(deadline) {
			t.Fatal("the confined git did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for len(sleeping(nap)) != 1 { // forked, maybe not yet sleep(1)
		if time.Now().After(deadline) {
			t.Fatalf("%d processes sleeping %s, want 1", len(sleeping(nap)), nap)
		}
		time.Sleep(10 * time.Millisecond)
	}
	shutdown := errors.New("broker shutting down")
	cancel(shutdown)
	const bound = 3 * time.Second // the kill is immediate; this is room for a loaded machine
	select {
	case err := <-errc:
		if !errors.Is(err, shutdown) {
			t.Fatalf("run = %v; want the cancellation's cause", err)
		}
	case <-time.After(bound):
		t.Fatalf("run still going %v after its context was cancelled", bound)
	}
	for deadline := time.Now().Add(bound); len(sleeping(nap)) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the confined git's child %v still running", sleeping(nap))
		}
	}
}

// A confinement in which git cannot start is reported as git not
// running (so the start names agents.NAME.workspace), with what it said.
func TestCheck_AConfinementGitCannotRunInIsGitNotFound(t *testing.T) {
	w := newWorktrees(t, newRepo(t))
	w.Confine = func(argv, env []string, dir string, readOnly, writable []string) ([]string, *syscall.Credential) {
		return []string{"sh", "-c", "echo 'bwrap: No permissions to create new namespace' >&2; exit 1"}, nil
	}
	err := w.Check(t.Context())
	if !errors.Is(err, ErrGitNotFound) || !strings.Contains(err.Error(), "No permissions to create new namespace") {
		t.Fatalf("Check = %v; want ErrGitNotFound with what the confinement said", err)
	}
}

// sleeping returns the running processes of sleep(1) for arg.
func sleeping(arg string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && string(cmdline) == "sleep\x00"+arg+"\x00" && !gone(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}
