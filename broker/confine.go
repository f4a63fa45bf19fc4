package broker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"acpbroker/acp"
	"acpbroker/config"
	"acpbroker/pool"
	"acpbroker/workspace"
)

// brokerPath is one of the broker's own files, which no agent may see.
type brokerPath struct {
	what string // how errors name it: "state.dir"
	path string // absolute, symbolic links resolved
	// near marks the directory a file of the broker is in: hidden
	// wherever a path shown holds it, but a path inside may be shown.
	near bool
}

// brokerPaths are the broker's own files: its state directory (with its
// socket), its configuration file and every file a secret is read from
// (the chat platforms' tokens and secrets, each API token's token_file,
// the cluster's password file, NKey seed and TLS key),
// and the directories those are in (but a system directory or /: there,
// the file alone).
func brokerPaths(cfg *config.Config) []brokerPath {
	var out []brokerPath
	add := func(what, p string, withDir bool) {
		if p == "" {
			return
		}
		real := resolved(p)
		out = append(out, brokerPath{what: what, path: real})
		if dir := filepath.Dir(real); withDir && dir != "/" && !isSystemDir(dir) {
			out = append(out, brokerPath{what: "the directory of " + what, path: dir, near: true})
		}
	}
	add("state.dir", cfg.State.Dir, false)
	add("the configuration file", cfg.Path, true)
	add("discord.token_file", cfg.Discord.TokenFile, true)
	add("slack.bot_token_file", cfg.Slack.BotTokenFile, true)
	add("slack.app_token_file", cfg.Slack.AppTokenFile, true)
	add("slack.signing_secret_file", cfg.Slack.SigningSecretFile, true)
	for i, t := range cfg.API.Tokens {
		add(fmt.Sprintf("api.tokens[%d].token_file", i), t.TokenFile, true)
	}
	// The cluster's credentials: with them a process could speak on NATS
	// for a host or a broker.
	add("cluster.password_file", cfg.Cluster.PasswordFile, true)
	add("cluster.nkey_seed_file", cfg.Cluster.NKeySeedFile, true)
	add("cluster.tls_key", cfg.Cluster.TLSKey, true)
	return out
}

// hidden are the broker's own files, which no agent may see: wherever a
// path shown to an agent holds one, it is hidden there (checkSandbox
// refuses what hiding cannot keep).
func hidden(cfg *config.Config) []string {
	var out []string
	for _, b := range brokerPaths(cfg) {
		out = append(out, b.path)
	}
	return out
}

// checkTokenFilesHidden checks, for a reload, that each API token's
// token_file (which a reload may add) is hidden by hidden, what the
// running broker's sandbox hides since its start (hidden's then): a
// new file elsewhere would be shown to the agents it starts until a
// restart, so the reload is refused, naming the key.
func checkTokenFilesHidden(cfg *config.Config, hide []string) []error {
	var problems []error
	for _, b := range brokerPaths(cfg) {
		if b.near || !strings.HasPrefix(b.what, "api.tokens[") {
			continue
		}
		if !slices.ContainsFunc(hide, func(h string) bool { return inside(b.path, h) }) {
			problems = append(problems, fmt.Errorf("%s = %q is not hidden from agents until a restart: the running broker hides the files it started with; restart it to take this one, or keep the file beside one of those",
				b.what, b.path))
		}
	}
	return problems
}

// gitDir is where a worktree profile's repository keeps its objects and
// its worktrees' records, which its agents are shown writable:
// repo/.git, or repo itself when it is bare (see workspace.GitDir; a
// repository it refuses is reported by checkProfiles).
func gitDir(p *config.Profile) string {
	if dir, err := workspace.GitDir(p.Repo); err == nil {
		return dir
	}
	if abs, err := filepath.Abs(p.Repo); err == nil {
		return abs
	}
	return p.Repo
}

// isSystemDir reports whether dir is one of the directories every
// sandboxed agent is shown.
func isSystemDir(dir string) bool {
	for _, d := range pool.SystemDirs() {
		if resolved(d) == dir || d == dir {
			return true
		}
	}
	return false
}

// resolved is p absolute, with its symbolic links resolved as far as it
// exists.
func resolved(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		return real
	}
	// Not there (yet): resolve what exists of it.
	dir, base := filepath.Split(abs)
	if dir == "/" || dir == "" {
		return abs
	}
	return filepath.Join(resolved(filepath.Clean(dir)), base)
}

// inside reports whether path is dir or inside it.
func inside(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+string(filepath.Separator))
}

// shownPath is a path a profile's agents are shown, with the key that
// shows it.
type shownPath struct {
	key, path string
	// writable: the agent may write there; workspace: and the broker
	// serves its file requests there; program: a program's file.
	writable, workspace, program bool
}

// shownPaths lists what the agents of profile p are shown besides the
// system directories and an empty HOME.
func shownPaths(cfg *config.Config, p *config.Profile) []shownPath {
	key := func(field string) string { return keyWritten(cfg, p, field) }
	var out []shownPath
	for _, d := range p.SandboxRO {
		out = append(out, shownPath{key: key("sandbox_ro"), path: d})
	}
	for _, d := range p.SandboxRW {
		out = append(out, shownPath{key: key("sandbox_rw"), path: d, writable: true})
	}
	out = append(out, shownPath{key: key("cwd"), path: p.Cwd, writable: true, workspace: true})
	if p.Workspace == "worktree" && p.Repo != "" {
		out = append(out, shownPath{key: key("repo"), path: gitDir(p), writable: true})
	}
	out = append(out, shownPath{key: key("command"), path: p.Command, program: true})
	for _, s := range p.MCPServers {
		if s.Transport() == acp.MCPStdio && filepath.IsAbs(s.Command) {
			out = append(out, shownPath{key: key("mcp_servers"), path: s.Command, program: true})
		}
	}
	return out
}

// keyWritten names a profile's key where it is written: agents.NAME.X
// when its section sets it, else agent.X.
func keyWritten(cfg *config.Config, p *config.Profile, field string) string {
	if k := "agents." + p.Name + "." + field; cfg.Written(k) {
		return k
	}
	return "agent." + field
}

// checkSandbox checks what agents are shown against what the broker
// keeps from them: a broker started as root names the user agents run
// as; no path shown writable, no workspace (whose files the broker
// itself serves) and no program shows one of the broker's files, nor is
// inside its state directory; a path shown read-only that holds one is
// fine (it is hidden there) unless it is inside one; and the agents'
// user can reach every path it is shown. Each problem names both keys.
func checkSandbox(cfg *config.Config) []error {
	var problems []error
	bwrap := cfg.Agent.Sandbox == "bwrap"
	switch {
	case bwrap && cfg.Agent.RunAs == nil && os.Getuid() == 0:
		problems = append(problems, errors.New(`agent.run_as_user is required when the broker runs as root with agent.sandbox = "bwrap": `+
			`agents would be root outside their sandbox (reading what only root may, /etc/shadow say); `+
			`name an unprivileged user for them (e.g. "nobody"), or run the broker as one`))
	case bwrap && cfg.Agent.RunAs != nil && cfg.Agent.RunAs.Uid == 0:
		problems = append(problems, fmt.Errorf(`agent.run_as_user = %q is root: agents would be root outside their sandbox; name an unprivileged user (e.g. "nobody")`,
			cfg.Agent.RunAsUser))
	}
	mine := brokerPaths(cfg)
	said := map[string]bool{}
	say := func(err error) {
		if !said[err.Error()] {
			said[err.Error()] = true
			problems = append(problems, err)
		}
	}
	for _, name := range sortedKeys(cfg.Profiles) {
		p := cfg.Profiles[name]
		for _, s := range shownPaths(cfg, p) {
			if !bwrap && !s.workspace {
				continue // only the workspace is served by the broker itself
			}
			real := resolved(s.path)
			for _, b := range mine {
				switch {
				case b.near:
					if real == b.path && !s.writable && !s.program {
						say(fmt.Errorf("%s = %q is %s, which agents are not shown", s.key, s.path, b.what))
					}
				case inside(real, b.path) && real == b.path:
					say(fmt.Errorf("%s = %q is %s", s.key, s.path, b.what))
				case inside(real, b.path):
					say(fmt.Errorf("%s = %q is inside %s %q", s.key, s.path, b.what, b.path))
				case s.workspace && inside(b.path, real):
					say(fmt.Errorf("%s = %q shows %s %q: the broker serves its agents' file requests there", s.key, s.path, b.what, b.path))
				case s.writable && inside(b.path, real):
					say(fmt.Errorf("%s = %q shows %s %q: an agent may write around it there", s.key, s.path, b.what, b.path))
				}
			}
			if bwrap && cfg.Agent.RunAs != nil {
				if err := reachable(s.path, cfg.Agent.RunAs, s.program); err != nil {
					say(fmt.Errorf("%s = %q: agent.run_as_user %q cannot reach it (%v); bubblewrap runs as that user", s.key, s.path, cfg.Agent.RunAsUser, err))
				}
			}
		}
	}
	return problems
}

// reachable says why the user of cred could not reach path (nil if it
// can, or if path does not exist): each directory on the way must let
// it search, path too if it is a directory, and a program must be
// executable by it. By mode bits: access control lists are not read.
func reachable(path string, cred *syscall.Credential, program bool) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	fi, err := os.Stat(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	for _, p := range []string{abs, resolved(abs)} {
		for dir := filepath.Dir(p); ; dir = filepath.Dir(dir) {
			if err := permits(dir, cred, 0o1); err != nil {
				return err
			}
			if dir == "/" {
				break
			}
		}
	}
	switch {
	case err != nil:
		return err
	case fi.IsDir():
		return permits(abs, cred, 0o1)
	case program:
		return permits(abs, cred, 0o1)
	}
	return nil
}

// permits says why the user of cred lacks the permission bit want
// (0o1: execute or search) on path, or nil.
func permits(path string, cred *syscall.Credential, want os.FileMode) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	mode := fi.Mode().Perm()
	var bits os.FileMode
	switch {
	case st.Uid == cred.Uid:
		bits = mode >> 6
	case st.Gid == cred.Gid:
		bits = mode >> 3
	default:
		bits = mode
	}
	if bits&want == 0 {
		return fmt.Errorf("%s is mode %04o, owned by uid %d gid %d", path, mode, st.Uid, st.Gid)
	}
	return nil
}

// checkWritable makes sure a directory exists and the broker can write
// there; the error names key.
func checkWritable(key, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%s = %q: %w", key, dir, err)
	}
	f, err := os.CreateTemp(dir, ".write-check-*")
	if err != nil {
		return fmt.Errorf("%s = %q is not writable: %w", key, dir, err)
	}
	name := f.Name()
	f.Close()
	os.Remove(name)
	return nil
}
