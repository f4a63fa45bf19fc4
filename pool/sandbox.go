package pool

import (
	"acpbroker/acp"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Sandbox confines agents. With Bwrap set, each agent runs under
// bubblewrap: the system directories read-only, its own working
// directory read-write, a private /tmp, its own PID namespace (so /proc
// shows only its own processes), a new session, dying with the broker;
// nothing else of the file system is there (the broker's state,
// configuration, token file and home, other threads' workspaces). The
// zero Sandbox runs agents as they are.
type Sandbox struct {
	// Bwrap is the bubblewrap program; empty means no sandbox.
	Bwrap string
	// ReadOnly and ReadWrite are more paths to show the agent, at the same
	// place (an agent's own configuration directory, a tool cache).
	ReadOnly, ReadWrite []string
	// NoNetwork gives the agent a network namespace of its own: no
	// network at all.
	NoNetwork bool
	// Hide are paths kept out of sight even where a system directory
	// shown to the agent holds them (the broker's configuration and
	// token under /etc, say).
	Hide []string

	// Launcher, instead of bubblewrap, is a command the agent is started
	// through (a container or cluster runtime): its words with {workdir},
	// {thread} and {profile} (the agent's profile's name) substituted,
	// then the agent's command and arguments. LauncherStop, if set, is run
	// the same way once the agent has been stopped, to clean up what the
	// launcher started elsewhere.
	Launcher, LauncherStop []string
}

// systemDirs are shown read-only to every sandboxed agent.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"}

// Enabled reports whether agents run in bubblewrap.
func (s Sandbox) Enabled() bool { return s.Bwrap != "" }

// expand substitutes a launcher template's words for one agent.
func (s Sandbox) expand(words []string, thread, workdir, profile string) []string {
	r := strings.NewReplacer("{workdir}", workdir, "{thread}", thread, "{profile}", profile)
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = r.Replace(w)
	}
	return out
}

// stopCommand is what to run once thread's agent of profile has been
// stopped, if anything.
func (s Sandbox) stopCommand(thread, workdir, profile string) []string {
	if len(s.Launcher) == 0 || len(s.LauncherStop) == 0 {
		return nil
	}
	return s.expand(s.LauncherStop, thread, workdir, profile)
}

// wrap returns spec, thread's agent of profile, run inside the sandbox or
// through the launcher. programs are more commands the agent itself
// starts (stdio MCP servers): in bubblewrap their directories are shown
// read-only, as the agent's own.
func (s Sandbox) wrap(spec ProcessSpec, thread, profile string, programs, readOnly, readWrite []string) ProcessSpec {
	if len(s.Launcher) > 0 {
		words := s.expand(s.Launcher, thread, spec.Dir, profile)
		spec.Args = append(append(words[1:], spec.Command), spec.Args...)
		spec.Command = words[0]
		return spec
	}
	if !s.Enabled() {
		return spec
	}
	args := append(s.confine(spec.Command, spec.Dir, spec.Env, programs, readOnly, readWrite), "--chdir", spec.Dir)
	mark := newSandboxMark()
	args = append(mark.args(), append(args, "--", spec.Command)...)
	spec.Args = append(args, spec.Args...)
	spec.Command = s.Bwrap
	spec.Env = mark.env(spec.Env)
	spec.Leftovers = mark.kill
	return spec
}

// confine is the bubblewrap arguments that show an agent of program,
// working in dir with env, what it may see: the system directories, its
// program's, its stdio MCP servers' (programs), an empty HOME, the
// configured paths and the profile's (readOnly, readWrite), and dir
// writable.
func (s Sandbox) confine(program, dir string, env, programs, readOnly, readWrite []string) []string {
	args := s.base()
	if pd := filepath.Dir(program); filepath.IsAbs(program) && !under(pd, systemDirs) {
		args = append(args, "--ro-bind", pd, pd) // the agent's program
	}
	// The agent's HOME is its own and empty: agents keep caches and
	// settings there. What must outlive the agent is given in ReadWrite,
	// which is mounted after it, inside it if need be.
	if home := envValue(env, "HOME"); filepath.IsAbs(home) && home != "/" && !under(home, systemDirs) && !under(dir, []string{home}) {
		args = append(args, "--tmpfs", home)
	}
	// A stdio MCP server is started by the agent, inside the sandbox, so
	// its program must be there too: its directory is added read-only
	// unless a system directory already shows it. After HOME, which may
	// hold it; before ReadOnly and ReadWrite, which keep their own modes.
	// A directory gone missing costs that server, not the agent.
	seen := map[string]bool{}
	for _, prog := range programs {
		if pd := filepath.Dir(prog); filepath.IsAbs(prog) && !under(pd, systemDirs) && !seen[pd] {
			seen[pd] = true
			args = append(args, "--ro-bind-try", pd, pd)
		}
	}
	for _, p := range append(slices.Clone(s.ReadOnly), readOnly...) {
		args = append(args, "--ro-bind-try", p, p)
	}
	for _, p := range append(slices.Clone(s.ReadWrite), readWrite...) {
		args = append(args, "--bind-try", p, p)
	}
	return append(args, "--bind", dir, dir)
}

// wrapTerminal returns cmd, a terminal's command of the agent of program
// working in dir, confined as that agent is: the same paths shown, dir
// writable, a session of its own, cmd.Dir (inside dir) its working
// directory. Its own program is looked up inside the sandbox.
func (s Sandbox) wrapTerminal(cmd acp.TerminalCommand, program, dir string, programs, readOnly, readWrite []string) acp.TerminalCommand {
	bwrap := s.Bwrap
	if found, err := exec.LookPath(bwrap); err == nil {
		bwrap = found // the broker's PATH, as for the agent itself
	}
	args := append(s.confine(program, dir, cmd.Env, programs, readOnly, readWrite), "--chdir", cmd.Dir)
	mark := newSandboxMark()
	args = append(mark.args(), append(args, "--", cmd.Path)...)
	cmd.Args = append(args, cmd.Args...)
	cmd.Path = bwrap
	cmd.Env = mark.env(cmd.Env)
	cmd.Leftovers = mark.kill
	return cmd
}

// sandboxMarkVar is a variable bubblewrap's own processes carry, and the
// program they confine does not (--unsetenv): it finds a sandbox its
// bubblewrap left behind. Killed while it sets up (within milliseconds of
// its start: a terminal released at once), bubblewrap can die before its
// init in the sandbox has put --die-with-parent in force; that init is in
// a session of its own, out of reach of the group's signals, and would
// keep the sandbox running for good.
const sandboxMarkVar = "ACP_BROKER_SANDBOX"

// sandboxMark tells one sandbox's bubblewrap processes from all others:
// the broker's pid and a count.
type sandboxMark string

var sandboxCount atomic.Uint64

func newSandboxMark() sandboxMark {
	return sandboxMark(fmt.Sprintf("%d.%d", os.Getpid(), sandboxCount.Add(1)))
}

// args keep the mark from the confined program.
func (m sandboxMark) args() []string { return []string{"--unsetenv", sandboxMarkVar} }

// env is bubblewrap's environment: env with the mark.
func (m sandboxMark) env(env []string) []string {
	return append(slices.Clone(env), sandboxMarkVar+"="+string(m))
}

// kill sends SIGKILL to every process that carries the mark: once its
// bubblewrap is gone, only a sandbox's init left behind does, and its
// death ends everything in the sandbox (its PID namespace). It looks at
// every process's environment in /proc; it does not wait.
func (m sandboxMark) kill() {
	needle := []byte(sandboxMarkVar + "=" + string(m) + "\x00")
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		if bytes.HasPrefix(env, needle) || bytes.Contains(env, append([]byte{0}, needle...)) {
			unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// base is what every sandboxed process gets, before its own paths.
func (s Sandbox) base() []string {
	args := []string{"--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-cgroup-try"}
	if s.NoNetwork {
		args = append(args, "--unshare-net")
	}
	for _, d := range systemDirs {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(d); err == nil {
				args = append(args, "--symlink", target, d)
			}
		case fi.IsDir():
			args = append(args, "--ro-bind", d, d)
		}
	}
	args = append(args, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp")
	for _, h := range s.Hide {
		if fi, err := os.Stat(h); err == nil && fi.IsDir() && under(h, systemDirs) {
			args = append(args, "--tmpfs", h)
		}
	}
	return args
}

// envValue is name's value in env, or "".
func envValue(env []string, name string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// under reports whether path is one of dirs or inside one.
func under(path string, dirs []string) bool {
	for _, d := range dirs {
		if path == d || strings.HasPrefix(path, d+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// ErrNoSandbox: agents cannot be sandboxed on this machine as configured.
var ErrNoSandbox = errors.New("agents cannot be sandboxed")

// Check runs a trivial program in the sandbox, as an agent would be run,
// and says what to do when that fails: bubblewrap missing, or user
// namespaces refused. It gives up after timeout.
func (s Sandbox) Check(timeout time.Duration) error {
	if !s.Enabled() {
		return nil
	}
	bin, err := exec.LookPath(s.Bwrap)
	if err != nil {
		return fmt.Errorf("%w: bubblewrap (%s) is not installed: install it (Debian and Ubuntu: apt-get install bubblewrap), or set agent.sandbox = \"none\" to run agents unconfined", ErrNoSandbox, s.Bwrap)
	}
	truePath, err := exec.LookPath("true")
	if err != nil {
		return fmt.Errorf("%w: no true(1) to try the sandbox with: %v", ErrNoSandbox, err)
	}
	dir, err := os.MkdirTemp("", "sandbox-check-")
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoSandbox, err)
	}
	defer os.RemoveAll(dir)
	spec := s.wrap(ProcessSpec{Command: truePath, Dir: dir}, "check", "", nil, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, spec.Args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: bubblewrap could not start a program (%v: %s); it needs user namespaces (sysctl kernel.unprivileged_userns_clone=1, and under systemd a unit that does not restrict them), or set agent.sandbox = \"none\" to run agents unconfined",
			ErrNoSandbox, err, strings.TrimSpace(string(out)))
	}
	return nil
}
