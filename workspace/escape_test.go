package workspace

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"acpbroker/pool"
)

// An agent of a worktree profile writes the repository's git directory
// and its own worktree. These tests plant there what it could to have
// its code run by the broker's git, each a script that marks where it
// can that it ran, and check from the test that none of the broker's git
// commands ran it: with the hardened invocation alone, and confined in
// bubblewrap too. A control then does with plain git what an operator
// would, and must find the marks: the vector was live.

// gitMode is one way the broker's git runs.
type gitMode struct {
	name string
	// set readies w (and its repository) for the mode; it returns the
	// user an agent would be, if not the tests' own.
	set func(t testing.TB, w *Worktrees) *syscall.Credential
}

var gitModes = []gitMode{
	{"hardened", func(testing.TB, *Worktrees) *syscall.Credential { return nil }},
	{"confined", confineT},
}

// confineT has w run git in bubblewrap as pool confines it, and, when
// the tests run as root, as nobody (as agent.run_as_user would have it),
// the repository given to nobody. It returns that user.
func confineT(t testing.TB, w *Worktrees) *syscall.Credential {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap is not installed")
	}
	var cred *syscall.Credential
	if os.Getuid() == 0 {
		u, err := user.Lookup("nobody")
		if err != nil {
			t.Skip("no user nobody to run git as")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		giveTo(t, cred, w.Repo)
		reachable(t, filepath.Dir(w.Dir))
	}
	sb := pool.Sandbox{Bwrap: "bwrap"}
	w.Confine = func(argv, env []string, dir string, readOnly, writable []string) ([]string, *syscall.Credential) {
		return sb.ConfineGit(argv, env, dir, readOnly, writable), cred
	}
	return cred
}

// giveTo gives everything under each path to cred (nil: nobody else),
// and makes each reachable.
func giveTo(t testing.TB, cred *syscall.Credential, paths ...string) {
	t.Helper()
	if cred == nil {
		return
	}
	for _, p := range paths {
		err := filepath.Walk(p, func(path string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(path, int(cred.Uid), int(cred.Gid))
		})
		if err != nil {
			t.Fatal(err)
		}
		reachable(t, filepath.Dir(p))
	}
}

// reachable lets every user through dir and the test's directories
// above it, as the directories of a repository given to an agents' user
// are.
func reachable(t testing.TB, dir string) {
	t.Helper()
	for d := dir; strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, fi.Mode().Perm()|0o055); err != nil {
			t.Fatal(err)
		}
	}
}

// agentView is what a hostile agent works with: the repository's git
// directory and its own worktree, both writable, and a script of its,
// payload, that marks that it ran.
type agentView struct {
	repo, common, worktree, payload string
	owner                           *syscall.Credential
}

// git runs git as the agent would, in its worktree.
func (a agentView) git(t *testing.T, args ...string) string {
	t.Helper()
	return gitT(t, a.worktree, args...)
}

// write writes a file of the agent's.
func (a agentView) write(t *testing.T, path, text string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// done gives what the agent wrote to its user, as if it had written it.
func (a agentView) done(t *testing.T) {
	t.Helper()
	giveTo(t, a.owner, a.common, a.worktree)
}

// hooks are the hooks planted: one for each kind of command the broker
// runs (a checkout, a ref changed, the index written).
var hooks = []string{"post-checkout", "reference-transaction", "post-index-change"}

// escapes are the ways an agent could try to have its code run by the
// broker's git. inWorktree marks those that break the agent's own
// worktree rather than the shared git directory.
var escapes = []struct {
	name       string
	inWorktree bool
	plant      func(t *testing.T, a agentView)
}{
	{"hooks in the git directory", false, func(t *testing.T, a agentView) {
		for _, h := range hooks {
			a.write(t, filepath.Join(a.common, "hooks", h), "#!/bin/sh\nexec "+a.payload+" "+h+"\n", 0o755)
		}
	}},
	{"core.hooksPath", false, func(t *testing.T, a agentView) {
		for _, h := range hooks {
			a.write(t, filepath.Join(a.common, "agent-hooks", h), "#!/bin/sh\nexec "+a.payload+" "+h+"\n", 0o755)
		}
		a.git(t, "config", "core.hooksPath", filepath.Join(a.common, "agent-hooks"))
	}},
	{"core.fsmonitor", false, func(t *testing.T, a agentView) {
		a.git(t, "config", "core.fsmonitor", a.payload)
	}},
	{"filter driver with attributes on the base branch", false, func(t *testing.T, a agentView) {
		a.git(t, "config", "filter.evil.smudge", a.payload+" smudge %f")
		a.git(t, "config", "filter.evil.clean", a.payload+" clean %f")
		a.git(t, "config", "filter.evil.required", "true")
		a.git(t, "config", "filter.Evil2.process", a.payload+" process")
		a.write(t, filepath.Join(a.common, "info", "attributes"), "README filter=Evil2\n", 0o644)
		a.write(t, filepath.Join(a.worktree, ".gitattributes"), "*.txt filter=evil\n", 0o644)
		a.write(t, filepath.Join(a.worktree, "notes.txt"), "notes\n", 0o644)
		a.git(t, "add", ".gitattributes", "notes.txt")
		a.git(t, "commit", "-q", "--allow-empty", "-m", "attributes")
		a.git(t, "update-ref", "refs/heads/main", "HEAD")
		// Changed since: git status would clean it to compare.
		a.write(t, filepath.Join(a.worktree, "notes.txt"), "Notes\n", 0o644)
	}},
	{"include.path", false, func(t *testing.T, a agentView) {
		for _, h := range hooks {
			a.write(t, filepath.Join(a.common, "agent-hooks", h), "#!/bin/sh\nexec "+a.payload+" "+h+"\n", 0o755)
		}
		a.write(t, filepath.Join(a.common, "agent.cfg"), "[core]\n\tfsmonitor = "+a.payload+"\n\thooksPath = "+filepath.Join(a.common, "agent-hooks")+
			"\n[filter \"inc\"]\n\tsmudge = "+a.payload+" smudge\n\tclean = "+a.payload+" clean\n", 0o644)
		// Only on the threads' branches: a command that reads the
		// configuration as the repository's, not the new worktree's,
		// would not see it.
		a.write(t, filepath.Join(a.common, "branch.cfg"), "[filter \"onbranch\"]\n\tsmudge = "+a.payload+" smudge\n\tclean = "+a.payload+" clean\n", 0o644)
		a.git(t, "config", "include.path", filepath.Join(a.common, "agent.cfg"))
		a.git(t, "config", "includeIf.onbranch:acp/**.path", filepath.Join(a.common, "branch.cfg"))
		a.write(t, filepath.Join(a.worktree, ".gitattributes"), "*.txt filter=inc\n*.md filter=onbranch\n", 0o644)
		a.write(t, filepath.Join(a.worktree, "notes.txt"), "notes\n", 0o644)
		a.write(t, filepath.Join(a.worktree, "notes.md"), "notes\n", 0o644)
		a.git(t, "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "add", ".gitattributes", "notes.txt", "notes.md")
		a.git(t, "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "commit", "-q", "--allow-empty", "-m", "attributes")
		a.git(t, "-c", "core.hooksPath=/dev/null", "update-ref", "refs/heads/main", "HEAD")
	}},
	{"worktree .git pointing at another repository", true, func(t *testing.T, a agentView) {
		evil := filepath.Join(a.worktree, "evil")
		gitT(t, "", "init", "-q", evil)
		a.write(t, filepath.Join(a.worktree, ".git"), "gitdir: "+filepath.Join(evil, ".git")+"\n", 0o644)
		a.ownRepository(t, filepath.Join(evil, ".git"))
	}},
	{"worktree .git replaced by a repository", true, func(t *testing.T, a agentView) {
		if err := os.Remove(filepath.Join(a.worktree, ".git")); err != nil {
			t.Fatal(err)
		}
		gitT(t, a.worktree, "init", "-q")
		a.ownRepository(t, filepath.Join(a.worktree, ".git"))
	}},
}

// ownRepository makes gitDir, a repository of the agent's that its
// worktree now points at, run its payload every way it can: hooks, a
// file system monitor, and a filter driver for README, tracked there and
// changed since (git status cleans it to compare).
func (a agentView) ownRepository(t *testing.T, gitDir string) {
	t.Helper()
	for _, h := range hooks {
		a.write(t, filepath.Join(gitDir, "hooks", h), "#!/bin/sh\nexec "+a.payload+" "+h+"\n", 0o755)
	}
	for k, v := range map[string]string{"core.fsmonitor": a.payload, "filter.own.clean": a.payload + " clean", "filter.own.smudge": a.payload + " smudge"} {
		gitT(t, "", "--git-dir="+gitDir, "config", k, v)
	}
	a.write(t, filepath.Join(gitDir, "info", "attributes"), "README filter=own\n", 0o644)
	gitT(t, "", "--git-dir="+gitDir, "--work-tree="+a.worktree, "add", "README")
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(a.worktree, "README"), later, later); err != nil {
		t.Fatal(err)
	}
}

// payload writes the agent's script, which marks in outside (where no
// sandbox lets it write) and in the git directory that it ran, or in
// $MARKS when the control runs it, then passes its input through (as a
// filter must).
func payload(t *testing.T, common, outside string) string {
	path := filepath.Join(common, "payload")
	script := "#!/bin/sh\n" +
		"touch \"${MARKS:-" + outside + "}/escaped-$1\" \"${MARKS:-" + common + "}/ran-$1\" 2>/dev/null\n" +
		"exec cat\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// marks lists the marks the payload left in dir.
func marks(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "escaped-") || strings.HasPrefix(e.Name(), "ran-") {
			found = append(found, e.Name())
		}
	}
	return found
}

// plainGit runs git as an operator would, unhardened, with the payload's
// marks going to marksDir; it may fail.
func plainGit(t *testing.T, marksDir, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "safe.directory=*", "-c", "user.name=Op", "-c", "user.email=op@example.com"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "MARKS="+marksDir)
	out, err := cmd.CombinedOutput()
	t.Logf("control: git %s: %v\n%s", strings.Join(args, " "), err, out)
}

func TestWorktrees_RunNothingAnAgentPlanted(t *testing.T) {
	for _, e := range escapes {
		for _, m := range gitModes {
			t.Run(e.name+"/"+m.name, func(t *testing.T) {
				repo := newRepo(t)
				common := filepath.Join(repo, ".git")
				outside := t.TempDir()
				w := newWorktrees(t, repo)
				w.DeleteBranches = true
				var logs logBuffer
				w.Logger = w.Logger.Output(&logs)
				owner := m.set(t, w)
				ctx := t.Context()

				first, _, err := w.Prepare(ctx, "1")
				if err != nil {
					t.Fatal(err)
				}
				a := agentView{repo: repo, common: common, worktree: first, payload: payload(t, common, outside), owner: owner}
				e.plant(t, a)
				a.done(t)

				// The next thread's worktree is made and checked out,
				// with what the agent put on the base branch.
				second, _, err := w.Prepare(ctx, "2")
				if err != nil {
					t.Fatal(err)
				}
				if b, err := os.ReadFile(filepath.Join(second, "README")); err != nil || string(b) != "hello\n" {
					t.Fatalf("the second thread's README: %q, %v", b, err)
				}
				if _, err := os.Stat(filepath.Join(a.worktree, "notes.txt")); err == nil {
					if b, err := os.ReadFile(filepath.Join(second, "notes.txt")); err != nil || string(b) != "notes\n" {
						t.Fatalf("the second thread's notes.txt, from the base the agent moved: %q, %v", b, err)
					}
				}
				// The agent's thread comes back: a worktree it broke is
				// made anew.
				again, _, err := w.Prepare(ctx, "1")
				if err != nil || again != first {
					t.Fatalf("Prepare(1) again = %q, %v", again, err)
				}
				if e.inWorktree {
					if got := gitT(t, first, "rev-parse", "--show-toplevel"); strings.TrimSpace(got) != first {
						t.Fatalf("the agent's broken worktree was not made anew: its top level is %q", got)
					}
					if !strings.Contains(logs.String(), "unusable worktree removed to be made again") {
						t.Fatalf("remaking the broken worktree was not logged:\n%s", logs.String())
					}
					e.plant(t, a) // and breaks it again
					a.done(t)
				}

				// The sweep removes both.
				for _, thread := range []string{"1", "2", "1"} {
					if err := w.Remove(ctx, thread); err != nil {
						t.Fatalf("Remove(%s): %v", thread, err)
					}
				}
				for _, dir := range []string{first, second} {
					if _, err := os.Lstat(dir); !os.IsNotExist(err) {
						t.Errorf("worktree %s still there: %v", dir, err)
					}
				}
				if e.inWorktree && !strings.Contains(logs.String(), "broken worktree removed without running git in it") {
					t.Errorf("the broken worktree's removal was not logged so:\n%s", logs.String())
				}
				if got := marks(t, outside); len(got) > 0 {
					t.Fatalf("the agent's code ran outside any sandbox: %q", got)
				}
				if got := marks(t, common); len(got) > 0 {
					t.Fatalf("the agent's code ran: %q", got)
				}

				// Control: plain git, as an operator uses the repository.
				control := t.TempDir()
				ctl := filepath.Join(t.TempDir(), "ctl")
				plainGit(t, control, repo, "worktree", "add", "-b", "acp/ctl", ctl, "main")
				if e.inWorktree {
					e.plant(t, agentView{repo: repo, common: common, worktree: ctl, payload: a.payload})
				}
				os.WriteFile(filepath.Join(ctl, "README"), []byte("hello\n"), 0o644) // stat changed: git compares
				plainGit(t, control, ctl, "status")
				if len(marks(t, control)) == 0 {
					t.Fatalf("control: plain git ran nothing of the agent's; the vector is not live")
				}
			})
		}
	}
}
