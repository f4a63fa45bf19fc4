package pool

import (
	"os"
	"path/filepath"
	"strings"
)

// ConfineGit returns the bubblewrap command line that runs argv, a git
// command of the broker's on a repository its agents can write, at least
// as confined as an agent: namespaces of its own (user, with no
// capabilities; PID; IPC; UTS; cgroup; network, so no network at all), a
// session of its own, dying with the broker; the system directories
// read-only (less Hide), a private /tmp, and of everything else only
// readOnly and writable (which must exist), each at its own place; git's
// own program is shown if no system directory holds it. env is its whole
// environment, set inside; a HOME in it other than a device is an empty
// tmpfs. dir is its working directory. The Sandbox must be enabled; the
// caller starts the command as the agents' user, if they have one.
func (s Sandbox) ConfineGit(argv, env []string, dir string, readOnly, writable []string) []string {
	args := []string{s.Bwrap,
		"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--unshare-cgroup-try",
		"--cap-drop", "ALL", "--die-with-parent", "--new-session"}
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
	for _, kv := range env {
		if home, ok := strings.CutPrefix(kv, "HOME="); ok && filepath.IsAbs(home) && home != "/" &&
			!under(home, systemDirs) && !under(home, []string{"/dev", "/proc"}) {
			args = append(args, "--tmpfs", home)
		}
	}
	if prog := argv[0]; filepath.IsAbs(prog) && !under(prog, systemDirs) {
		args = append(args, "--ro-bind", prog, prog)
	}
	for _, p := range readOnly {
		args = append(args, "--ro-bind", p, p)
	}
	for _, p := range writable {
		args = append(args, "--bind", p, p)
	}
	args = append(args, "--chdir", dir, "--clearenv")
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			args = append(args, "--setenv", k, v)
		}
	}
	return append(append(args, "--"), argv...)
}
