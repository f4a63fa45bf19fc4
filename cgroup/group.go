package cgroup

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Group is one agent's control group. Its methods are safe for
// concurrent use. A nil *Group is no group: Prepare leaves the command as
// it is, Kill and Remove do nothing, OOMKills is 0.
type Group struct {
	m      *Manager
	name   string
	dirs   []hierarchy // its directory in each hierarchy
	made   []hierarchy // those New has made, for discard
	limits Limits

	mu      sync.Mutex
	removed bool
	ooms    uint64 // as read when removed
}

// Name is the group's directory name.
func (g *Group) Name() string { return g.name }

// Limits are what the group was made with.
func (g *Group) Limits() Limits { return g.limits }

// Dirs are the group's directories, one per hierarchy.
func (g *Group) Dirs() []string {
	out := make([]string, len(g.dirs))
	for i, d := range g.dirs {
		out[i] = d.dir
	}
	return out
}

// shell runs the v1 entry; enterScript writes the shell's pid into each
// cgroup.procs file named before "--" and then runs what follows in its
// place, so that the program is in its group before it runs anything.
const (
	shell       = "/bin/sh"
	enterScript = `while [ "$1" != -- ]; do echo $$ >"$1" || { echo "cannot enter the agent's control group ($1)" >&2; exit 126; }; shift; done; shift; exec "$@"`
)

// Prepare makes cmd, not yet started, start inside the group. On cgroup
// v2 the kernel makes the process there (clone3 with CLONE_INTO_CGROUP,
// by the broker, whatever user the process runs as). On v1, cmd becomes a
// shell that writes its own pid into the group's cgroup.procs files and
// then executes cmd's program (cmd.Path, resolved as exec.Command does)
// with cmd's arguments; as the user cmd runs as, which New gave those
// files to. Call done once cmd.Start has returned.
func (g *Group) Prepare(cmd *exec.Cmd) (done func(), err error) {
	if g == nil || cmd.Err != nil {
		return func() {}, nil
	}
	if g.m.v2 {
		fd, err := unix.Open(g.dirs[0].dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("cgroup %s: %w", g.dirs[0].dir, err)
		}
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
		return func() { unix.Close(fd) }, nil
	}
	args := []string{"sh", "-c", enterScript, "cgroup-enter"}
	for _, d := range g.dirs {
		args = append(args, filepath.Join(d.dir, "cgroup.procs"))
	}
	args = append(args, "--", cmd.Path)
	if len(cmd.Args) > 1 {
		args = append(args, cmd.Args[1:]...)
	}
	cmd.Path, cmd.Args = shell, args
	return func() {}, nil
}

// apply writes the limits into the group's files. Memory on v1 bounds
// swap too where the kernel accounts it (memsw); on v2, swap is off.
func (g *Group) apply(lim Limits) error {
	for _, d := range g.dirs {
		var files [][2]string
		mem, pids := strconv.FormatInt(lim.MemoryMax, 10), strconv.FormatInt(lim.PidsMax, 10)
		switch {
		case g.m.v2:
			if lim.MemoryMax > 0 {
				files = append(files, [2]string{"memory.max", mem}, [2]string{"memory.swap.max", "0"})
			}
			if lim.PidsMax > 0 {
				files = append(files, [2]string{"pids.max", pids})
			}
		case d.controller == "memory" && lim.MemoryMax > 0:
			files = append(files, [2]string{"memory.limit_in_bytes", mem}, [2]string{"memory.memsw.limit_in_bytes", mem})
		case d.controller == "pids" && lim.PidsMax > 0:
			files = append(files, [2]string{"pids.max", pids})
		}
		for _, f := range files {
			err := write(filepath.Join(d.dir, f[0]), f[1])
			if errors.Is(err, os.ErrNotExist) && (f[0] == "memory.memsw.limit_in_bytes" || f[0] == "memory.swap.max") {
				continue // the kernel accounts no swap
			}
			if err != nil {
				return fmt.Errorf("cgroup: setting %s to %s: %w", filepath.Join(d.dir, f[0]), f[1], err)
			}
		}
	}
	return nil
}

// killPasses bounds Kill's rounds on cgroup v1, where what a process
// forks between reading the group and killing it needs another round.
const killPasses = 8

// Kill sends SIGKILL to every process in the group, and to what they
// fork meanwhile; it does not wait for them to die.
func (g *Group) Kill() {
	if g == nil {
		return
	}
	if g.m.v2 {
		if err := write(filepath.Join(g.dirs[0].dir, "cgroup.kill"), "1"); err == nil {
			return
		}
	}
	for range killPasses {
		pids := g.pids()
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// pids are the processes in the group, in any of its hierarchies.
func (g *Group) pids() []int {
	var out []int
	for _, d := range g.dirs {
		words, _ := readWords(filepath.Join(d.dir, "cgroup.procs"))
		for _, w := range words {
			if pid, err := strconv.Atoi(w); err == nil && pid > 0 && !slices.Contains(out, pid) {
				out = append(out, pid)
			}
		}
	}
	return out
}

// Procs are the processes in the group now.
func (g *Group) Procs() []int { return g.pids() }

// removeRetry is how often Remove tries again while the group's last
// processes die.
const removeRetry = 10 * time.Millisecond

// Remove kills what is left in the group and removes it, trying again
// until its processes are gone or ctx ends. OOMKills keeps what it had.
// Safe to call more than once.
func (g *Group) Remove(ctx context.Context) error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.removed {
		return nil
	}
	g.ooms = g.readOOMKills()
	if err := g.remove(ctx); err != nil {
		return err
	}
	g.removed = true
	g.m.mu.Lock()
	g.m.live--
	g.m.mu.Unlock()
	return nil
}

func (g *Group) remove(ctx context.Context) error {
	for {
		g.Kill()
		err := g.rmdir()
		if err == nil || !errors.Is(err, unix.EBUSY) {
			return err
		}
		t := time.NewTimer(removeRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("cgroup %s: %w: %w", g.name, context.Cause(ctx), err)
		case <-t.C:
		}
	}
}

// rmdir removes the group's directories still there.
func (g *Group) rmdir() error {
	var errs []error
	for _, d := range g.dirs {
		if err := unix.Rmdir(d.dir); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("%s: %w", d.dir, err))
		}
	}
	return errors.Join(errs...)
}

// discard undoes a New that failed: nothing runs in the group yet.
func (g *Group) discard() {
	for _, d := range g.made {
		unix.Rmdir(d.dir)
	}
	g.m.mu.Lock()
	g.m.live--
	g.m.mu.Unlock()
}

// OOMKills counts the group's processes the kernel's OOM killer killed:
// for the group's memory limit, or for the machine's lack of memory.
func (g *Group) OOMKills() uint64 {
	if g == nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.removed {
		return g.ooms
	}
	return g.readOOMKills()
}

func (g *Group) readOOMKills() uint64 {
	for _, d := range g.dirs {
		file := ""
		switch {
		case g.m.v2:
			file = "memory.events"
		case d.controller == "memory":
			file = "memory.oom_control"
		default:
			continue
		}
		f, err := os.Open(filepath.Join(d.dir, file))
		if err != nil {
			return 0
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "oom_kill "); ok {
				n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				return n
			}
		}
		return 0
	}
	return 0
}

// Usage is what the kernel has counted of a group's processes.
type Usage struct {
	// Memory is the memory charged to the group now, in bytes: what its
	// limit is held against (page cache included).
	Memory int64
	// CPU is the CPU time its processes have used, those gone included;
	// CPUCounted is false where no hierarchy counts it (cgroup v1
	// without cpuacct).
	CPU        time.Duration
	CPUCounted bool
}

// Usage reads what the kernel has counted of the group: its memory
// (memory.current on v2, memory.usage_in_bytes on v1) and its CPU time
// (cpu.stat's usage_usec on v2, cpuacct.usage on v1). It fails once the
// group is removed.
func (g *Group) Usage() (Usage, error) {
	var u Usage
	if g == nil {
		return u, errors.New("cgroup: no group")
	}
	g.mu.Lock()
	removed := g.removed
	g.mu.Unlock()
	if removed {
		return u, fmt.Errorf("cgroup %s: removed", g.name)
	}
	if g.m.v2 {
		dir := g.dirs[0].dir
		mem, err := readInt(filepath.Join(dir, "memory.current"))
		if err != nil {
			return u, err
		}
		u.Memory = mem
		if usec, err := statField(filepath.Join(dir, "cpu.stat"), "usage_usec"); err == nil {
			u.CPU, u.CPUCounted = time.Duration(usec)*time.Microsecond, true
		}
		return u, nil
	}
	memRead := false
	for _, d := range g.dirs {
		if d.controller == "memory" {
			mem, err := readInt(filepath.Join(d.dir, "memory.usage_in_bytes"))
			if err != nil {
				return u, err
			}
			u.Memory, memRead = mem, true
		}
		// cpuacct in a hierarchy of its own, or mounted with cpu.
		if ns, err := readInt(filepath.Join(d.dir, "cpuacct.usage")); err == nil && !u.CPUCounted {
			u.CPU, u.CPUCounted = time.Duration(ns), true
		}
	}
	if !memRead {
		return u, fmt.Errorf("cgroup %s: no memory hierarchy", g.name)
	}
	return u, nil
}

// readInt reads a cgroup file holding one number.
func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}

// statField reads the number of key in a flat-keyed cgroup file
// ("usage_usec 1234" lines).
func statField(path, key string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s", path, key)
}
