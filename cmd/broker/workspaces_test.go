package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"acpbroker/internal/agenttest"
)

// gitRepo makes a repository with one commit on main.
func gitRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "first"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

// check-config runs git for a worktree profile and names the profile's
// key that is wrong.
func TestCheckConfig_AWorktreeProfileIsCheckedWithGit(t *testing.T) {
	repo, dir := gitRepo(t), t.TempDir()
	for _, tc := range []struct{ name, keys, want string }{
		{"good", "repo = \"" + repo + "\"\nbase = \"main\"", ""},
		{"unknown base", "repo = \"" + repo + "\"\nbase = \"no-such\"", `agents.rev.base = "no-such": "no-such" is not a commit`},
		{"not a repository", "repo = \"" + dir + "\"", `agents.rev.repo = "` + dir + `": ` + dir + ` is not a git repository`},
	} {
		config := filepath.Join(t.TempDir(), "b.toml")
		text := "[agent]\ncommand = \"" + fakeAgent + "\"\ncwd = \"" + t.TempDir() + "\"\n[state]\ndir = \"" + t.TempDir() + "\"\n" +
			"[agents]\ndefault = \"rev\"\n[agents.rev]\nworkspace = \"worktree\"\n" + tc.keys + "\n"
		os.WriteFile(config, []byte(text), 0o600)
		var out bytes.Buffer
		code := run(context.Background(), []string{"check-config", "--config", config}, []string{"BROKER_AGENT_SANDBOX=none", "PATH=" + os.Getenv("PATH")}, nil, &out, &out)
		switch {
		case tc.want == "" && code != 0:
			t.Errorf("%s: check-config exited %d: %s", tc.name, code, out.String())
		case tc.want != "" && (code != 2 || !strings.Contains(out.String(), tc.want)):
			t.Errorf("%s: check-config exited %d saying %q; want 2 and %q", tc.name, code, out.String(), tc.want)
		}
	}
}

// A reload is checked as start is: a worktree profile's repo changed to
// a directory that is no repository is refused with the key named, and
// nothing of that configuration applies, not even its good changes.
func TestRun_AReloadIsCheckedWithGitAsStartIs(t *testing.T) {
	repo, notRepo := gitRepo(t), t.TempDir()
	profiles := "[agents]\ndefault = \"a\"\n[agents.a]\ndescription = \"first\"\n[agents.w]\nworkspace = \"worktree\"\nrepo = \"" + repo + "\"\n"
	config := writeConfig(t, profiles)
	agenttest.GiveToAgentUser(t, repo) // the broker's git runs as the agents' user
	agenttest.Traversable(t, repo)
	b := startBroker(t, config, "BROKER_AGENT_SANDBOX=none", "BROKER_LOG_LEVEL=info")
	b.out.waitFor(t, "Type a message", 20*time.Second)
	original, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	reload := func(text, want string) {
		t.Helper()
		from := b.err.mark()
		if err := os.WriteFile(config, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		syscall.Kill(os.Getpid(), syscall.SIGHUP)
		b.err.waitFrom(t, from, want, 20*time.Second)
	}
	second := strings.Replace(string(original), `"first"`, `"second"`, 1)
	reload(strings.Replace(second, repo, notRepo, 1), "reload refused")
	if logs := b.err.String(); !strings.Contains(logs, `agents.w.repo = \"`+notRepo+`\"`) {
		t.Fatalf("the refusal does not name the key:\n%s", logs)
	}
	from := b.out.mark()
	b.say(t, "/agents")
	b.out.waitFrom(t, from, "• a (default): first", 10*time.Second)

	reload(second, "configuration reloaded")
	from = b.out.mark()
	b.say(t, "/agents")
	b.out.waitFrom(t, from, "• a (default): second", 10*time.Second)
	if code := b.exit(t); code != 0 {
		t.Fatalf("exit status %d", code)
	}
}

// With agent.run_as_user, a worktree profile's repository must be that
// user's: check-config says so, naming the key and the chown to run, and
// accepts it once it is.
func TestCheckConfig_AWorktreeRepositoryMustBeTheAgentsUsers(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("agent.run_as_user needs root")
	}
	repo := gitRepo(t)
	for d := repo; strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		os.Chmod(d, 0o755) // reachable by the agents' user, as an operator's would be
	}
	config := filepath.Join(t.TempDir(), "b.toml")
	text := "[agent]\ncommand = \"" + fakeAgent + "\"\ncwd = \"" + t.TempDir() + "\"\nrun_as_user = \"nobody\"\nworkspace = \"worktree\"\nrepo = \"" + repo + "\"\n[state]\ndir = \"" + t.TempDir() + "\"\n"
	if err := os.WriteFile(config, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	check := func() (int, string) {
		var out bytes.Buffer
		code := run(context.Background(), []string{"check-config", "--config", config}, []string{"BROKER_AGENT_SANDBOX=none", "PATH=" + os.Getenv("PATH")}, nil, &out, &out)
		return code, out.String()
	}
	code, out := check()
	if code != 2 || !strings.Contains(out, `agent.repo = "`+repo+`": its git directory `+filepath.Join(repo, ".git")+` belongs to uid 0, not to agent.run_as_user (uid `) ||
		!strings.Contains(out, "chown -R ") {
		t.Fatalf("check-config with the repository root's: status %d, %s", code, out)
	}
	nobody := exec.Command("chown", "-R", "nobody", repo)
	if b, err := nobody.CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, b)
	}
	if code, out := check(); code != 0 {
		t.Fatalf("check-config with the repository nobody's: status %d, %s", code, out)
	}
}
