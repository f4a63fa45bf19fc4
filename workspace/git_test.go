package workspace

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// sleepyGit is a git that starts a child sleeping for a minute, records
// the child's pid in pidFile and waits for it.
func sleepyGit(t *testing.T) (git, pidFile string) {
	pidFile = filepath.Join(t.TempDir(), "pid")
	return fakeGit(t, "sleep 60 &\necho $! > "+pidFile+"\nwait\n"), pidFile
}

// waitPidFile returns the pid written to path once it is there.
func waitPidFile(t *testing.T, path string) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(path)
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil {
			return pid
		}
	}
	t.Fatal("the fake git did not start")
	return 0
}

// gone reports whether pid has exited (a zombie waiting for a parent
// that does not reap counts as exited).
func gone(pid int) bool {
	if unix.Kill(pid, 0) != nil {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
}

func TestPrepare_CancelKillsGitAndWhatItStarted(t *testing.T) {
	w := newWorktrees(t, newRepo(t))
	var pidFile string
	w.Git, pidFile = sleepyGit(t)
	shutdown := errors.New("broker shutting down")
	ctx, cancel := context.WithCancelCause(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, _, err := w.Prepare(ctx, "1")
		errc <- err
	}()
	child := waitPidFile(t, pidFile)
	start := time.Now()
	cancel(shutdown)

	const bound = 3 * time.Second // the kill is immediate; this is room for a loaded machine
	select {
	case err := <-errc:
		if !errors.Is(err, shutdown) || !strings.Contains(err.Error(), "broker shutting down") {
			t.Fatalf("Prepare = %v; want the cancellation's cause", err)
		}
		t.Logf("returned %v after the cancel: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(bound):
		t.Fatalf("Prepare still running %v after its context was cancelled", bound)
	}
	for deadline := time.Now().Add(bound); !gone(child); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("git's child %d still running", child)
		}
	}
}

func TestRun_TimeoutStopsGit(t *testing.T) {
	w := newWorktrees(t, newRepo(t))
	var pidFile string
	w.Git, pidFile = sleepyGit(t)
	w.Timeout = 300 * time.Millisecond
	start := time.Now()
	err := w.Check(t.Context())
	if !errors.Is(err, ErrTimeout) || err.Error() != "git version did not finish within 300ms" {
		t.Fatalf("Check = %v; want ErrTimeout", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Check took %v with a 300ms timeout", took)
	}
	child := waitPidFile(t, pidFile)
	for deadline := time.Now().Add(3 * time.Second); !gone(child); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("git's child %d still running", child)
		}
	}
}

func TestPrepare_WaitForTheRepositoryIsAbortable(t *testing.T) {
	repo := newRepo(t)
	slow := newWorktrees(t, repo)
	var pidFile string
	slow.Git, pidFile = sleepyGit(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		slow.Prepare(ctx, "1")
	}()
	defer func() { cancel(); <-done }()
	waitPidFile(t, pidFile) // slow now holds the repository

	w := newWorktrees(t, repo)
	turn := errors.New("turn deadline")
	short, stop := context.WithTimeoutCause(t.Context(), 200*time.Millisecond, turn)
	defer stop()
	start := time.Now()
	_, _, err := w.Prepare(short, "2")
	if !errors.Is(err, turn) || !strings.Contains(err.Error(), "waiting for other git commands on "+repo) {
		t.Fatalf("Prepare = %v; want the wait cut short by the turn deadline", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Prepare waited %v with a 200ms deadline", took)
	}
}

// git gets a closed stdin, a process group of its own, and an environment
// of the broker's choosing: none of its GIT_* variables or secrets, no
// HOME or XDG configuration, the hardened settings.
func TestRun_GitGetsAClosedStdinAndACleanEnvironment(t *testing.T) {
	out := filepath.Join(t.TempDir(), "seen")
	w := newWorktrees(t, newRepo(t))
	w.Git = fakeGit(t, `{ env; echo "stdin=$(readlink /proc/self/fd/0)"; echo "pgid=$(cut -d" " -f5 /proc/$$/stat)"; echo "pid=$$"; } > `+out+"\n")
	t.Setenv("GIT_DIR", "/elsewhere/.git")
	t.Setenv("GIT_CONFIG_PARAMETERS", "'core.hooksPath'='/tmp/evil'")
	t.Setenv("BROKER_DISCORD_TOKEN", "secret-token")
	t.Setenv("HOME", "/home/broker-home")
	t.Setenv("XDG_CONFIG_HOME", "/home/broker-xdg")
	if _, err := w.run(t.Context(), gitCmd{args: []string{"status"}, gitDir: w.Repo}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	seen := string(b)
	for _, bad := range []string{"GIT_DIR=", "GIT_CONFIG_PARAMETERS=", "secret-token", "broker-home", "broker-xdg"} {
		if strings.Contains(seen, bad) {
			t.Errorf("git's environment has %s:\n%s", bad, seen)
		}
	}
	for _, want := range []string{"GIT_TERMINAL_PROMPT=0\n", "stdin=/dev/null\n", "HOME=/dev/null\n", "GIT_CONFIG_NOSYSTEM=1\n",
		"GIT_CONFIG_GLOBAL=/dev/null\n", "GIT_ALLOW_PROTOCOL=\n", "GIT_CONFIG_KEY_0=core.hooksPath\n", "GIT_CONFIG_VALUE_0=/dev/null\n"} {
		if !strings.Contains(seen, want) {
			t.Errorf("git's environment lacks %q:\n%s", want, seen)
		}
	}
	var pid, pgid string
	for line := range strings.Lines(seen) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch k {
		case "pid":
			pid = v
		case "pgid":
			pgid = strings.TrimSpace(v)
		}
	}
	if pid == "" || pid != pgid {
		t.Errorf("git (pid %s) runs in process group %s, not its own", pid, pgid)
	}
}

func TestRun_FailureSaysWhatGitSaid(t *testing.T) {
	w := newWorktrees(t, newRepo(t))
	common := filepath.Join(w.Repo, ".git")
	_, err := w.run(t.Context(), gitCmd{args: []string{"worktree", "remove", "--", filepath.Join(w.Dir, "none")}, gitDir: common, common: common})
	if err == nil || !strings.HasPrefix(err.Error(), "git worktree remove failed (exit status 128): fatal: ") {
		t.Fatalf("run = %v; want git's own words", err)
	}
}

func TestGitSaid_KeepsTheErrorLines(t *testing.T) {
	for in, want := range map[string]string{
		"Preparing worktree (new branch 'acp/1')\nfatal: failed to read x\n": "fatal: failed to read x",
		"warning: a\nerror: b\nfatal: c\n":                                   "error: b; fatal: c",
		"usage: git  worktree\n   or: other\n":                               "usage: git worktree; or: other",
		"":                                                                   "",
	} {
		if got := gitSaid(in); got != want {
			t.Errorf("gitSaid(%q) = %q, want %q", in, got, want)
		}
	}
}
