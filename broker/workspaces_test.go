package broker

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

	"acpbroker/config"
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

// keptThreads is a worktreeBook that recorded no worktree.
type keptThreads map[string]bool

func (k keptThreads) ThreadKept(thread string) bool { return k[thread] }

func (keptThreads) Worktrees() []store.Worktree { return nil }

func (keptThreads) WorktreeRemoved(string) {}

// A sweep removes the worktrees of threads the store no longer keeps,
// and leaves those it keeps and those whose agent runs, on every
// platform: a Discord thread's worktree is named by its own id, as
// before thread ids named their platform, another's by its ThreadID.
func TestSweepWorktrees_RemovesOnlyThreadsPastRetention(t *testing.T) {
	p := &config.Profile{Name: "rev", Workspace: "worktree", Repo: gitRepo(t), Base: "main", Cwd: t.TempDir()}
	wt := worktreesFor(p, nil, zerolog.Nop())
	ctx := context.Background()
	dirs := map[string]string{}
	gone := map[string]bool{"discord:103": true, "console:console-8": true}
	for _, thread := range []string{"discord:101", "discord:102", "discord:103", "console:console-7", "console:console-8"} {
		dir, _, err := wt.Prepare(ctx, worktreeThread(thread))
		if err != nil {
			t.Fatal(err)
		}
		dirs[thread] = dir
	}
	if filepath.Base(dirs["discord:101"]) != "101" {
		t.Fatalf("a Discord thread's worktree is %s, want it named by its own id", dirs["discord:101"])
	}
	n := sweepWorktrees(ctx, map[string]*config.Profile{"rev": p}, keptThreads{"discord:101": true, "console:console-7": true},
		func(thread string) bool { return thread == "discord:102" }, time.Minute, nil, zerolog.Nop())
	if n != 2 {
		t.Fatalf("removed %d worktrees, want 2", n)
	}
	for thread, dir := range dirs {
		_, err := os.Stat(dir)
		if removed := os.IsNotExist(err); removed != gone[thread] {
			t.Errorf("thread %s: worktree removed = %v", thread, removed)
		}
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
	for _, thread := range []string{"console:gone", "discord:kept"} {
		if dirs[thread], err = agents.profiles["rev"].Workspace(ctx, thread); err != nil {
			t.Fatal(err)
		}
	}
	st.SetThreadProfile("discord:kept", "rev")
	if n := st.Stats().Worktrees; n != 2 {
		t.Fatalf("%d worktrees recorded, want 2", n)
	}

	delete(cfg.Profiles, "rev") // the reload that removed it
	n := sweepWorktrees(ctx, cfg.Profiles, st, func(string) bool { return false }, time.Minute, nil, zerolog.Nop())
	if _, err := os.Stat(dirs["console:gone"]); n != 1 || !os.IsNotExist(err) {
		t.Fatalf("removed %d worktrees; the removed profile's is still there: %v", n, err)
	}
	if _, err := os.Stat(dirs["discord:kept"]); err != nil {
		t.Fatalf("the worktree of a thread kept was removed: %v", err)
	}
	if got := st.Worktrees(); len(got) != 1 || got[0].Thread != "discord:kept" {
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
			if err == nil {
				err = complete(cfg, env, true) // as Open does
			}
			if err != nil {
				t.Fatal(err)
			}
			confine := gitConfiner(cfg)
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
	dir, err := agents.profiles["default"].Workspace(context.Background(), "discord:stuck")
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
