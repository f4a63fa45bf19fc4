package pool_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/cgroup"
	"acpbroker/internal/agenttest"
	"acpbroker/pool"
)

// openCgroups opens control groups for the test's agents, or skips the
// test where the machine has none the test may make.
func openCgroups(t *testing.T) *cgroup.Manager {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make control groups here")
	}
	m, err := cgroup.Open(cgroup.Options{Name: fmt.Sprintf("acp-broker-pooltest-%d-%s", os.Getpid(), t.Name()), Logger: testLogger(t)})
	if errors.Is(err, cgroup.ErrUnavailable) {
		t.Skipf("no control groups here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// groupDirs are the agents' groups in each hierarchy, by hierarchy.
func groupDirs(t *testing.T, m *cgroup.Manager) [][]string {
	t.Helper()
	var out [][]string
	for _, base := range m.Dirs() {
		entries, err := os.ReadDir(base)
		if err != nil {
			t.Fatal(err)
		}
		var dirs []string
		for _, e := range entries {
			if e.IsDir() {
				dirs = append(dirs, filepath.Join(base, e.Name()))
			}
		}
		out = append(out, dirs)
	}
	return out
}

// theGroup is the one agent's group, by hierarchy.
func theGroup(t *testing.T, m *cgroup.Manager) []string {
	t.Helper()
	var out []string
	for _, dirs := range groupDirs(t, m) {
		if len(dirs) != 1 {
			t.Fatalf("%d agent groups in a hierarchy, want 1: %v", len(dirs), dirs)
		}
		out = append(out, dirs[0])
	}
	return out
}

// awaitNoGroups waits until every agent's group is gone, failing the
// test after 10s.
func awaitNoGroups(t *testing.T, m *cgroup.Manager) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := 0
		for _, dirs := range groupDirs(t, m) {
			left += len(dirs)
		}
		if left == 0 && m.Live() == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d group directories and %d groups left after the agents stopped", left, m.Live())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func procsOf(t *testing.T, dir string) []int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, w := range strings.Fields(string(b)) {
		n, _ := strconv.Atoi(w)
		out = append(out, n)
	}
	return out
}

func limited(t *testing.T, lim cgroup.Limits) map[string]*pool.Profile {
	return map[string]*pool.Profile{"default": {Command: fakeAgent, WorkDir: t.TempDir(), PerThreadDir: true,
		Env: []string{"PATH=/usr/bin:/bin"}, MemoryMax: lim.MemoryMax, PidsMax: lim.PidsMax}}
}

// With Cgroups, an agent runs in a control group of its own with its
// profile's limits, in every hierarchy; its terminals' commands run
// there too; and the group is gone once the agent has stopped.
func TestPool_AgentAndItsTerminalsRunInItsControlGroup(t *testing.T) {
	m := openCgroups(t)
	p := newPool(t, pool.Config{Cgroups: m, Profiles: limited(t, cgroup.Limits{MemoryMax: 256 << 20, PidsMax: 64})})
	a := acquire(t, p, "t1")
	dirs := theGroup(t, m)
	for _, d := range dirs {
		if !slices.Contains(procsOf(t, d), a.Proc.PID()) {
			t.Errorf("the agent (pid %d) is not in %s", a.Proc.PID(), d)
		}
		want := map[string]string{"memory.limit_in_bytes": strconv.Itoa(256 << 20), "memory.max": strconv.Itoa(256 << 20), "pids.max": "64"}
		for f, v := range want {
			if b, err := os.ReadFile(filepath.Join(d, f)); err == nil && strings.TrimSpace(string(b)) != v {
				t.Errorf("%s/%s = %s, want %s", d, f, b, v)
			}
		}
	}
	got := prompt(t, a, "terminal cat /proc/self/cgroup")
	for _, c := range []string{":memory:", ":pids:"} {
		line := ""
		for l := range strings.Lines(got) {
			if strings.Contains(l, c) {
				line = strings.TrimSpace(l)
			}
		}
		if !strings.HasSuffix(line, "/"+filepath.Base(dirs[0])) {
			t.Errorf("the terminal's command ran in %q, not in its agent's group %s", line, filepath.Base(dirs[0]))
		}
	}
	p.Release(a, true)
	awaitNoGroups(t, m)
}

// An agent the kernel kills for its memory limit ends with that said in
// words, and counted.
func TestPool_AgentOutOfMemoryIsToldWithItsLimit(t *testing.T) {
	m := openCgroups(t)
	p := newPool(t, pool.Config{Cgroups: m, Profiles: limited(t, cgroup.Limits{MemoryMax: 64 << 20})})
	a := acquire(t, p, "t1")
	call, err := a.Conn.Prompt(context.Background(), a.SessionID, []acp.ContentBlock{acp.TextBlock("alloc 1024")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	select {
	case <-call.Done():
	case <-ctx.Done():
		t.Fatal("the prompt did not end")
	}
	if err := call.Result(nil); !errors.Is(err, acp.ErrAgentGone) {
		t.Fatalf("the prompt ended with %v, want the agent gone", err)
	}
	select {
	case <-a.Proc.Reaped():
	case <-ctx.Done():
		t.Fatal("the agent was not reaped")
	}
	if got, want := fmt.Sprint(a.Proc.ExitErr()), "the agent ran out of memory (limit 64 MiB)"; got != want {
		t.Fatalf("the agent's end reads %q, want %q", got, want)
	}
	p.Release(a, false)
	awaitNoGroups(t, m)
	if n := p.Stats().OutOfMemory; n != 1 {
		t.Fatalf("Stats().OutOfMemory = %d, want 1", n)
	}
}

// A sandboxed agent run as another user is in its group too (bubblewrap
// starts there), and so are its terminals' commands: a terminal that
// forks past the agent's process limit is refused by the kernel.
func TestSandbox_AgentAsAnotherUserIsHeldToItsLimits(t *testing.T) {
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil {
		t.Skip("bubblewrap is not installed")
	}
	m := openCgroups(t)
	dir := agenttest.OtherUserDir(t)
	bin := filepath.Join(dir, "fakeagent")
	data, err := os.ReadFile(fakeAgent)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	const nobody = agenttest.Nobody
	p := newPool(t, pool.Config{Cgroups: m, RunAs: &syscall.Credential{Uid: nobody, Gid: nobody},
		Sandbox: pool.Sandbox{Bwrap: "bwrap"},
		Profiles: map[string]*pool.Profile{"default": {Command: bin, WorkDir: filepath.Join(dir, "work"), PerThreadDir: true,
			Env: []string{"PATH=/usr/bin:/bin"}, PidsMax: 24}}})
	a := acquire(t, p, "t1")
	for _, d := range theGroup(t, m) {
		if !slices.Contains(procsOf(t, d), a.Proc.PID()) {
			t.Errorf("the agent (pid %d) is not in %s", a.Proc.PID(), d)
		}
	}
	if got := prompt(t, a, "whoami"); got != fmt.Sprintf("uid=%d gid=%d", nobody, nobody) {
		t.Fatalf("the agent runs as %q", got)
	}
	flood := `i=0; while [ $i -lt 100 ]; do sleep 30 </dev/null >/dev/null 2>&1 & i=$((i+1)); done; echo all forked`
	if err := os.WriteFile(filepath.Join(a.Dir, "flood.sh"), []byte(flood), 0o644); err != nil {
		t.Fatal(err)
	}
	got := prompt(t, a, "terminal sh flood.sh")
	if strings.Contains(got, "all forked") || !strings.Contains(strings.ToLower(got), "fork") {
		t.Fatalf("a terminal forked 100 processes under its agent's limit of 24:\n%s", got)
	}
	p.Release(a, true)
	awaitNoGroups(t, m)
}

// A command of the agent's killed for the group's memory limit is that
// command's end, not the agent's: the agent answers that it was killed,
// and once the pool kills it (SIGKILL, as for a turn ended from
// outside), it is not counted as out of memory.
func TestPool_ATerminalKilledForMemoryIsNotTheAgentsEnd(t *testing.T) {
	perl, err := exec.LookPath("perl")
	if err != nil {
		t.Skip("no perl to eat memory with")
	}
	m := openCgroups(t)
	p := newPool(t, pool.Config{Cgroups: m, Profiles: limited(t, cgroup.Limits{MemoryMax: 64 << 20})})
	a := acquire(t, p, "t1")
	if got := prompt(t, a, "terminal "+perl+" -e$x=1x3e8"); !strings.Contains(got, `"signal":"SIGKILL"`) {
		t.Fatalf("a terminal touching 300 MB under a 64 MiB limit: %s", got)
	}
	if got := prompt(t, a, "stream 1"); !strings.Contains(got, "chunk 1") {
		t.Fatalf("the agent did not answer after its terminal was killed: %q", got)
	}
	p.Discard("t1")
	awaitNoGroups(t, m)
	if exit := a.Proc.ExitErr(); exit == nil || strings.Contains(exit.Error(), "memory") {
		t.Errorf("the agent the pool stopped ended with %v", exit)
	}
	if n := p.Stats().OutOfMemory; n != 0 {
		t.Errorf("Stats().OutOfMemory = %d, want 0", n)
	}
}

// An agent's usage is its control group's, with its limit, when it has
// one; /proc's for its process tree when it has none. Either holds the
// memory the agent touched.
func TestAgent_UsageIsItsGroupsOrItsProcesses(t *testing.T) {
	m := openCgroups(t)
	for _, tc := range []struct {
		source string
		groups *cgroup.Manager
	}{{pool.UsageCgroup, m}, {pool.UsageProc, nil}} {
		t.Run(tc.source, func(t *testing.T) {
			p := newPool(t, pool.Config{Cgroups: tc.groups, Profiles: limited(t, cgroup.Limits{MemoryMax: 512 << 20})})
			a := acquire(t, p, "t1")
			if got := prompt(t, a, "alloc 96"); !strings.Contains(got, "allocated 96 MiB") {
				t.Fatalf("the agent said %q", got)
			}
			u, err := a.Usage()
			if err != nil {
				t.Fatal(err)
			}
			if u.Source != tc.source || u.Memory < 96<<20 || u.Memory > 512<<20 || !u.CPUCounted || u.CPU <= 0 || u.CPU > time.Minute {
				t.Errorf("usage %+v, want from %s, at least the 96 MiB touched, and some CPU time", u, tc.source)
			}
			if wantMax := map[string]int64{pool.UsageCgroup: 512 << 20, pool.UsageProc: 0}[tc.source]; u.MemoryMax != wantMax {
				t.Errorf("limit %d, want %d", u.MemoryMax, wantMax)
			}
			if us, errs := pool.Usages([]*pool.Agent{a}); errs[0] != nil || us[0].Source != tc.source || us[0].Memory < 96<<20 {
				t.Errorf("Usages = %+v, %v", us, errs)
			}
			if agents := p.Agents(); len(agents) != 1 || agents[0] != a {
				t.Errorf("Agents = %v, want the one", agents)
			}
			p.Release(a, true)
			deadline := time.Now().Add(10 * time.Second)
			for _, err := a.Usage(); err == nil; _, err = a.Usage() {
				if time.Now().After(deadline) {
					t.Fatal("a stopped agent still has a usage")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if agents := p.Agents(); len(agents) != 0 {
				t.Errorf("Agents = %v after the agent stopped", agents)
			}
		})
	}
}
