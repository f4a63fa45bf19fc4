package faults

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// who asks the agent of a thread which profile it is: each profile of
// these tests sets WHO in its agent's environment.
func (w *world) who(thread string) string {
	w.t.Helper()
	n := len(w.Discord.Answers(thread))
	w.Discord.Post(thread, alice, "env")
	answers := w.awaitAnswers(thread, n+1)
	text := answers[n].Text
	if m := regexp.MustCompile(`(?m)^WHO=(\w+)$`).FindStringSubmatch(text); m != nil {
		return m[1]
	}
	return "(none: " + text + ")"
}

// A thread keeps the profile it started with for life: across a restart
// in which its channel's profile changed, its agent is still the one it
// had; once that profile is removed from the configuration, the thread
// is told so in words and nothing is started.
func TestProfiles_AThreadKeepsItsAgentAcrossRestartsAndIsToldWhenItIsRemoved(t *testing.T) {
	w := newWorld(t, setup{})
	profiles := settings{
		"agents.default":                   "a",
		"agents.a.env":                     []string{"WHO=a"},
		"agents.b.env":                     []string{"WHO=b"},
		"channels." + w.Channel + ".agent": "b",
	}
	w.Conf = w.Conf.With(profiles)
	first := w.start()
	thread := w.mention(alice, "hello")
	w.awaitAnswers(thread, 1)
	if got := w.who(thread); got != "b" {
		t.Fatalf("a thread of b's channel got %s", got)
	}
	first.stop()

	w.Conf = w.Conf.With(settings{"channels." + w.Channel + ".agent": "a"})
	second := w.start()
	if got := w.who(thread); got != "b" {
		t.Fatalf("after a restart with the channel's profile changed, the thread got %s", got)
	}
	if other := w.mention(bob, "env"); !strings.Contains(w.awaitAnswers(other, 1)[0].Text, "WHO=a") {
		t.Fatalf("a new thread of the channel did not get a")
	}
	second.stop()

	w.Conf = w.Conf.With(settings{"agents.b.env": nil})
	third := w.start()
	n := len(w.Discord.Answers(thread))
	w.Discord.Post(thread, alice, "env")
	got := w.awaitAnswers(thread, n+1)[n]
	if !strings.Contains(got.Text, `the agent profile "b" this thread uses is no longer configured; start a new thread`) || strings.Contains(got.Text, "WHO=") {
		t.Fatalf("the thread of a removed profile shows %q", got.Text)
	}
	if st := w.slash(thread, alice, "status"); !strings.Contains(st.Content, "not running") {
		t.Fatalf("/status of the removed profile's thread: %q, want no agent running", st.Content)
	}
	if v, ok := third.metric(`acp_broker_agent_spawns_total`); !ok || v != 0 {
		t.Fatalf("%v agents were started for it", v)
	}
}

// A profile with workspace = "worktree" gives each thread its own git
// worktree of the repository, on a branch named after the thread, made
// before its agent starts and shown in /status; what an agent writes
// there is not in another thread's checkout nor in the repository's.
func TestProfiles_AWorktreeProfileGivesEachThreadItsOwnCheckout(t *testing.T) {
	w := newWorld(t, setup{})
	repo := filepath.Join(w.Dir, "repo")
	for _, args := range [][]string{
		{"init", "-q", "-b", "main", repo},
		{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "first"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	w.Conf = w.Conf.With(settings{"agent.workspace": "worktree", "agent.repo": repo, "agent.base": "main"})
	w.start()
	dirs := map[string]string{}
	for _, u := range []string{"one", "two"} {
		thread := w.mention(alice, "probe w:notes-"+u+".txt")
		if a := w.awaitAnswers(thread, 1)[0]; !strings.Contains(a.Text, "w:notes-"+u+".txt ok") {
			t.Fatalf("the agent could not write in its worktree: %q", a.Text)
		}
		st := w.slash(thread, alice, "status")
		m := regexp.MustCompile("\\*\\*Workspace\\*\\*: `([^`]+)`").FindStringSubmatch(st.Content)
		if m == nil {
			t.Fatalf("/status does not show the workspace: %q", st.Content)
		}
		dirs[u] = m[1]
		branch, err := exec.Command("git", "-C", m[1], "rev-parse", "--abbrev-ref", "HEAD").Output()
		if err != nil || strings.TrimSpace(string(branch)) != "acp/"+thread {
			t.Fatalf("thread %s's worktree is on %q (%v), want acp/%s", thread, branch, err, thread)
		}
		// The agent commits on its branch from inside its sandbox: the
		// repository's git directory is there for it.
		w.Discord.Post(thread, alice, "run git -c user.name=agent -c user.email=agent@example.com commit -q --allow-empty -m from-"+u)
		if a := w.awaitAnswers(thread, 2)[1]; !strings.Contains(a.Text, "exit: <nil>") {
			t.Fatalf("git commit in the agent's worktree: %q", a.Text)
		}
		if log, err := exec.Command("git", "-C", repo, "log", "--format=%s", "acp/"+thread).Output(); err != nil || !strings.HasPrefix(string(log), "from-"+u+"\n") {
			t.Fatalf("branch acp/%s has %q (%v), want the agent's commit on top", thread, log, err)
		}
	}
	if dirs["one"] == dirs["two"] {
		t.Fatalf("two threads share %s", dirs["one"])
	}
	for u, dir := range dirs {
		other := map[string]string{"one": "two", "two": "one"}[u]
		if _, err := os.Stat(filepath.Join(dir, "notes-"+u+".txt")); err != nil {
			t.Errorf("%s's file is not in its worktree: %v", u, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "notes-"+other+".txt")); err == nil {
			t.Errorf("%s's file shows in %s's worktree", other, u)
		}
		if _, err := os.Stat(filepath.Join(repo, "notes-"+u+".txt")); err == nil {
			t.Errorf("%s's file shows in the repository's own checkout", u)
		}
	}
}
