package faults

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"acpbroker/internal/agenttest"
	"acpbroker/internal/brokertest"
)

// A hostile agent tries to get out of the default sandbox through the
// real broker. Each test plants a marker outside (a directory the agent
// must not see, written to by code the agent controls, should it run
// outside) and checks from the test process that nothing outside ran,
// was read or was written.

// markers is a directory outside every sandbox that any user may reach
// and write in: what code of the agent writes there ran outside.
func markers(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	agenttest.Traversable(t, dir)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// noMarks fails the test if anything was written in dir.
func noMarks(t *testing.T, dir, what string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		t.Errorf("%s ran outside the sandbox: it wrote %s (%q)", what, e.Name(), b)
	}
}

// markC is C that, loaded into a process, writes a marker named for how
// it got there into MARKERS (a directory only the outside has) and says
// on stderr which program it ran in.
const markC = `
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static void mark(const char *how) {
	char exe[512] = "?", path[1024];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n >= 0) exe[n] = 0;
	snprintf(path, sizeof path, "%s/%s-%d", MARKERS, how, (int)getpid());
	int fd = open(path, O_WRONLY | O_CREAT, 0644);
	if (fd >= 0) { write(fd, exe, strlen(exe)); close(fd); }
	fprintf(stderr, "%s ran in %s\n", how, exe);
}
__attribute__((constructor)) static void init(void) { mark(HOW); }
`

// buildLib compiles markC with more C into a shared library at path.
func buildLib(t *testing.T, path, how, marks, more string) {
	t.Helper()
	src := path + ".c"
	if err := os.WriteFile(src, []byte(markC+more), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", path, src,
		"-DHOW="+strconv.Quote(how), "-DMARKERS="+strconv.Quote(marks)).CombinedOutput()
	if err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	os.Chmod(path, 0o755)
}

// libcapStubs are C definitions of what bubblewrap takes from its
// libraries without a symbol version (libcap's functions): a library
// planted in their place must have them, or the loader stops before
// running it.
func libcapStubs(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("nm", "-D", "--undefined-only", "/usr/bin/bwrap").Output()
	if err != nil {
		t.Skipf("nm: %v", err)
	}
	var b strings.Builder
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "U" && !strings.Contains(f[1], "@") {
			fmt.Fprintf(&b, "int %s(void) { return -1; }\n", f[1])
		}
	}
	return b.String()
}

// A terminal's environment cannot run code outside the sandbox: the
// loader variables a hostile agent names in terminal/create (a library
// to preload, an audit library, a library path with a planted libcap,
// a gconv module path, the loader's debug output) reach its command
// inside, and nothing of bubblewrap outside, which starts with an
// environment of the broker's choosing.
func TestEscape_ATerminalsLoaderVariablesRunNothingOutside(t *testing.T) {
	needBwrap(t)
	w := newWorld(t, setup{})
	w.start()
	thread := w.mention(alice, "env")
	w.awaitAnswers(thread, 1)
	ws := filepath.Join(w.Work, thread)
	n := 1
	terminal := func(t *testing.T, env, cmd string) string {
		t.Helper()
		w.Discord.Post(thread, alice, "terminal-env "+env+" -- "+cmd)
		n++
		return w.awaitAnswers(thread, n)[n-1].Text
	}

	t.Run("LD_DEBUG_OUTPUT", func(t *testing.T) {
		marks := markers(t)
		got := terminal(t, "LD_DEBUG=libs LD_DEBUG_OUTPUT="+filepath.Join(marks, "loader"), "/usr/bin/true")
		if !strings.Contains(got, `exit: {"exitCode":0}`) {
			t.Errorf("the command answered %q", got)
		}
		noMarks(t, marks, "the loader's debug output")
	})

	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc is not installed: the variables that load libraries are not tried")
	}
	t.Run("LD_PRELOAD", func(t *testing.T) {
		marks := markers(t)
		lib := filepath.Join(ws, "preload.so")
		buildLib(t, lib, "preload", marks, "")
		got := terminal(t, "LD_PRELOAD="+lib, "/usr/bin/true")
		if !strings.Contains(got, "preload ran in /usr/bin/true") {
			t.Errorf("the preloaded library did not run in the command inside: %q", got)
		}
		noMarks(t, marks, "a library in LD_PRELOAD")
	})
	t.Run("LD_AUDIT", func(t *testing.T) {
		marks := markers(t)
		lib := filepath.Join(ws, "audit.so")
		buildLib(t, lib, "audit", marks, "unsigned int la_version(unsigned int v) { mark(\"la_version\"); return v; }\n")
		got := terminal(t, "LD_AUDIT="+lib, "/usr/bin/true")
		if !strings.Contains(got, "ran in /usr/bin/true") {
			t.Errorf("the audit library did not run in the command inside: %q", got)
		}
		noMarks(t, marks, "a library in LD_AUDIT")
	})
	t.Run("LD_LIBRARY_PATH", func(t *testing.T) {
		marks := markers(t)
		dir := filepath.Join(ws, "lib")
		os.MkdirAll(dir, 0o755)
		buildLib(t, filepath.Join(dir, "libcap.so.2"), "libpath", marks, libcapStubs(t))
		// Inside, bubblewrap itself is a program that loads libcap.
		got := terminal(t, "LD_LIBRARY_PATH="+dir, "/usr/bin/bwrap --version")
		if !strings.Contains(got, "libpath ran in /usr/bin/bwrap") {
			t.Errorf("the planted libcap did not run in the command inside: %q", got)
		}
		noMarks(t, marks, "a libcap planted in LD_LIBRARY_PATH")
	})
	t.Run("GCONV_PATH", func(t *testing.T) {
		marks := markers(t)
		dir := filepath.Join(ws, "gconv")
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "gconv-modules"), []byte("module EVIL// INTERNAL evil 1\nmodule INTERNAL EVIL// evil 1\n"), 0o644)
		buildLib(t, filepath.Join(dir, "evil.so"), "gconv", marks,
			"int gconv_init(void *s) { return 0; }\nint gconv(void) { return 0; }\nvoid gconv_end(void *s) {}\n")
		got := terminal(t, "GCONV_PATH="+dir, "/usr/bin/iconv -f EVIL -t UTF-8 /dev/null")
		if !strings.Contains(got, "gconv ran in /usr/bin/iconv") {
			t.Errorf("the gconv module did not run in the command inside: %q", got)
		}
		noMarks(t, marks, "a gconv module in GCONV_PATH")
	})
}

// An agent has no capabilities, whoever started the broker, and is not
// root outside its sandbox (the broker run as root runs it as
// agent.run_as_user): it can neither unmount what hides the broker's
// files from it, nor remount read-write what it is shown read-only,
// nor make a user namespace to get capabilities in.
func TestEscape_AnAgentHasNoCapabilitiesAndCannotRemount(t *testing.T) {
	needBwrap(t)
	w := newWorld(t, setup{})
	// Shown read-only: the directory holding the World's, whose
	// configuration and state are hidden inside it.
	shown := filepath.Dir(w.Dir)
	w.Conf = w.Conf.With(settings{"agent.sandbox_ro": []string{shown}})
	w.start()
	thread := w.mention(alice, "run /bin/cat /proc/self/status")
	status := w.awaitAnswers(thread, 1)[0].Text
	for _, field := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		if !strings.Contains(status, field+":\t0000000000000000") {
			t.Errorf("the agent's %s is not empty:\n%s", field, status)
		}
	}
	pids := w.AgentPIDs()
	if len(pids) == 0 {
		t.Fatal("no agent process found")
	}
	for _, pid := range pids {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		uid := ""
		for _, l := range strings.Split(string(st), "\n") {
			if rest, ok := strings.CutPrefix(l, "Uid:"); ok {
				uid = strings.Fields(rest)[1] // the effective uid
			}
		}
		if uid == "0" || (os.Getuid() == 0 && uid != strconv.Itoa(agenttest.Nobody)) {
			t.Errorf("outside its sandbox the agent (pid %d) has uid %s", pid, uid)
		}
	}

	config := filepath.Join(w.Dir, "broker.toml")
	planted := filepath.Join(shown, "planted-by-agent")
	etc := "/etc/planted-by-agent-" + strconv.Itoa(os.Getpid())
	n := 1
	for _, cmd := range []string{
		"/bin/umount " + w.Dir,
		"/bin/umount -l " + w.Dir,
		"/bin/mount -o remount,rw " + shown,
		"/bin/mount -o remount,rw /etc",
		"/usr/bin/unshare -Ur /bin/umount " + w.Dir,
	} {
		w.Discord.Post(thread, alice, "run "+cmd)
		n++
		if got := w.awaitAnswers(thread, n)[n-1].Text; strings.Contains(got, "exit: <nil>") {
			t.Errorf("%s succeeded:\n%s", cmd, got)
		}
	}
	probes := []string{"r:" + config, "r:" + filepath.Join(w.Dir, "state", "state.db"), "w:" + planted, "w:" + etc}
	w.Discord.Post(thread, alice, "probe "+strings.Join(probes, " "))
	got := w.awaitAnswers(thread, n+1)[n].Text
	for _, p := range probes {
		if r := probeLine(t, got, p); !strings.HasPrefix(r, "denied") {
			t.Errorf("after the attempts, %s: %s", p, r)
		}
	}
	for _, p := range []string{planted, etc} {
		if _, err := os.Stat(p); err == nil {
			os.Remove(p)
			t.Errorf("the agent wrote %s outside its sandbox", p)
		}
	}
}

// An agent's program kept beside the broker's configuration and state
// is shown as that file alone: listing its program's directory shows
// neither, the configuration (and its token) cannot be read, and the
// broker's socket cannot be reached.
func TestEscape_AProgramKeptBesideTheStateShowsNeither(t *testing.T) {
	needBwrap(t)
	w := newWorld(t, setup{})
	program := filepath.Join(w.Dir, "agent")
	copyFile(t, w.Bins.Agent, program)
	w.Conf = w.Conf.With(settings{"agent.command": program})
	w.start()
	socket := filepath.Join(w.Dir, "state", "broker.sock")
	if _, err := os.Stat(socket); err != nil {
		t.Fatalf("no broker socket to try: %v", err)
	}
	thread := w.mention(alice, "run /bin/ls -a "+w.Dir)
	got := w.awaitAnswers(thread, 1)[0].Text
	if strings.Contains(got, "broker.toml") || strings.Contains(got, "state") || !strings.Contains(got, "agent") {
		t.Errorf("the agent lists its program's directory as:\n%s", got)
	}
	probes := []string{"r:" + filepath.Join(w.Dir, "broker.toml"), "r:" + filepath.Join(w.Dir, "state", "state.db"), "unix:" + socket}
	w.Discord.Post(thread, alice, "probe "+strings.Join(probes, " "))
	got = w.awaitAnswers(thread, 2)[1].Text
	for _, p := range probes {
		if r := probeLine(t, got, p); !strings.HasPrefix(r, "denied") {
			t.Errorf("%s: %s", p, r)
		}
	}
	if strings.Contains(got, brokertest.Token) {
		t.Errorf("the agent read the token: %s", got)
	}
}

// An agent's program kept in /tmp does not bring the host's /tmp back:
// a file there cannot be read, and what the agent writes there stays in
// its own.
func TestEscape_AProgramInTmpDoesNotShowTheHostsTmp(t *testing.T) {
	needBwrap(t)
	w := newWorld(t, setup{})
	tag := fmt.Sprintf("escape-%d-%s", os.Getpid(), filepath.Base(w.Dir))
	program := filepath.Join(os.TempDir(), tag+"-agent")
	secret := filepath.Join(os.TempDir(), tag+"-secret")
	planted := filepath.Join(os.TempDir(), tag+"-planted")
	t.Cleanup(func() { os.Remove(program); os.Remove(secret); os.Remove(planted) })
	copyFile(t, w.Bins.Agent, program)
	os.WriteFile(secret, []byte("the host's"), 0o644)
	w.Conf = w.Conf.With(settings{"agent.command": program})
	w.start()
	probes := []string{"r:" + secret, "w:" + planted}
	thread := w.mention(alice, "probe "+strings.Join(probes, " "))
	got := w.awaitAnswers(thread, 1)[0].Text
	if r := probeLine(t, got, probes[0]); !strings.HasPrefix(r, "denied") {
		t.Errorf("a file in the host's /tmp: %s", r)
	}
	if _, err := os.Stat(planted); err == nil {
		t.Error("the agent wrote into the host's /tmp")
	}
}

// An agent's program kept under its HOME (~/.local/bin) starts: the
// empty tmpfs HOME gets is mounted before the program's file.
func TestEscape_AProgramUnderHomeStarts(t *testing.T) {
	needBwrap(t)
	w := newWorld(t, setup{})
	home := filepath.Join(w.Dir, "home")
	program := filepath.Join(home, ".local", "bin", "agent")
	os.MkdirAll(filepath.Dir(program), 0o755)
	copyFile(t, w.Bins.Agent, program)
	w.Conf = w.Conf.With(settings{"agent.command": program, "agent.env": []string{"HOME=" + home}})
	w.start()
	thread := w.mention(alice, "hello from home")
	if got := w.awaitAnswers(thread, 1)[0]; !strings.Contains(got.Text, "You said: hello from home") {
		t.Fatalf("the agent under HOME answered %q / %q", got.Text, got.Footer)
	}
}

// The broker's socket answers `broker audit` and refuses the same client
// run in a user namespace of its own, as a sandboxed agent is, even
// though it reaches the socket.
func TestEscape_TheBrokersSocketRefusesASandboxedPeer(t *testing.T) {
	needBwrap(t)
	w := newWorld(t, setup{})
	w.start()
	config := filepath.Join(w.Dir, "broker.toml")
	audit := func(sandboxed bool) (int, string) {
		args := []string{w.Bins.Broker, "audit", "--config", config}
		if sandboxed {
			args = append([]string{"bwrap", "--unshare-user", "--dev-bind", "/", "/", "--"}, args...)
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	if code, out := audit(false); code != 0 {
		t.Fatalf("broker audit: status %d, %s", code, out)
	}
	if code, out := audit(true); code == 0 || !strings.Contains(out, "refused: the broker answers no one in a sandbox") {
		t.Fatalf("broker audit in a user namespace: status %d, %s", code, out)
	}
}

// What the sandbox cannot keep is refused before the broker starts,
// naming both keys: root without a user for its agents; a path shown
// writable that holds the state directory; a workspace holding the
// configuration.
func TestEscape_ConfigurationsTheSandboxCannotKeepAreRefused(t *testing.T) {
	needBwrap(t)
	w := newWorld(t, setup{})
	state := filepath.Join(w.Dir, "state")
	os.MkdirAll(state, 0o755)
	cases := []struct {
		name   string
		change settings
		reason string
	}{
		{"a writable path showing the state", settings{"agent.sandbox_rw": []string{w.Dir}},
			fmt.Sprintf("agent.sandbox_rw = %q shows state.dir %q", w.Dir, state)},
		{"a workspace holding the configuration", settings{"agent.cwd": w.Dir, "agent.per_thread_dir": false},
			fmt.Sprintf("agent.cwd = %q shows the configuration file %q", w.Dir, filepath.Join(w.Dir, "broker.toml"))},
	}
	if os.Getuid() == 0 {
		cases = append(cases, struct {
			name   string
			change settings
			reason string
		}{"root without agent.run_as_user", settings{"agent.run_as_user": ""}, `agent.run_as_user is required when the broker runs as root with agent.sandbox = "bwrap"`})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conf := w.Conf
			w.Conf = w.Conf.With(tc.change)
			path := w.writeConfig()
			w.Conf = conf
			for _, args := range [][]string{{"--config", path}, {"check-config", "--config", path}} {
				code, stderr := runBrokerCommand(t, nil, args...)
				if code != 2 || !strings.Contains(stderr, tc.reason) {
					t.Errorf("broker %s: exit status %d, stderr %q; want 2 and %q", strings.Join(args, " "), code, stderr, tc.reason)
				}
			}
		})
	}
	if st := w.Srv.Stats(); st.Connections != 0 {
		t.Errorf("the fake Discord saw %d gateway connection(s)", st.Connections)
	}
}

// copyFile copies an executable.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o755); err != nil {
		t.Fatal(err)
	}
}
