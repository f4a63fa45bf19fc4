package config

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// fakeAgent is the agent program the tests' configurations name. Reading
// a configuration does not look for it: the broker does where it is
// wired, so it need not exist.
const fakeAgent = "/opt/acp-test/bin/fake-agent"

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// loadText loads a configuration written as text, with PATH holding the
// fake agent's directory.
func loadText(t *testing.T, text string, environ ...string) (*Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "broker.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return Load(path, append(environ, "PATH="+filepath.Dir(fakeAgent)))
}

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
