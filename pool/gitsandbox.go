package pool

import (
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
	git := s
	git.NoNetwork = true
	args := append([]string{s.Bwrap}, git.base()...)
	args = append(args, "--unshare-uts")
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
	args = append(append(args, "--chdir", dir), environ(env)...)
	return append(append(args, "--"), argv...)
}
