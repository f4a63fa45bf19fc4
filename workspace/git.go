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
	"slices"
	"strconv"
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
	// maxFilterDrivers bounds the filter drivers a repository's
	// configuration may define for git to run at all: each is turned off
	// by name in the command's environment.
	maxFilterDrivers = 256
)

// gitCmd is one git command the broker runs, and what it works on.
type gitCmd struct {
	// args follow git's own options: the command and its arguments.
	args []string
	// gitDir is the git directory it works on (--git-dir), common the
	// repository's common directory (GIT_COMMON_DIR); both empty for a
	// command on no repository. git never looks for them itself.
	gitDir, common string
	// workTree is the worktree it works in (--work-tree), or "".
	workTree string
	// filters are the filter drivers turned off for it: those of the
	// repository's configuration, for a command that reads or writes the
	// worktree's files.
	filters []string
	// readOnly and writable are what a confined git may read, and write.
	readOnly, writable []string
	// own are directories made for it to write in, given (with all
	// they hold) to the user a confined git runs as.
	own []string
	// protocols are the transports it may use (GIT_ALLOW_PROTOCOL,
	// colon-separated); "" for none.
	protocols string
	// settings are more settings for its command line, after the
	// hardened ones.
	settings [][2]string
	// unconfined runs it as the broker even when Confine is set: only
	// for a command on a git directory of the broker's own, with no
	// repository configuration of an agent's, that must reach the
	// network (see share.go).
	unconfined bool
}

// dir is where the command runs: its worktree, else its git directory.
func (c gitCmd) dir() string {
	switch {
	case c.workTree != "":
		return c.workTree
	case c.gitDir != "":
		return c.gitDir
	}
	return "/"
}

// hardened are settings every git command gets from its command line,
// where they win over every configuration file: agents write the
// repository's configuration, its hooks and its worktrees, and nothing
// of theirs may run in a git command of the broker's. No hooks, no file
// system monitor, no network (a partial clone fetching what it lacks),
// no submodules (each a repository of its own), nothing left running
// after the command (automatic gc and maintenance), no relative worktree
// links (the broker checks them as absolute paths).
var hardened = [][2]string{
	{"core.hooksPath", "/dev/null"},
	{"core.fsmonitor", "false"},
	{"core.untrackedCache", "false"},
	{"protocol.allow", "never"},
	{"credential.helper", ""},
	{"submodule.recurse", "false"},
	{"diff.ignoreSubmodules", "all"},
	{"status.submoduleSummary", "false"},
	{"gc.auto", "0"},
	{"gc.autoDetach", "false"},
	{"maintenance.auto", "false"},
	{"worktree.useRelativePaths", "false"},
}

// gitEnv is the whole environment of git command c, chosen here: nothing
// of the broker's but PATH (no GIT_* variable pointing git elsewhere,
// none of its secrets), no configuration but the repository's (neither
// the system's nor the user's: no HOME), no terminal prompts, no
// transport at all, no optional locks (git status then writes nothing),
// the hardened settings, and c's filter drivers turned off: every
// command that runs through each is emptied and none is required.
func gitEnv(c gitCmd) []string {
	env := []string{
		"HOME=/dev/null",
		"LC_ALL=C",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_ATTR_NOSYSTEM=1",
		// c's transports (none for most), whatever the configuration allows.
		"GIT_ALLOW_PROTOCOL=" + c.protocols,
		"GIT_OPTIONAL_LOCKS=0",
		"GIT_NO_REPLACE_OBJECTS=1",
	}
	if path, ok := os.LookupEnv("PATH"); ok {
		env = append(env, "PATH="+path)
	}
	if sock, ok := os.LookupEnv("SSH_AUTH_SOCK"); ok && slices.Contains(strings.Split(c.protocols, ":"), "ssh") {
		// The host's ssh agent, for a push over ssh with its keys.
		env = append(env, "SSH_AUTH_SOCK="+sock)
	}
	if c.common != "" {
		// Not what a commondir file in the git directory says.
		env = append(env, "GIT_COMMON_DIR="+c.common)
	}
	settings := append(hardened[:len(hardened):len(hardened)], c.settings...)
	for _, d := range c.filters {
		settings = append(settings[:len(settings):len(settings)],
			[2]string{"filter." + d + ".clean", ""}, [2]string{"filter." + d + ".smudge", ""},
			[2]string{"filter." + d + ".process", ""}, [2]string{"filter." + d + ".required", "false"})
	}
	env = append(env, "GIT_CONFIG_COUNT="+strconv.Itoa(len(settings)))
	for i, s := range settings {
		n := strconv.Itoa(i)
		env = append(env, "GIT_CONFIG_KEY_"+n+"="+s[0], "GIT_CONFIG_VALUE_"+n+"="+s[1])
	}
	return env
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

// run runs git command c, confined if Confine is set, and returns its
// standard output. The command runs in its own process group with stdin
// closed; the group is killed when ctx ends or the timeout passes, and
// once more after the command exits, so nothing it started outlives it.
func (w *Worktrees) run(ctx context.Context, c gitCmd) (string, error) {
	name := cmdName(c.args)
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

	argv := []string{path, "--no-pager"}
	if c.gitDir != "" {
		argv = append(argv, "--git-dir="+c.gitDir)
	}
	if c.workTree != "" {
		argv = append(argv, "--work-tree="+c.workTree)
	}
	argv = append(argv, c.args...)
	env, dir := gitEnv(c), c.dir()
	var cred *syscall.Credential
	if w.Confine != nil && !c.unconfined {
		argv, cred = w.Confine(argv, env, dir, c.readOnly, c.writable)
	}
	if cred != nil {
		for _, p := range c.own {
			if err := chownTree(p, cred); err != nil {
				return "", fmt.Errorf("%s not run: %w", name, err)
			}
		}
	}

	var stdout, stderr capped
	stdout.max, stderr.max = stdoutMax, stderrMax
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	cmd.WaitDelay = killGrace
	if err := cmd.Start(); err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) && pe.Op == "chdir" {
			return "", fmt.Errorf("%s cannot run in %s: %w", name, dir, pe.Err)
		}
		what := "git (" + path + ")"
		if argv[0] != path {
			what = "git's confinement (" + argv[0] + ")"
		}
		return "", &wordedError{msg: fmt.Sprintf("%s cannot be run: %v", what, unwrapPath(err)), kind: ErrGitNotFound, err: err}
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
		// What it wrote is returned too: git push --porcelain says on
		// stdout which refs it could not update.
		return stdout.String(), &gitError{cmd: name, code: ee.ExitCode(), stderr: gitSaid(stderr.String())}
	}
	return stdout.String(), nil
}

// filterDrivers returns the filter drivers the configuration c runs with
// defines, as git reads it in c's repository and worktree (includes,
// conditional ones too, and a worktree's own configuration), so that
// they can be turned off for c. A configuration defining more than
// maxFilterDrivers is refused.
func (w *Worktrees) filterDrivers(ctx context.Context, c gitCmd) ([]string, error) {
	list := c
	list.args = []string{"config", "--list", "-z", "--name-only"}
	list.readOnly = append(append([]string(nil), c.readOnly...), c.writable...)
	list.writable, list.own, list.filters = nil, nil, nil
	out, err := w.run(ctx, list)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var drivers []string
	for _, key := range strings.Split(out, "\x00") {
		rest, ok := strings.CutPrefix(key, "filter.")
		if !ok {
			continue
		}
		i := strings.LastIndexByte(rest, '.')
		if i <= 0 || seen[rest[:i]] {
			continue
		}
		switch rest[i+1:] {
		case "clean", "smudge", "process", "required":
		default:
			continue
		}
		if len(drivers) == maxFilterDrivers {
			return nil, fmt.Errorf("%s: the repository's configuration defines more than %d filter drivers", cmdName(c.args), maxFilterDrivers)
		}
		seen[rest[:i]] = true
		drivers = append(drivers, rest[:i])
	}
	return drivers, nil
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

// chownTree gives dir and everything in it to cred's user, following
// no symbolic link.
func chownTree(dir string, cred *syscall.Credential) error {
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(cred.Uid), int(cred.Gid))
	})
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
	key := realPath(repo)
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
