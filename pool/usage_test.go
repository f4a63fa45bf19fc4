package pool

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// treeUsage sums a process and its descendants, and no other: a
// command name with spaces and parentheses does not shift the fields.
func TestTreeUsage_SumsTheProcessAndItsDescendants(t *testing.T) {
	proc := t.TempDir()
	stat := func(pid, ppid int, name string, utime, stime, cutime, cstime, rssPages int64) {
		dir := filepath.Join(proc, fmt.Sprint(pid))
		os.Mkdir(dir, 0o755)
		line := fmt.Sprintf("%d (%s) S %d %d 0 0 -1 4194560 100 0 0 0 %d %d %d %d 20 0 1 0 123 4096 %d 18446744073709551615\n",
			pid, name, ppid, pid, utime, stime, cutime, cstime, rssPages)
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stat(1, 0, "init", 1000, 1000, 0, 0, 500)
	stat(40, 1, "bwrap", 1, 2, 0, 0, 10)
	stat(41, 40, "agent ) (x", 100, 50, 25, 25, 1000)
	stat(42, 41, "npm run", 300, 100, 0, 0, 2000)
	stat(50, 1, "other", 999, 999, 0, 0, 9999)
	os.Mkdir(filepath.Join(proc, "self"), 0o755)
	procs := &procTable{root: proc}
	mem, cpu, err := procs.treeUsage(40)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(10+1000+2000) * pageSize; mem != want {
		t.Errorf("memory %d, want %d", mem, want)
	}
	if want := time.Duration(1+2+100+50+25+25+300+100) * 10 * time.Millisecond; cpu != want {
		t.Errorf("CPU %s, want %s", cpu, want)
	}
	if _, _, err := procs.treeUsage(60); err == nil {
		t.Error("a process that is gone has a usage")
	}
}
