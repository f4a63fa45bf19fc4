package brokertest

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"acpbroker/internal/agenttest"
)

// Proc is a running process of the host that belongs to a World's
// agents, as /proc shows it from outside any sandbox.
type Proc struct {
	PID     int
	Cmdline string // its arguments, space-separated
	// Start is when it started, in clock ticks since boot: with PID, it
	// tells the process from a later one given the same pid.
	Start uint64
	// PIDNS is its PID namespace ("pid:[4026532…]"); Sandboxed is set
	// when that is not the host's (the tests').
	PIDNS     string
	Sandboxed bool
}

// AgentProcs lists every running process of the host that belongs to the
// World's agents, sandboxed or not: the agents, what they started, the
// commands they run through the broker's terminals, and bubblewrap
// around any of them. It looks from outside, in /proc, and knows them by
// the environment each inherits from the broker (HOME is the World's
// Dir; the broker passes it on to every agent and terminal, and children
// keep it), by the mark the World's brokers give each sandbox's
// bubblewrap (its init in the sandbox carries it too), and by the PID
// namespace of such a process seen in the same look: a process of that
// namespace that dropped its environment is still the agent's, and the
// namespace lives only as long as its marked init. (A namespace seen
// earlier is not trusted: the kernel gives a later one the same name.)
// The World's brokers themselves are not listed.
func (w *World) AgentProcs() []Proc {
	self, _ := os.Readlink("/proc/self/ns/pid")
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	w.mu.Lock()
	brokers := slices.Clone(w.brokerPIDs)
	w.mu.Unlock()
	markers := [][]byte{[]byte("HOME=" + w.Dir + "\x00")}
	for _, b := range brokers {
		markers = append(markers, []byte(sandboxMarkVar+"="+strconv.Itoa(b)+"."))
	}
	type seen struct {
		Proc
		marked bool
	}
	var all []seen
	sandboxes := map[string]bool{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || slices.Contains(brokers, pid) || !agenttest.Running(pid) {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		ns, err := os.Readlink(filepath.Join(dir, "ns", "pid"))
		if err != nil {
			continue
		}
		env, _ := os.ReadFile(filepath.Join(dir, "environ"))
		marked := false
		for _, m := range markers {
			if bytes.HasPrefix(env, m) || bytes.Contains(env, append([]byte{0}, m...)) {
				marked = true
				break
			}
		}
		sandboxed := ns != self
		if marked && sandboxed {
			sandboxes[ns] = true
		}
		cmd, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		start, ok := startTicks(pid)
		if !ok {
			continue
		}
		all = append(all, seen{Proc{PID: pid, Cmdline: strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " ")), Start: start, PIDNS: ns, Sandboxed: sandboxed}, marked})
	}
	var out []Proc
	for _, p := range all {
		if p.marked || p.Sandboxed && sandboxes[p.PIDNS] {
			out = append(out, p.Proc)
		}
	}
	return out
}

// sandboxMarkVar is the variable by which a broker marks the bubblewrap
// processes of each sandbox it starts, "<the broker's pid>.<count>".
const sandboxMarkVar = "ACP_BROKER_SANDBOX"

// LeftoverProcs waits up to within for every process AgentProcs lists to
// be gone, and returns those still running, killing them.
func (w *World) LeftoverProcs(within time.Duration) []Proc {
	deadline := time.Now().Add(within)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		left := w.AgentProcs()
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			for _, p := range left {
				syscall.Kill(p.PID, syscall.SIGKILL)
			}
			return left
		}
		<-tick.C
	}
}

// Running reports whether the process still runs: its pid is a live
// process that started when it did.
func (p Proc) Running() bool {
	start, ok := startTicks(p.PID)
	return ok && start == p.Start && agenttest.Running(p.PID)
}

// WaitGone waits up to within for the process to stop running and
// reports whether it did.
func (p Proc) WaitGone(within time.Duration) bool {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for p.Running() {
		select {
		case <-deadline.C:
			return !p.Running()
		case <-tick.C:
		}
	}
	return true
}

// startTicks is field 22 of /proc/<pid>/stat: when the process started.
func startTicks(pid int) (uint64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	// After the command: state is field 3, start time field 22.
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(f[19], 10, 64)
	return n, err == nil
}
