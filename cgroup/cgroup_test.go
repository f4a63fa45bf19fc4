package cgroup

import (
	"acpbroker/internal/bytesize"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

// hogEnv makes the test binary a memory hog: it touches that many MiB,
// then says so. (The os/exec way: the test binary is its own fake child.)
const hogEnv = "CGROUP_TEST_HOG_MIB"

// burnEnv makes the hog burn CPU for that long (a duration) once it has
// touched its memory, and keep it until its stdin closes.
const burnEnv = "CGROUP_TEST_BURN"

func TestMain(m *testing.M) {
	if n := os.Getenv(hogEnv); n != "" {
		mib, _ := strconv.Atoi(n)
		var keep [][]byte
		for range mib {
			b := make([]byte, 1<<20)
			for i := range b {
				b[i] = 1
			}
			keep = append(keep, b)
		}
		fmt.Printf("touched %d MiB\n", len(keep))
		if burn, _ := time.ParseDuration(os.Getenv(burnEnv)); burn > 0 {
			// CPU time, then hold what was touched until stdin closes.
			var n uint64
			for start := time.Now(); time.Since(start) < burn; n++ {
			}
			fmt.Printf("burnt %d\n", n)
			io.Copy(io.Discard, os.Stdin)
			runtime.KeepAlive(keep)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// openHere opens a Manager on this machine's hierarchies, with a name of
// the test's own, closed (its groups removed first) when the test ends.
func openHere(t *testing.T) *Manager {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make control groups here")
	}
	m, err := Open(Options{Name: testName(t), Logger: zerolog.New(zerolog.NewTestWriter(t))})
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("no control groups here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func testName(t *testing.T) string {
	return fmt.Sprintf("acp-broker-test-%d-%s", os.Getpid(), safeName(t.Name()))
}

// newGroup makes a group removed when the test ends.
func newGroup(t *testing.T, m *Manager, lim Limits, owner *syscall.Credential) *Group {
	t.Helper()
	g, err := m.New("thread/1", lim, owner)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := g.Remove(ctx); err != nil {
			t.Error(err)
		}
	})
	return g
}

// run starts cmd in g and waits for it, returning its output.
func run(t *testing.T, g *Group, cmd *exec.Cmd) (string, error) {
	t.Helper()
	done, err := g.Prepare(cmd)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Start()
	done()
	if err == nil {
		err = cmd.Wait()
	}
	return out.String(), err
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// An agent's group holds what it starts: the process is in it, in every
// hierarchy, before its program runs; the limits are in the group's
// files; a flood of processes stops at the pids limit; and removing the
// group kills what is left and takes the directories away.
func TestGroup_HoldsItsProcessesToItsLimits(t *testing.T) {
	m := openHere(t)
	g := newGroup(t, m, Limits{MemoryMax: 64 << 20, PidsMax: 16}, nil)
	for _, d := range g.dirs {
		switch d.controller {
		case "memory":
			if got := readFile(t, filepath.Join(d.dir, "memory.limit_in_bytes")); got != strconv.Itoa(64<<20) {
				t.Errorf("memory.limit_in_bytes = %s", got)
			}
		case "pids", "":
			if got := readFile(t, filepath.Join(d.dir, "pids.max")); got != "16" {
				t.Errorf("pids.max = %s", got)
			}
		}
	}

	// The first thing the program does is read its own cgroups.
	out, err := run(t, g, exec.Command("cat", "/proc/self/cgroup"))
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, d := range g.dirs {
		if !strings.Contains(out, ":"+d.controller+":") {
			continue
		}
		for line := range strings.Lines(out) {
			if strings.Contains(line, ":"+d.controller+":") && !strings.HasSuffix(strings.TrimSpace(line), "/"+g.Name()) {
				t.Errorf("the program ran in %q, not in its group %s", strings.TrimSpace(line), g.Name())
			}
		}
	}

	// A flood of sleepers: the shell cannot fork past the limit.
	flood := exec.Command("sh", "-c", `i=0; while [ $i -lt 100 ]; do sleep 60 </dev/null >/dev/null 2>&1 & i=$((i+1)); done; echo all forked`)
	out, err = run(t, g, flood)
	if err == nil || strings.Contains(out, "all forked") || !strings.Contains(strings.ToLower(out), "fork") {
		t.Fatalf("100 processes forked under a limit of 16: %v: %s", err, out)
	}
	left := g.Procs()
	if len(left) == 0 || len(left) > 16 {
		t.Fatalf("%d processes in the group, want 1 to 16", len(left))
	}
	if m.Live() != 1 {
		t.Fatalf("Live = %d, want 1", m.Live())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	for _, pid := range left {
		if err := syscall.Kill(pid, 0); err == nil {
			if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); !strings.Contains(string(st), ") Z") {
				t.Errorf("process %d outlived its group", pid)
			}
		}
	}
	for _, d := range g.Dirs() {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there: %v", d, err)
		}
	}
	if m.Live() != 0 {
		t.Fatalf("Live = %d after Remove, want 0", m.Live())
	}
}

// Usage is what the kernel counts of the group's processes: the memory
// a process holds, and the CPU time it used; a removed group has none.
func TestGroup_UsageIsTheKernelsAccounting(t *testing.T) {
	m := openHere(t)
	g := newGroup(t, m, Limits{MemoryMax: 256 << 20}, nil)
	before, err := g.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if before.Memory != 0 || before.CPU != 0 {
		t.Errorf("an empty group uses %+v", before)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), hogEnv+"=48", burnEnv+"=400ms")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	done, err := g.Prepare(cmd)
	if err != nil {
		t.Fatal(err)
	}
	err = cmd.Start()
	done()
	if err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	said := bufio.NewScanner(out)
	for said.Scan() && !strings.HasPrefix(said.Text(), "burnt ") {
	}
	u, err := g.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if u.Memory < 48<<20 || u.Memory > 256<<20 {
		t.Errorf("the group holds %s, want the 48 MiB touched and less than its limit", bytesize.Format(u.Memory))
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	cpuacct := slices.ContainsFunc(parseMounts(string(mounts)), func(mt mount) bool { return slices.Contains(mt.controllers, "cpuacct") })
	if !u.CPUCounted {
		if m.v2 || cpuacct {
			t.Errorf("CPU time is not counted, with %s", m)
		} else {
			t.Logf("no CPU accounting here (%s)", m)
		}
	} else if u.CPU < 300*time.Millisecond || u.CPU > time.Minute {
		t.Errorf("the group used %s of CPU, want the 400ms burnt and a little", u.CPU)
	}
	stdin.Close()
	cmd.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if u, err := g.Usage(); err == nil {
		t.Errorf("a removed group uses %+v", u)
	}
}

// On cgroup v2 Usage reads memory.current and cpu.stat's usage_usec.
func TestGroup_UsageReadsV2Files(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "memory.current"), []byte("123456789\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "cpu.stat"), []byte("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n"), 0o644)
	g := &Group{m: &Manager{v2: true}, name: "t", dirs: []hierarchy{{dir: dir}}}
	u, err := g.Usage()
	if err != nil || u.Memory != 123456789 || u.CPU != 2500*time.Millisecond || !u.CPUCounted {
		t.Fatalf("Usage = %+v, %v", u, err)
	}
	os.Remove(filepath.Join(dir, "cpu.stat"))
	if u, err := g.Usage(); err != nil || u.CPUCounted || u.Memory != 123456789 {
		t.Fatalf("without cpu.stat: %+v, %v", u, err)
	}
}

// A process past the group's memory limit is killed by the kernel, and
// the group counts it, also once it is removed.
func TestGroup_OutOfMemoryIsCounted(t *testing.T) {
	m := openHere(t)
	// The test binary may carry the race detector, whose shadow memory
	// counts too: the limit leaves room for it.
	g := newGroup(t, m, Limits{MemoryMax: 256 << 20}, nil)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), hogEnv+"=16")
	if out, err := run(t, g, cmd); err != nil || g.OOMKills() != 0 {
		t.Fatalf("16 MiB under a 256 MiB limit: %v, %d OOM kills: %s", err, g.OOMKills(), out)
	}
	cmd = exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), hogEnv+"=1024")
	out, err := run(t, g, cmd)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL || strings.Contains(out, "touched") {
		t.Fatalf("1 GiB under a 256 MiB limit ended with %v: %s", err, out)
	}
	if n := g.OOMKills(); n != 1 {
		t.Fatalf("OOMKills = %d, want 1", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if n := g.OOMKills(); n != 1 {
		t.Fatalf("OOMKills = %d once removed, want 1", n)
	}
}

// On cgroup v1 a process enters its group itself, as the user it runs
// as: New gives that user the group's cgroup.procs, without which the
// entry fails, said in words.
func TestGroup_AnotherUserEntersTheGroupGivenToIt(t *testing.T) {
	m := openHere(t)
	if m.v2 {
		t.Skip("on cgroup v2 the broker places the process itself")
	}
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	for _, tc := range []struct {
		name  string
		owner *syscall.Credential
	}{{"given", nobody}, {"not given", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGroup(t, m, Limits{PidsMax: 16}, tc.owner)
			cmd := exec.Command("sh", "-c", "id -u; cat /proc/self/cgroup")
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: nobody}
			cmd.Dir = "/"
			out, err := run(t, g, cmd)
			if tc.owner == nil {
				if err == nil || !strings.Contains(out, "cannot enter the agent's control group") {
					t.Fatalf("entered a group not given to it: %v: %s", err, out)
				}
				return
			}
			if err != nil || !strings.HasPrefix(out, "65534\n") || !strings.Contains(out, ":pids:") || !strings.Contains(out, "/"+g.Name()+"\n") {
				t.Fatalf("%v: %s", err, out)
			}
		})
	}
}

// What an earlier broker left (a group with a process still in it) is
// killed and removed when the next one opens the same name.
func TestOpen_RemovesAnEarlierBrokersLeftovers(t *testing.T) {
	first := openHere(t)
	g, err := first.New("left", Limits{PidsMax: 8}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("sleep", "60")
	done, err := g.Prepare(sleeper)
	if err != nil {
		t.Fatal(err)
	}
	err = sleeper.Start()
	done()
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- sleeper.Wait() }()
	// The sleeper is in the group once the shell has entered and run it.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(readFile(t, filepath.Join(g.dirs[0].dir, "cgroup.procs")), strconv.Itoa(sleeper.Process.Pid)) {
		if time.Now().After(deadline) {
			t.Fatal("the sleeper never entered its group")
		}
		time.Sleep(10 * time.Millisecond)
	}

	second, err := open(mustLocate(t), Options{Name: testName(t), Logger: zerolog.New(zerolog.NewTestWriter(t))}, required)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	select {
	case err := <-waited:
		if ws := sleeper.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("the leftover process ended with %v, not killed", err)
		}
	case <-time.After(5 * time.Second):
		sleeper.Process.Kill()
		<-waited
		t.Fatal("the leftover process still runs")
	}
	for _, d := range g.Dirs() {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("leftover %s is still there", d)
		}
	}
}

func mustLocate(t *testing.T) layout {
	l, err := locateSelf()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// On cgroup v2 the process is made inside its group (CLONE_INTO_CGROUP),
// cgroup.kill ends everything in it, and the group is removed. Shown on
// this machine's unified hierarchy, which has no controllers to limit
// with; and a unified hierarchy without memory and pids delegated is
// said to be unusable, with the unit's fix.
func TestGroup_V2PlacesKillsAndRemoves(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	l, err := locateSelf()
	if err != nil {
		t.Skip(err)
	}
	unified := ""
	if l.v2 {
		unified = l.own[0].dir
	} else {
		mounts, _ := os.ReadFile("/proc/self/mountinfo")
		for _, mt := range parseMounts(string(mounts)) {
			if mt.v2 && mt.root == "/" {
				unified = mt.point
			}
		}
	}
	if unified == "" {
		t.Skip("no unified hierarchy here")
	}
	own := filepath.Join(unified, testName(t))
	if err := os.Mkdir(own, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(own)
	v2 := layout{v2: true, own: []hierarchy{{dir: own}}, path: "/" + testName(t)}

	ctrls, _ := readWords(filepath.Join(own, "cgroup.controllers"))
	if len(ctrls) == 0 {
		if err := v2.check(); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "not delegated") || !strings.Contains(err.Error(), "Delegate=yes") {
			t.Errorf("a unified hierarchy without controllers: %v", err)
		}
	}

	m, err := open(v2, Options{Name: "agents", Logger: zerolog.New(zerolog.NewTestWriter(t))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	g := newGroup(t, m, Limits{}, nil)
	cmd := exec.Command("sh", "-c", "cat /proc/self/cgroup; sleep 60 & sleep 60")
	done, err := g.Prepare(cmd)
	if err != nil {
		t.Fatal(err)
	}
	out := &strings.Builder{}
	cmd.Stdout = out
	err = cmd.Start()
	done()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(g.Procs()) < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := len(g.Procs()); n != 3 {
		t.Errorf("%d processes in the group, want the shell and its two sleepers", n)
	}
	g.Kill()
	waitErr := cmd.Wait()
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() {
		t.Errorf("the group's shell ended with %v, not killed", waitErr)
	}
	if want := "0::/" + testName(t) + "/agents/" + g.Name(); !strings.Contains(out.String(), want) {
		t.Errorf("the process started in %q, want %s", out.String(), want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(g.Dirs()[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the group is still there: %v", err)
	}
}

// Sweep takes away what a killed broker left, base directory and all,
// killing what still runs there, when no broker of that name will start
// again.
func TestSweep_RemovesWhatAKilledBrokerLeft(t *testing.T) {
	m := openHere(t)
	g, err := m.New("left", Limits{PidsMax: 8}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("sleep", "60")
	done, err := g.Prepare(sleeper)
	if err != nil {
		t.Fatal(err)
	}
	err = sleeper.Start()
	done()
	if err != nil {
		t.Fatal(err)
	}
	waited := false
	t.Cleanup(func() {
		if !waited {
			sleeper.Process.Kill()
			sleeper.Wait()
		}
	})
	deadline := time.Now().Add(5 * time.Second)
	for len(g.Procs()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := Sweep(testName(t), zerolog.New(zerolog.NewTestWriter(t))); err != nil {
		t.Fatal(err)
	}
	for _, d := range m.Dirs() {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s outlived the sweep: %v", d, err)
		}
	}
	err = sleeper.Wait()
	waited = true
	if err == nil || !sleeper.ProcessState.Sys().(syscall.WaitStatus).Signaled() {
		t.Errorf("the process in the left group ended with %v, not killed", err)
	}
}
