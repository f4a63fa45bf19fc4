package main

import (
	"bufio"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// serviceUser stands for the service's user in a test of the install:
// an unprivileged user and group of this machine.
type serviceUser struct {
	name, group string
	uid, gid    uint32
}

func lookupServiceUser(t *testing.T, name, group string) serviceUser {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		t.Skipf("no user %s to stand for the service's: %v", name, err)
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		t.Skipf("no group %s to stand for the service's: %v", group, err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(g.Gid, 10, 32)
	return serviceUser{name: name, group: group, uid: uint32(uid), gid: uint32(gid)}
}

// credential runs a process as the user, with only its own group, as
// systemd's User= and Group= do.
func (u serviceUser) credential() *syscall.Credential {
	return &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: []uint32{u.gid}}
}

// readmeServiceCommands are the shell commands of README.md's "Running
// as a service" block, comments cut, continuation lines joined, and
// `a && b` split.
func readmeServiceCommands(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Running as a service\n")
	if !ok {
		t.Fatal(`README.md has no "Running as a service" section`)
	}
	_, block, ok := strings.Cut(section, "\n```sh\n")
	if !ok {
		t.Fatal(`README.md's "Running as a service" has no sh block`)
	}
	block, _, _ = strings.Cut(block, "\n```")
	var cmds []string
	pending := ""
	sc := bufio.NewScanner(strings.NewReader(block))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		line = strings.TrimSpace(line)
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			pending += cont + " "
			continue
		}
		line, pending = pending+line, ""
		for _, c := range strings.Split(line, "&&") {
			if c = strings.TrimSpace(c); c != "" {
				cmds = append(cmds, c)
			}
		}
	}
	return cmds
}

// unitSetting is the value of key in packaging/broker.service.
func unitSetting(t *testing.T, key string) string {
	t.Helper()
	b, err := os.ReadFile("../../packaging/broker.service")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + `=(.*)$`).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatalf("packaging/broker.service has no %s=", key)
	}
	return strings.TrimSpace(m[1])
}

// The README's install gives the service's user what it needs and no
// more: its own install commands, run as written (paths moved under a
// temporary root, the service's user and group stood for by nobody and
// nogroup), leave a configuration that `broker check-config`, run as
// that user with the environment systemd gives it from broker.env,
// finds valid; and broker.env itself that user cannot read. The README
// creates the group the unit runs as, gives the configuration to it,
// and checks the configuration as the service will run.
func TestService_TheREADMEsInstallLetsTheServiceUserReadItsConfiguration(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to install files for another user and run as it")
	}
	svc := lookupServiceUser(t, "nobody", "nogroup")
	unitUser, unitGroup := unitSetting(t, "User"), unitSetting(t, "Group")
	cmds := readmeServiceCommands(t)

	// What the README says of the service's user, beyond the commands
	// the test runs.
	var installs []string
	for _, c := range cmds {
		c = strings.TrimPrefix(c, "sudo ")
		f := strings.Fields(c)
		switch {
		case f[0] == "install":
			installs = append(installs, c)
		case f[0] == "useradd":
			if f[len(f)-1] != unitUser || unitGroup == unitUser && !slices.Contains(f, "--user-group") {
				t.Errorf("the README's %q does not create the unit's user %s and group %s", c, unitUser, unitGroup)
			}
		case strings.Contains(c, "check-config"):
			for _, want := range []string{"User=" + unitUser, "EnvironmentFile=" + unitSetting(t, "EnvironmentFile")} {
				if !strings.Contains(c, want) {
					t.Errorf("the README checks the configuration otherwise than the service runs: %q lacks %s", c, want)
				}
			}
		}
	}

	root, err := os.MkdirTemp("", "install-root-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	state := filepath.Join(root, "var/lib", unitUser)
	for _, d := range []string{"etc", "usr/local/bin", "etc/systemd/system", "var/lib"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(root, 0o755); err != nil { // MkdirTemp's is 0700
		t.Fatal(err)
	}
	// What systemd makes for the unit: StateDirectory=, StateDirectoryMode=.
	mode, _ := strconv.ParseUint(unitSetting(t, "StateDirectoryMode"), 8, 32)
	if err := os.Mkdir(state, os.FileMode(mode)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(state, int(svc.uid), int(svc.gid)); err != nil {
		t.Fatal(err)
	}
	// The checkout the commands run in: the files they install, and the
	// broker built as acp-broker.
	src := t.TempDir()
	for _, f := range []string{"config.example.toml", "packaging/broker.env.example", "packaging/broker.service"} {
		b, err := os.ReadFile(filepath.Join("../..", f))
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Join(src, filepath.Dir(f)), 0o755)
		if err := os.WriteFile(filepath.Join(src, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("cp", brokerBin(t), filepath.Join(src, "acp-broker")).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}

	for _, c := range installs {
		var args []string
		f := strings.Fields(c)
		for i, w := range f[1:] {
			switch {
			case strings.HasPrefix(w, "/"):
				w = root + w
			case f[i] == "-g" && w == unitGroup:
				w = svc.group
			case f[i] == "-o" && w == unitUser:
				w = svc.name
			}
			args = append(args, w)
		}
		cmd := exec.Command("install", args...)
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("the README's %q (as install %s): %v: %s", c, strings.Join(args, " "), err, out)
		}
	}
	bin := filepath.Join(root, "usr/local/bin/acp-broker")
	config := filepath.Join(root, "etc", unitUser, "broker.toml")
	envFile := filepath.Join(root, unitSetting(t, "EnvironmentFile"))
	for _, p := range []string{bin, config, envFile} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("the README's install commands did not install %s: %v", p, err)
		}
	}

	// "then edit": what the README says to set, written over the
	// installed files, which keep their owners and modes.
	edit := func(path string, edits ...string) {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for i := 0; i < len(edits); i += 2 {
			if !strings.Contains(text, edits[i]) {
				t.Fatalf("%s has no %q to edit", path, edits[i])
			}
			text = strings.Replace(text, edits[i], edits[i+1], 1)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(text); err != nil {
			t.Fatal(err)
		}
	}
	// The agent: the fake one, installed where the service can run it.
	agent := filepath.Join(root, "usr/local/bin/agent")
	if out, err := exec.Command("install", "-m", "0755", fakeAgent, agent).CombinedOutput(); err != nil {
		t.Fatalf("install the agent: %v: %s", err, out)
	}
	edit(config,
		`platform = "console"`, `platform = "discord"`,
		"\ncommand = \"./bin/demo-agent\"", "\ncommand = "+strconv.Quote(agent),
		"allowed_channels = []", `allowed_channels = ["100200300"]`,
		`dir = "./state"`, "dir = "+strconv.Quote(filepath.Join(state, "state")),
		`cwd = "./work"`, "cwd = "+strconv.Quote(filepath.Join(state, "work")))
	edit(envFile, "BROKER_DISCORD_TOKEN=\n", "BROKER_DISCORD_TOKEN=install-test-token\n")

	// systemd reads broker.env, as root, into the service's environment.
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + state}
	b, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			env = append(env, line)
		}
	}
	asService := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(name, args...)
		cmd.Env = env
		cmd.Dir = state // WorkingDirectory=
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: svc.credential()}
		return cmd
	}
	out, err := asService(bin, "check-config", "--config", config).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "configuration is valid") {
		t.Fatalf("check-config as the service's user: %v\n%s", err, out)
	}
	if out, err := asService("cat", envFile).CombinedOutput(); err == nil {
		t.Errorf("the service's user can read broker.env: %s", out)
	}
	if out, err := asService("sh", "-c", "echo x >> "+config).CombinedOutput(); err == nil {
		t.Errorf("the service's user can change its own configuration: %s", out)
	}
}
