package pool

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Usage is what an agent uses now, as the kernel counts it.
type Usage struct {
	// Memory is the memory its processes hold, in bytes; MemoryMax its
	// limit (0: none).
	Memory, MemoryMax int64
	// CPU is the CPU time its processes have used; CPUCounted is false
	// where nothing counts it.
	CPU        time.Duration
	CPUCounted bool
	// Source says where the figures come from: "cgroup", the agent's
	// control group (memory charged to it, page cache included; the CPU
	// time of every process it ever held, its terminals' commands too);
	// or "proc", for an agent without one, the resident memory and CPU
	// time of its process and its descendants now (and of the children
	// they have waited for) as /proc has them.
	Source string
}

// Usage sources.
const (
	UsageCgroup = "cgroup"
	UsageProc   = "proc"
)

// Usage reads what the agent uses now: from its control group if it
// has one, else from /proc. It fails once the agent has stopped.
func (a *Agent) Usage() (Usage, error) { return a.usage(&procTable{root: "/proc"}) }

// Usages reads what each of agents uses now, as Usage does, reading
// /proc once for all of those without a control group.
func Usages(agents []*Agent) ([]Usage, []error) {
	procs := &procTable{root: "/proc"}
	us, errs := make([]Usage, len(agents)), make([]error, len(agents))
	for i, a := range agents {
		us[i], errs[i] = a.usage(procs)
	}
	return us, errs
}

// TurnEnder is a Proc on an agent host that is told when a turn of its
// thread ends, for what the host does then (a worktree's branch pushed).
type TurnEnder interface {
	TurnEnded()
}

// UsageReporter is a Proc that says itself what it uses: an agent on an
// agent host, whose process and control group are not this machine's.
type UsageReporter interface {
	Usage() (Usage, error)
}

func (a *Agent) usage(procs *procTable) (Usage, error) {
	if a.Where != "" {
		if r, ok := a.Proc.(UsageReporter); ok {
			return r.Usage()
		}
		return Usage{}, fmt.Errorf("the agent runs on agent host %s, which does not say what it uses", a.Where)
	}
	if a.group != nil {
		u, err := a.group.Usage()
		if err != nil {
			return Usage{}, err
		}
		return Usage{Memory: u.Memory, MemoryMax: a.group.Limits().MemoryMax, CPU: u.CPU, CPUCounted: u.CPUCounted, Source: UsageCgroup}, nil
	}
	pid := a.Proc.PID()
	if pid <= 0 {
		return Usage{}, errors.New("the agent has no process")
	}
	mem, cpu, err := procs.treeUsage(pid)
	if err != nil {
		return Usage{}, err
	}
	return Usage{Memory: mem, CPU: cpu, CPUCounted: true, Source: UsageProc}, nil
}

// procStat is what one /proc/PID/stat says that treeUsage needs.
type procStat struct {
	ppid int
	cpu  time.Duration // utime+stime+cutime+cstime
	rss  int64         // bytes
}

// userHZ is the unit of /proc's CPU times: USER_HZ, 100 on Linux
// whatever the kernel's own tick.
const userHZ = 100

// procTable is the processes of a /proc file system (root), read at its
// first use.
type procTable struct {
	root     string
	read     bool
	err      error
	stats    map[int]procStat
	children map[int][]int
}

func (t *procTable) load() error {
	if t.read {
		return t.err
	}
	t.read = true
	entries, err := os.ReadDir(t.root)
	if err != nil {
		t.err = err
		return err
	}
	t.stats, t.children = map[int]procStat{}, map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readStat(t.root, p)
		if err != nil {
			continue // gone meanwhile
		}
		t.stats[p] = st
		t.children[st.ppid] = append(t.children[st.ppid], p)
	}
	return nil
}

// treeUsage sums the resident memory and CPU time of process pid and
// of its descendants.
func (t *procTable) treeUsage(pid int) (mem int64, cpu time.Duration, err error) {
	if err := t.load(); err != nil {
		return 0, 0, err
	}
	stats, children := t.stats, t.children
	if _, ok := stats[pid]; !ok {
		return 0, 0, fmt.Errorf("process %d is gone", pid)
	}
	for todo := []int{pid}; len(todo) > 0; {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		st := stats[p]
		mem += st.rss
		cpu += st.cpu
		todo = append(todo, children[p]...)
	}
	return mem, cpu, nil
}

var pageSize = int64(os.Getpagesize())

// readStat reads /proc/PID/stat. The command's name, in parentheses,
// may hold spaces and parentheses: the fields are read after the last.
func readStat(proc string, pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("%s/%d/stat", proc, pid))
	if err != nil {
		return procStat{}, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	// After the name: state (field 3), ppid (4), …, utime (14), stime,
	// cutime, cstime (17), …, rss (24, in pages).
	f := strings.Fields(s[i+1:])
	if len(f) < 22 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	num := func(field int) int64 {
		n, _ := strconv.ParseInt(f[field-3], 10, 64)
		return n
	}
	ticks := num(14) + num(15) + num(16) + num(17)
	return procStat{
		ppid: int(num(4)),
		cpu:  time.Duration(ticks) * time.Second / userHZ,
		rss:  num(24) * pageSize,
	}, nil
}

// Agents are the live agents, by thread.
func (p *Pool) Agents() []*Agent {
	p.mu.Lock()
	out := make([]*Agent, 0, len(p.agents))
	for _, a := range p.agents {
		out = append(out, a)
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b *Agent) int { return strings.Compare(a.Thread, b.Thread) })
	return out
}
