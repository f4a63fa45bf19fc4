package faults

import (
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"acpbroker/internal/fakediscord"
)

// An agent of a worktree profile writes the repository's git directory
// (to commit) and its own worktree. A hostile one plants there what git
// runs: hooks, core.hooksPath, core.fsmonitor, a filter driver with
// attributes committed on the base branch, an include carrying more of
// them; then it replaces its worktree's .git with a repository of its
// own (its hooks, its monitor, a filter for a file it changed). None of
// it runs when the broker makes the next thread's worktree, nor when the
// retention sweep removes the hostile thread's broken worktree: the
// marks its scripts leave outside every sandbox, and in the git
// directory, stay absent, and the broken worktree is gone.
func TestGitEscape_NothingAnAgentPlantsInTheRepositoryRuns(t *testing.T) {
	needBwrap(t)
	w := newWorld(t, setup{})
	repo := newRepo(t, filepath.Join(w.Dir, "repo"))
	common := filepath.Join(repo, ".git")
	marks := filepath.Join(w.Dir, "marks") // in no sandbox
	if err := os.Mkdir(marks, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(marks, 0o777)
	w.Conf = w.Conf.With(settings{"agent.workspace": "worktree", "agent.repo": repo, "agent.base": "main", "state.retention": "1h"})
	w.forAgents(repo, marks)
	b := w.start()

	// Its own git with nothing of what it plants, until it is planted.
	const git = "git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c user.name=a -c user.email=a@example.com"
	hostile := w.mention(alice, "sh set -e; G=$(git rev-parse --path-format=absolute --git-common-dir); P=$G/payload; "+
		// the base branch gets attributes naming the filter
		"printf '*.txt filter=evil\\n*.md filter=inc\\n' > .gitattributes; echo notes > notes.txt; echo notes > notes.md; "+
		git+" add .gitattributes notes.txt notes.md; "+git+" commit -q -m attributes; "+git+" update-ref refs/heads/main HEAD; "+
		// the payload marks outside (where no sandbox lets it) and in the git directory
		"printf '#!/bin/sh\\ntouch %s/escaped-$1 %s/ran-$1 2>/dev/null\\nexec cat\\n' "+marks+" \"$G\" > \"$P\"; chmod +x \"$P\"; "+
		"mkdir -p \"$G/agent-hooks\"; for h in post-checkout reference-transaction post-index-change; do "+
		"printf '#!/bin/sh\\nexec %s %s\\n' \"$P\" $h > \"$G/hooks/$h\"; cp \"$G/hooks/$h\" \"$G/agent-hooks/$h\"; chmod +x \"$G/hooks/$h\" \"$G/agent-hooks/$h\"; done; "+
		"printf '[core]\\n\\tfsmonitor = %s\\n[filter \"inc\"]\\n\\tsmudge = %s smudge\\n\\tclean = %s clean\\n' \"$P\" \"$P\" \"$P\" > \"$G/agent.cfg\"; "+
		"git config include.path \"$G/agent.cfg\"; git config core.hooksPath \"$G/agent-hooks\"; git config core.fsmonitor \"$P\"; "+
		"git config filter.evil.smudge \"$P smudge\"; git config filter.evil.clean \"$P clean\"; git config filter.evil.required true; "+
		"echo planted")
	if a := w.awaitAnswers(hostile, 1)[0].Text; !strings.Contains(a, "planted") || !strings.Contains(a, "exit: <nil>") {
		t.Fatalf("the hostile agent could not plant: %q", a)
	}

	// The next thread's worktree is made, from the base the agent moved.
	next := w.mention(bob, "hello")
	w.awaitAnswers(next, 1)
	dir := workspaceOf(w, next, bob)
	if b, err := os.ReadFile(filepath.Join(dir, "notes.txt")); err != nil || string(b) != "notes\n" {
		t.Fatalf("the next thread's worktree lacks the base's notes.txt: %q, %v", b, err)
	}
	nothingRan(t, marks, common)

	// The hostile agent breaks its own worktree: its .git is now a
	// repository of its own, tracking a file it changes.
	n := len(w.Discord.Answers(hostile))
	w.Discord.Post(hostile, alice, "sh set -e; P=$(git rev-parse --path-format=absolute --git-common-dir)/payload; rm .git; git init -q; "+
		git+" add notes.txt; git config core.fsmonitor \"$P\"; git config filter.own.clean \"$P clean\"; echo 'notes.txt filter=own' > .git/info/attributes; "+
		"for h in post-checkout reference-transaction post-index-change; do printf '#!/bin/sh\\nexec %s %s\\n' \"$P\" $h > .git/hooks/$h; chmod +x .git/hooks/$h; done; "+
		"touch -d '+1 hour' notes.txt; echo broken")
	if a := w.awaitAnswers(hostile, n+1)[n].Text; !strings.Contains(a, "broken") || !strings.Contains(a, "exit: <nil>") {
		t.Fatalf("the hostile agent could not break its worktree: %q", a)
	}
	broken := workspaceOf(w, hostile, alice)
	if fi, err := os.Stat(filepath.Join(broken, ".git")); err != nil || !fi.IsDir() {
		t.Fatalf("the hostile worktree's .git is not the agent's repository: %v", err)
	}
	b.stop()

	// Past retention, the sweep at the next start removes the broken
	// worktree and keeps the next thread's.
	w.age(hostile)
	b = w.start()
	b.awaitMetric("acp_broker_store_worktrees", func(v float64) bool { return v == 1 })
	if _, err := os.Lstat(broken); !os.IsNotExist(err) {
		t.Fatalf("the broken worktree is still there: %v", err)
	}
	if lines := b.Log.Grep("broken worktree removed without running git in it", hostile); len(lines) != 1 {
		t.Fatalf("%d log lines say the broken worktree was removed without git", len(lines))
	}
	if _, err := os.Stat(filepath.Join(dir, "notes.txt")); err != nil {
		t.Fatalf("the next thread's worktree went too: %v", err)
	}
	nothingRan(t, marks, common)
}

// nothingRan fails the test if the hostile agent's payload left a mark
// in one of dirs.
func nothingRan(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "escaped-") || strings.HasPrefix(e.Name(), "ran-") {
				t.Errorf("the agent's code ran: %s", filepath.Join(d, e.Name()))
			}
		}
	}
}

// workspaceOf is the workspace /status shows for thread.
func workspaceOf(w *world, thread string, u fakediscord.User) string {
	w.t.Helper()
	st := w.slash(thread, u, "status")
	m := regexp.MustCompile("\\*\\*Workspace\\*\\*: `([^`]+)`").FindStringSubmatch(st.Content)
	if m == nil {
		w.t.Fatalf("/status does not show the workspace: %q", st.Content)
	}
	return m[1]
}

// forAgents gives repo to the agents' user when the configuration names
// one (agent.run_as_user), as an operator must for its agents to commit,
// and lets that user reach it and the other paths.
func (w *world) forAgents(repo string, paths ...string) {
	w.t.Helper()
	name := w.AgentUser()
	if name == "" {
		return
	}
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			w.t.Fatalf("agent.run_as_user = %q: %v", name, err)
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	err = filepath.Walk(repo, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		w.t.Fatal(err)
	}
	for _, p := range append(paths, repo) {
		for d := filepath.Dir(p); strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
			if fi, err := os.Stat(d); err == nil {
				os.Chmod(d, fi.Mode().Perm()|0o055)
			}
		}
	}
}
