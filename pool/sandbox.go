package pool

import (
	"acpbroker/acp/host"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Sandbox confines agents. With Bwrap set, each agent runs under
// bubblewrap: in a user namespace of its own with every capability
// dropped and no way to make another, in PID and IPC namespaces of its
// own (so /proc shows only its own processes), a new session, dying
// with the broker. It sees the system directories read-only, its own
// working directory read-write, a private /tmp, an empty HOME, the file
// of its program (not the directory it is in); nothing else of the file
// system is there (the broker's state, configuration, token file and
// home, other threads' workspaces). Bubblewrap itself starts with an
// empty environment: the agent's is set inside, so that nothing an
// agent names in its environment (a loader variable in a terminal's,
// say) takes effect outside. Bubblewrap runs as the agent's user
// (Config.RunAs): started by root without one, an agent is uid 0 over
// what it is shown, whose files it may then read, so the broker refuses
// that. The zero Sandbox runs agents as they are.
type Sandbox struct {
	// Bwrap is the bubblewrap program; empty means no sandbox.
	Bwrap string
	// ReadOnly and ReadWrite are more paths to show the agent, at the same
	// place (an agent's own configuration directory, a tool cache).
	ReadOnly, ReadWrite []string
	// NoNetwork gives a sandboxed program a network namespace of its
	// own: an agent whose profile names no Network (Check tries it so),
	// and git (ConfineGit).
	NoNetwork bool
	// Hide are the broker's own paths, symbolic links resolved (its
	// state directory, its configuration and token files and the
	// directories they are in): wherever a system directory or a path
	// shown to the agent holds one, it is mounted over after that path
	// (a directory with an empty tmpfs, a file with an unreadable one);
	// a path shown later inside one is shown again. Hiding is not
	// enough where the agent may write around what is hidden (a
	// writable path holding one), nor in its working directory, whose
	// files the broker serves it: the caller must refuse those.
	Hide []string

	// Launcher, instead of bubblewrap, is a command the agent is started
	// through (a container or cluster runtime): its words with {workdir},
	// {thread} (the thread's name: see Config.ThreadName) and {profile}
	// (the agent's profile's name) substituted,
	// then the agent's command and arguments. LauncherStop, if set, is run
	// the same way once the agent has been stopped, to clean up what the
	// launcher started elsewhere.
	Launcher, LauncherStop []string
}

// systemDirs are shown read-only to every sandboxed agent.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"}

// SystemDirs are the directories every sandboxed agent is shown
// read-only.
func SystemDirs() []string { return slices.Clone(systemDirs) }

// bwrapEnv is the whole environment bubblewrap starts with: it runs
// outside the sandbox before it confines anything, so no variable the
// agent's environment names (LD_PRELOAD, LD_AUDIT, GCONV_PATH…) may
// reach it. The agent's environment is set inside (see environ).
var bwrapEnv = []string{}

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
// starts (stdio MCP servers): in bubblewrap their files are shown
// read-only, as the agent's own. In bubblewrap, the returned spec holds
// an open file in ExtraFiles, which the caller closes once the process
// has started.
//
// network is the agent's network (see Profile.Network): with
// NetworkProxy, n is its way out, and the agent runs behind the
// forwarder, which relays the sandbox's loopback proxy port to n's
// socket.
func (s Sandbox) wrap(spec ProcessSpec, thread, profile, network string, n *agentNet, programs, readOnly, readWrite []string) (ProcessSpec, error) {
	if len(s.Launcher) > 0 {
		words := s.expand(s.Launcher, thread, spec.Dir, profile)
		spec.Args = append(append(words[1:], spec.Command), spec.Args...)
		spec.Command = words[0]
		return spec, nil
	}
	if !s.Enabled() {
		return spec, nil
	}
	s.NoNetwork = network != NetworkHost
	args := s.confine(spec.Command, spec.Dir, spec.Env, programs, readOnly, readWrite)
	command, cmdArgs, env := spec.Command, spec.Args, spec.Env
	if n != nil {
		args, command, cmdArgs = n.mount(args, command, cmdArgs)
		env = mergeEnv(env, proxyEnv)
	}
	args = append(append(args, environ(env)...), "--chdir", spec.Dir)
	f, err := argsFile(args)
	if err != nil {
		return spec, err
	}
	fd := 3 + len(spec.ExtraFiles)
	spec.ExtraFiles = append(slices.Clone(spec.ExtraFiles), f)
	spec.Args = append([]string{"--args", fmt.Sprint(fd), "--", command}, cmdArgs...)
	spec.Command = s.Bwrap
	mark := newSandboxMark()
	spec.Env = mark.env(bwrapEnv)
	spec.Leftovers = mark.kill
	return spec, nil
}

// confine is the bubblewrap arguments that show an agent of program,
// working in dir with env, what it may see: the system directories, an
// empty HOME, the configured paths and the profile's (readOnly,
// readWrite), the broker's own paths hidden wherever those show them,
// its program's file and its stdio MCP servers' (programs), and dir
// writable.
func (s Sandbox) confine(program, dir string, env, programs, readOnly, readWrite []string) []string {
	args := s.base()
	_, hidden := s.systemHides()
	// The agent's HOME is its own and empty: agents keep caches and
	// settings there. What must outlive the agent is given in ReadWrite,
	// which is mounted after it, inside it if need be; so are programs.
	if home := envValue(env, "HOME"); filepath.IsAbs(home) && home != "/" && !under(home, systemDirs) && !under(dir, []string{home}) {
		args = append(args, "--tmpfs", home)
	}
	// Shallower paths first, so that a path inside another keeps its own
	// mode and what is hidden inside either stays hidden.
	ro := byDepth(append(slices.Clone(s.ReadOnly), readOnly...))
	rw := byDepth(append(slices.Clone(s.ReadWrite), readWrite...))
	for _, p := range ro {
		args = append(args, "--ro-bind-try", p, p)
		args, hidden = s.hide(args, hidden, p)
	}
	for _, p := range rw {
		args = append(args, "--bind-try", p, p)
		args, hidden = s.hide(args, hidden, p)
	}
	// A stdio MCP server is started by the agent, inside the sandbox, so
	// its program must be there too. A file gone missing costs that
	// server, not the agent.
	shown := append(ro, rw...)
	args = s.bindProgram(args, program, shown, hidden, false)
	seen := map[string]bool{program: true}
	for _, prog := range programs {
		if !seen[prog] {
			seen[prog] = true
			args = s.bindProgram(args, prog, shown, hidden, true)
		}
	}
	args = append(args, "--bind", dir, dir)
	args, _ = s.hide(args, nil, dir)
	return args
}

// bindProgram adds to args what shows the agent a program: its file
// alone, read-only, at its own path (its directory may hold anything:
// the broker's configuration, /tmp). A program given as a symbolic link
// gets the link, made again inside as a link to where it leads, and
// the file it resolves to, each link of a chain the same way. What a
// system directory shows, or a path already shown (shown) outside what
// is hidden, needs nothing. Anything else a program needs (its
// libraries, a script's interpreter's modules) is for ReadOnly. With
// try, a program gone missing is left out.
func (s Sandbox) bindProgram(args []string, program string, shown, hidden []string, try bool) []string {
	if !filepath.IsAbs(program) {
		return args
	}
	p := filepath.Clean(program)
	for range 40 { // as the kernel's limit on links followed
		visible := (under(p, systemDirs) || under(p, shown)) && !under(p, hidden)
		fi, err := os.Lstat(p)
		switch {
		case err != nil && try:
			return args
		case err != nil || fi.Mode()&os.ModeSymlink == 0:
			if !visible {
				bind := "--ro-bind"
				if try {
					bind = "--ro-bind-try"
				}
				args = append(args, bind, p, p) // a missing agent program: bubblewrap says so
			}
			return args
		}
		target, err := os.Readlink(p)
		if err != nil {
			return args
		}
		if !filepath.IsAbs(target) {
			// Where it leads from its real directory: inside, the
			// directories leading to it are plain ones.
			parent, err := filepath.EvalSymlinks(filepath.Dir(p))
			if err != nil {
				return args
			}
			target = filepath.Join(parent, target)
		}
		if !visible {
			args = append(args, "--symlink", target, p)
		}
		p = target
	}
	return args
}

// hide adds to args what mounts over the broker's paths that shown,
// just mounted, shows (symbolic links resolved), and returns hidden with
// where they are inside.
func (s Sandbox) hide(args, hidden []string, shown string) ([]string, []string) {
	real, err := filepath.EvalSymlinks(shown)
	if err != nil {
		return args, hidden
	}
	var now []string // hidden by this call: what is inside needs nothing more
	for _, h := range byDepth(s.Hide) {
		if !under(h, []string{real}) || under(h, now) {
			continue
		}
		fi, err := os.Stat(h)
		if err != nil {
			continue
		}
		at := filepath.Join(shown, strings.TrimPrefix(h, real))
		if fi.IsDir() {
			args = append(args, "--tmpfs", at)
		} else {
			args = append(args, "--ro-bind", "/dev/null", at) // nodev: it cannot be opened
		}
		now = append(now, h)
		hidden = append(hidden, at)
	}
	return args, hidden
}

// systemHides is what hides the broker's paths in the system
// directories, and where they are.
func (s Sandbox) systemHides() (args, hidden []string) {
	for _, d := range systemDirs {
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			args, hidden = s.hide(args, hidden, d)
		}
	}
	return args, hidden
}

// wrapTerminal returns cmd, a terminal's command of the agent of program
// working in dir, confined as that agent is: the same paths shown, dir
// writable, a session of its own, cmd.Dir (inside dir) its working
// directory, cmd.Env its environment, set inside. Its own program is
// looked up inside the sandbox. The returned command holds an open file
// in ExtraFiles, which whoever starts it closes.
// Its network is the agent's (network, n: see wrap).
func (s Sandbox) wrapTerminal(cmd host.Command, program, dir, network string, n *agentNet, programs, readOnly, readWrite []string) (host.Command, error) {
	bwrap := s.Bwrap
	if found, err := exec.LookPath(bwrap); err == nil {
		bwrap = found // the broker's PATH, as for the agent itself
	}
	s.NoNetwork = network != NetworkHost
	args := s.confine(program, dir, cmd.Env, programs, readOnly, readWrite)
	command, cmdArgs, env := cmd.Path, cmd.Args, cmd.Env
	if n != nil {
		args, command, cmdArgs = n.mount(args, command, cmdArgs)
		env = mergeEnv(env, proxyEnv)
	}
	args = append(append(args, environ(env)...), "--chdir", cmd.Dir)
	f, err := argsFile(args)
	if err != nil {
		return cmd, err
	}
	fd := 3 + len(cmd.ExtraFiles)
	cmd.ExtraFiles = append(slices.Clone(cmd.ExtraFiles), f)
	cmd.Args = append([]string{"--args", fmt.Sprint(fd), "--", command}, cmdArgs...)
	cmd.Path = bwrap
	mark := newSandboxMark()
	cmd.Env = mark.env(bwrapEnv)
	cmd.Leftovers = mark.kill
	return cmd, nil
}

// sandboxMarkVar is a variable bubblewrap's own processes carry, and the
// program they confine does not (its environment is set inside): it finds a sandbox its
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

// base is what every sandboxed process gets, before its own paths: its
// namespaces, with no capabilities and no user namespace of its own to
// gain them in, whoever starts bubblewrap (root included); the system
// directories, read-only, with the broker's paths in them hidden; a
// fresh /proc, /dev and /tmp.
func (s Sandbox) base() []string {
	args := []string{"--unshare-user", "--disable-userns", "--cap-drop", "ALL",
		"--unshare-pid", "--unshare-ipc", "--unshare-cgroup-try", "--die-with-parent", "--new-session"}
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
	hides, _ := s.systemHides()
	return append(args, hides...)
}

// environ is the bubblewrap arguments that give the program inside env
// as its whole environment.
func environ(env []string) []string {
	args := []string{"--clearenv"}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			args = append(args, "--setenv", k, v)
		}
	}
	return args
}

// argsFile is a file holding args for bubblewrap's --args: out of its
// command line, which every user may read, since they hold the agent's
// environment (its API keys).
func argsFile(args []string) (*os.File, error) {
	var b bytes.Buffer
	for _, a := range args {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, fmt.Errorf("sandbox: a NUL byte in %q", a)
		}
		b.WriteString(a)
		b.WriteByte(0)
	}
	fd, err := unix.MemfdCreate("bwrap-args", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	f := os.NewFile(uintptr(fd), "bwrap-args")
	if _, err := f.Write(b.Bytes()); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	return f, nil
}

// closeFiles closes what a wrapped command held open for its process.
func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// byDepth is paths cleaned, shallower ones first, otherwise in order.
func byDepth(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = filepath.Clean(p)
	}
	slices.SortStableFunc(out, func(a, b string) int {
		return strings.Count(a, "/") - strings.Count(b, "/")
	})
	return out
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
		if path == d || strings.HasPrefix(path, d+string(filepath.Separator)) || d == "/" {
			return true
		}
	}
	return false
}

// ErrNoSandbox: agents cannot be sandboxed on this machine as configured.
var ErrNoSandbox = errors.New("agents cannot be sandboxed")

// Check runs a trivial program in the sandbox, as an agent would be run
// (as runAs, if set), and says what to do when that fails: bubblewrap
// missing, or user namespaces refused. It gives up after timeout.
func (s Sandbox) Check(timeout time.Duration, runAs *syscall.Credential) error {
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
	if runAs != nil {
		if err := os.Chown(dir, int(runAs.Uid), int(runAs.Gid)); err != nil {
			return fmt.Errorf("%w: %v", ErrNoSandbox, err)
		}
	}
	network := NetworkHost
	if s.NoNetwork {
		network = NetworkNone
	}
	spec, err := s.wrap(ProcessSpec{Command: truePath, Dir: dir}, "check", "", network, nil, nil, nil, nil)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoSandbox, err)
	}
	defer closeFiles(spec.ExtraFiles)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, spec.Args...)
	cmd.Env, cmd.ExtraFiles = spec.Env, spec.ExtraFiles
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: runAs}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: bubblewrap could not start a program (%v: %s); it needs user namespaces (sysctl kernel.unprivileged_userns_clone=1, and under systemd a unit that does not restrict them), or set agent.sandbox = \"none\" to run agents unconfined",
			ErrNoSandbox, err, strings.TrimSpace(string(out)))
	}
	return nil
}
