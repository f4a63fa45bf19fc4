// Package agenttest runs the repository's fake ACP agent for tests: built
// as a real subprocess over real pipes, or in-process for synctest bubbles.
package agenttest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Build compiles testdata/fakeagent into dir and returns the binary's path.
func Build(dir string) (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	bin := filepath.Join(dir, "fakeagent")
	cmd := exec.Command("go", "build", "-o", bin, "./testdata/fakeagent")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build fake agent: %w\n%s", err, b)
	}
	return bin, nil
}

// MustBuild is Build for TestMain: it exits the test binary on failure.
// The caller removes dir when done.
func MustBuild() (bin, dir string) {
	dir, err := os.MkdirTemp("", "fakeagent-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	bin, err = Build(dir)
	if err == nil {
		err = os.Chmod(dir, 0o755) // for agents run as another user
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	return bin, dir
}

// Running reports whether pid is a live process: it exists and is not a
// zombie waiting to be reaped.
func Running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

// WaitGone waits up to within for pid to stop running and reports whether
// it did.
func WaitGone(pid int, within time.Duration) bool {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for Running(pid) {
		select {
		case <-deadline.C:
			return !Running(pid)
		case <-tick.C:
		}
	}
	return true
}

// Main is a TestMain for packages that run the fake agent: it builds it
// into *bin, runs the tests, fails them if goroutines are left running,
// and exits.
func Main(m *testing.M, bin *string) {
	b, dir := MustBuild()
	*bin = b
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Buffer collects a process's output (or a log) safely from several
// goroutines.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Nobody is the uid and gid of the user tests run processes as when they
// need another user than root.
const Nobody = 65534

// AgentUser is the user a broker run by the tests as root starts its
// sandboxed agents as (agent.run_as_user): root may not, and bubblewrap
// runs as that user. "" when the tests do not run as root.
func AgentUser() string {
	if os.Getuid() == 0 {
		return "nobody"
	}
	return ""
}

// Traversable lets other users search dir and the directories above it
// up to the system's temporary directory (those of t.TempDir are their
// maker's alone), for agents run as AgentUser: bubblewrap, run as that
// user, must reach their programs and workspaces. It changes nothing
// outside the temporary directory.
func Traversable(tb testing.TB, dir string) {
	tb.Helper()
	tmp, err := filepath.EvalSymlinks(os.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		tb.Fatal(err)
	}
	for d := real; strings.HasPrefix(d, tmp+string(filepath.Separator)); d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			tb.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm&0o011 != 0o011 {
			if err := os.Chmod(d, perm|0o011); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// GiveToAgentUser gives dir and everything in it to AgentUser, and lets
// it reach dir (see Traversable): for what agents run as that user must
// write. It does nothing when the tests do not run as root.
func GiveToAgentUser(tb testing.TB, dir string) {
	tb.Helper()
	if AgentUser() == "" {
		return
	}
	err := filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, Nobody, Nobody)
	})
	if err != nil {
		tb.Fatal(err)
	}
	Traversable(tb, dir)
}

// OtherUserDir returns a directory that another user may enter, read and
// write (the test's own temporary directories are root's alone), removed
// when the test ends. The test is skipped unless it runs as root, which
// it needs to start processes as another user.
func OtherUserDir(t *testing.T) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root to run processes as another user")
	}
	dir, err := os.MkdirTemp("", "other-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}
