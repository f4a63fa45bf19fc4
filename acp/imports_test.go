package acp

import (
	"go/build"
	"slices"
	"testing"
)

// acp is the wire: the agent's files and processes are a Host's, so the
// connection starts no process, knows no control group and stops none.
func TestConn_ImportsNothingThatServesTheHost(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, banned := range []string{"acpbroker/cgroup", "acpbroker/procgroup", "os/exec", "syscall", "golang.org/x/sys/unix"} {
		if slices.Contains(pkg.Imports, banned) {
			t.Errorf("acp imports %s", banned)
		}
	}
}
