package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultTimeout bounds each git command when Worktrees.Timeout is zero.
// Checking out a large repository is the slowest of them.
const DefaultTimeout = 2 * time.Minute

const (
	// stdoutMax and stderrMax cap what is kept of a git command's output.
	stdoutMax = 1 << 20
	stderrMax = 8 << 10
	// killGrace bounds how long a killed git command's output pipes are
	// waited for (a descendant that left its process group may hold them).
	killGrace = 2 * time.Second
)

// inherited are the only variables git gets from the broker's environment:
// enough to find itself and the user's git configuration, nothing that
// points it at another repository (GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE)
// and none of the broker's secrets, which a hook would otherwise see.
var inherited = []string{"PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "XDG_CONFIG_HOME"}

// gitEnv is the environment of a git command run in dir. Git does not look
// for a repository above dir, so a directory that is not a repository is
// not taken for a part of one that encloses it.
func gitEnv(dir string) []string {
	env := make([]string, 0, len(inherited)+3)
	for _, k := range inherited {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env,
		"GIT_TERMINAL_PROMPT=0",
		"GIT_CEILING_DIRECTORIES="+filepath.Dir(dir),
		"LC_ALL=C",
	)
}

// gitError is a git command that ran and failed.
type gitError struct {
	cmd    string // "git worktree add"
	code   int    // exit code, -1 if killed by a signal
	stderr string
}

func (e *gitError) Error() string {
	msg := fmt.Sprintf("%s failed (exit status %d)", e.cmd, e.code)
	if e.stderr != "" {
		msg += ": " + e.stderr
	}
	return msg
}

// exitCode is the exit code of the failed git command err reports, or -1.
func exitCode(err error) int {
	var ge *gitError
	if errors.As(err, &ge) {
		return ge.code
	}
	return -1
}

// cmdName names a git command for messages: "git worktree add".
func cmdName(args []string) string {
	n := 1
	if len(args) > 1 && (args[0] == "worktree" || args[0] == "branch" && !strings.HasPrefix(args[1], "-")) {
		n = 2
	}
	return "git " + strings.Join(args[:min(n, len(args))], " ")
}

// run runs git with args in dir and returns its standard output. The
// command runs in its own process group with stdin closed; the group is
// killed when ctx ends or the timeout passes, and once more after the
// command exits, so nothing it started outlives it.
func (w *Worktrees) run(ctx context.Context, dir string, args ...string) (string, error) {
	name := cmdName(args)
	git := w.Git
	if git == "" {
		git = "git"
	}
	path, err := exec.LookPath(git)
	if err != nil {
		return "", &wordedError{msg: fmt.Sprintf("git (%s) cannot be run: %v", git, unwrapPath(err)), kind: ErrGitNotFound, err: err}
	}
	timeout := w.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, &wordedError{
		msg:  fmt.Sprintf("%s did not finish within %s", name, timeout),
		kind: ErrTimeout,
	})
	defer cancel()
	if err := context.Cause(ctx); err != nil {
		return "", fmt.Errorf("%s not run: %w", name, err)
	}

	var stdout, stderr capped
	stdout.max, stderr.max = stdoutMax, stderrMax
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = dir
	cmd.Env = gitEnv(dir)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	cmd.WaitDelay = killGrace
	err = cmd.Start()
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) && pe.Op == "chdir" {
			return "", fmt.Errorf("%s cannot run in %s: %w", name, dir, pe.Err)
		}
		return "", &wordedError{msg: fmt.Sprintf("git (%s) cannot be run: %v", path, unwrapPath(err)), kind: ErrGitNotFound, err: err}
	}
	err = cmd.Wait()
	_ = killGroup(cmd.Process.Pid)
	if cause := context.Cause(ctx); err != nil && cause != nil {
		if errors.Is(cause, ErrTimeout) {
			return "", cause
		}
		return "", fmt.Errorf("%s stopped: %w", name, cause)
	}
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		return "", &gitError{cmd: name, code: ee.ExitCode(), stderr: gitSaid(stderr.String())}
	}
	return stdout.String(), nil
}

// gitSaid is git's stderr on one line: its fatal: and error: lines if it
// wrote any, else all of it.
func gitSaid(stderr string) string {
	var all, errs []string
	for line := range strings.Lines(stderr) {
		line = strings.Join(strings.Fields(line), " ")
		if line == "" {
			continue
		}
		all = append(all, line)
		if strings.HasPrefix(line, "fatal: ") || strings.HasPrefix(line, "error: ") {
			errs = append(errs, line)
		}
	}
	if len(errs) > 0 {
		all = errs
	}
	return strings.Join(all, "; ")
}

// unwrapPath drops the operation and path from a path error, which the
// message around it already names.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var ee *exec.Error
	if errors.As(err, &ee) {
		return ee.Err
	}
	return err
}

// killGroup kills the process group led by pid; a group already gone is
// not an error.
func killGroup(pid int) error {
	if err := unix.Kill(-pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		return err
	}
	return nil
}

// capped keeps the first max bytes written to it and drops the rest.
type capped struct {
	buf       bytes.Buffer
	max       int
	truncated bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room < len(p) {
		c.truncated = true
		c.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return c.buf.Write(p)
}

func (c *capped) String() string { return c.buf.String() }

// repoLocks serialises the git commands on one repository, across all the
// Worktrees values that name it: git's own lock files (index.lock, the
// worktree and ref metadata) make concurrent changes fail rather than wait.
var repoLocks = struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}{m: map[string]chan struct{}{}}

// lockRepo waits for the repository's lock, or for ctx to end.
func lockRepo(ctx context.Context, repo string) (unlock func(), err error) {
	key := repo
	if real, err := filepath.EvalSymlinks(repo); err == nil {
		key = real
	}
	repoLocks.mu.Lock()
	ch := repoLocks.m[key]
	if ch == nil {
		ch = make(chan struct{}, 1)
		repoLocks.m[key] = ch
	}
	repoLocks.mu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for other git commands on %s: %w", repo, context.Cause(ctx))
	}
}
