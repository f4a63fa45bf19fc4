package main

import (
	"acpbroker/internal/agenttest"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"acpbroker/store"

	"github.com/rs/zerolog"
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

// keptThreads is a worktreeBook that recorded no worktree.
type keptThreads map[string]bool

func (k keptThreads) ThreadKept(thread string) bool { return k[thread] }
func (keptThreads) Worktrees() []store.Worktree     { return nil }
func (keptThreads) WorktreeRemoved(string)          {}

// A sweep removes the worktrees of threads the store no longer keeps,
// and leaves those it keeps and those whose agent runs.
func TestSweepWorktrees_RemovesOnlyThreadsPastRetention(t *testing.T) {
	p := &Profile{Name: "rev", Workspace: "worktree", Repo: gitRepo(t), Base: "main", Cwd: t.TempDir()}
	wt := worktreesFor(p, nil, zerolog.Nop())
	ctx := context.Background()
	dirs := map[string]string{}
	for _, thread := range []string{"kept", "running", "gone"} {
		dir, _, err := wt.Prepare(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		dirs[thread] = dir
	}
	n := sweepWorktrees(ctx, map[string]*Profile{"rev": p}, keptThreads{"kept": true},
		func(thread string) bool { return thread == "running" }, time.Minute, nil, zerolog.Nop())
	if n != 1 {
		t.Fatalf("removed %d worktrees, want 1", n)
	}
	for thread, dir := range dirs {
		_, err := os.Stat(dir)
		if gone := os.IsNotExist(err); gone != (thread == "gone") {
			t.Errorf("thread %s: worktree gone = %v", thread, gone)
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
	b.out.waitFrom(t, from, "[a (default): first", 10*time.Second)

	reload(second, "configuration reloaded")
	from = b.out.mark()
	b.say(t, "/agents")
	b.out.waitFrom(t, from, "[a (default): second", 10*time.Second)
	if code := b.exit(t); code != 0 {
		t.Fatalf("exit status %d", code)
	}
}

// The worktrees of a profile removed from the configuration, or renamed,
// are swept too once their threads are past retention: sweeping goes by
// the worktrees the state store recorded as made, not by the profiles
// configured now; the record goes with the worktree. A thread the store
// keeps keeps its worktree.
func TestSweepWorktrees_ARemovedProfilesWorktreesAreSwept(t *testing.T) {
	repo := gitRepo(t)
	cfg, err := loadText(t, "[agent]\ncwd = \""+t.TempDir()+"\"\n[agents]\ndefault = \"a\"\n[agents.a]\ncommand = \""+fakeAgent+
		"\"\n[agents.rev]\ncommand = \""+fakeAgent+"\"\nworkspace = \"worktree\"\nrepo = \""+repo+"\"\nbase = \"main\"\ndelete_branches = true\n")
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	agents, err := buildProfiles(cfg, nil, st.WorktreeMade, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dirs := map[string]string{}
	for _, thread := range []string{"gone", "kept"} {
		if dirs[thread], err = agents.profiles["rev"].Workspace(ctx, thread); err != nil {
			t.Fatal(err)
		}
	}
	st.SetThreadProfile("kept", "rev")
	if n := st.Stats().Worktrees; n != 2 {
		t.Fatalf("%d worktrees recorded, want 2", n)
	}

	delete(cfg.Profiles, "rev") // the reload that removed it
	n := sweepWorktrees(ctx, cfg.Profiles, st, func(string) bool { return false }, time.Minute, nil, zerolog.Nop())
	if _, err := os.Stat(dirs["gone"]); n != 1 || !os.IsNotExist(err) {
		t.Fatalf("removed %d worktrees; the removed profile's is still there: %v", n, err)
	}
	if _, err := os.Stat(dirs["kept"]); err != nil {
		t.Fatalf("the worktree of a thread kept was removed: %v", err)
	}
	if got := st.Worktrees(); len(got) != 1 || got[0].Thread != "kept" {
		t.Fatalf("records after the sweep: %+v", got)
	}
	out, err := exec.Command("git", "-C", repo, "branch", "--list", "acp/*").CombinedOutput()
	if err != nil || strings.Contains(string(out), "gone") || !strings.Contains(string(out), "kept") {
		t.Fatalf("branches after the sweep (delete_branches = true as recorded): %q %v", out, err)
	}
}

// The broker's git on a worktree profile's repository is confined as
// that profile's agents are: in bubblewrap with agent.sandbox = "bwrap"
// (no network there, whatever agent.sandbox_network says), as
// agent.run_as_user when one is set; with neither, it is only hardened.
func TestGitConfiner_ConfinesGitAsTheAgentsAre(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git")
	}
	argv := []string{git, "version"}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=/dev/null"}
	for _, tc := range []struct {
		name, keys string
		confined   bool
		runAs      bool
	}{
		{"none", "sandbox = \"none\"", false, false},
		{"bwrap", "sandbox = \"bwrap\"\nsandbox_network = true", true, false},
		{"none as another user", "sandbox = \"none\"\nrun_as_user = \"nobody\"", false, true},
		{"bwrap as another user", "sandbox = \"bwrap\"\nrun_as_user = \"nobody\"", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.runAs && os.Getuid() != 0 {
				t.Skip("agent.run_as_user needs root")
			}
			cfg, err := loadText(t, "[agent]\ncommand = \""+fakeAgent+"\"\n"+tc.keys+"\n")
			if err != nil {
				t.Fatal(err)
			}
			confine := gitConfiner(cfg, "")
			if !tc.confined && !tc.runAs {
				if confine != nil {
					t.Fatal("git is confined with agents unconfined and no user of theirs")
				}
				return
			}
			got, cred := confine(argv, env, "/", nil, nil)
			if cred != cfg.Agent.RunAs {
				t.Fatalf("git runs as %+v, want agent.run_as_user's %+v", cred, cfg.Agent.RunAs)
			}
			if !tc.confined {
				if strings.Join(got, " ") != strings.Join(argv, " ") {
					t.Fatalf("git's command line became %q", got)
				}
				return
			}
			line := strings.Join(got, " ")
			for _, want := range []string{"bwrap ", " --unshare-user ", " --unshare-net ", " --cap-drop ALL ", " --clearenv ", " -- " + git + " version"} {
				if !strings.Contains(line, want) {
					t.Fatalf("git's confinement %q lacks %q", line, want)
				}
			}
			cmd := exec.Command(got[0], got[1:]...)
			cmd.Env = env
			if cred != nil {
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
			}
			if out, err := cmd.CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "git version ") {
				t.Fatalf("git in its confinement: %v, %s", err, out)
			}
		})
	}
}

// A worktree past retention that cannot be removed is reported once,
// moved out of its thread's way, and forgotten: the next sweep does not
// try it again.
func TestSweepWorktrees_OneThatCannotBeRemovedIsReportedOnce(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, to make a file no one can remove")
	}
	cfg, err := loadText(t, "[agent]\ncommand = \""+fakeAgent+"\"\ncwd = \""+t.TempDir()+"\"\nworkspace = \"worktree\"\nrepo = \""+gitRepo(t)+"\"\n")
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	agents, err := buildProfiles(cfg, nil, st.WorktreeMade, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	dir, err := agents.profiles["default"].Workspace(context.Background(), "stuck")
	if err != nil {
		t.Fatal(err)
	}
	stuck := filepath.Join(dir, "stuck")
	if err := os.WriteFile(stuck, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chattr", "+i", stuck).CombinedOutput(); err != nil {
		t.Skipf("chattr +i: %v %s", err, out)
	}
	t.Cleanup(func() {
		left, _ := filepath.Glob(filepath.Join(filepath.Dir(dir), ".removing-stuck-*", "stuck", "stuck"))
		for _, f := range append(left, stuck) {
			exec.Command("chattr", "-i", f).Run()
		}
	})

	var logs bytes.Buffer
	log := zerolog.New(&logs)
	for sweep := 1; sweep <= 2; sweep++ {
		if n := sweepWorktrees(context.Background(), cfg.Profiles, st, func(string) bool { return false }, time.Minute, nil, log); n != 0 {
			t.Fatalf("sweep %d removed %d worktrees", sweep, n)
		}
		if got := strings.Count(logs.String(), "left where it is; it will not be tried again"); got != 1 {
			t.Fatalf("after sweep %d, %d reports of the worktree left:\n%s", sweep, got, logs.String())
		}
		if n := st.Stats().Worktrees; n != 0 {
			t.Fatalf("after sweep %d, %d worktrees still recorded", sweep, n)
		}
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("the thread's worktree directory is still in its way: %v", err)
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
