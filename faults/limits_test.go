package faults

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"acpbroker/cgroup"
	"acpbroker/internal/agenttest"
	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakediscord"
)

// cgroupsStarted is what the broker logs once its agents run in control
// groups of their own, with the directories they are made in.
const cgroupsStarted = "each agent runs in a control group of its own"

// needCgroups skips a test where this machine gives the broker no
// control groups to make.
func needCgroups(t *testing.T) {
	t.Helper()
	if _, err := cgroup.Probe(); err != nil {
		t.Skipf("no control groups for agents here: %v", err)
	}
}

// asNobody makes the world's agents run as nobody, from a copy of the
// fake agent that user may run, in a directory it may enter.
func (w *world) asNobody() {
	w.t.Helper()
	dir := agenttest.OtherUserDir(w.t)
	bin := filepath.Join(dir, "fakeagent")
	data, err := os.ReadFile(w.Bins.Agent)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		w.t.Fatal(err)
	}
	w.Conf["agent.run_as_user"] = "nobody"
	w.Conf["agent.command"] = bin
	w.Conf["agent.cwd"] = filepath.Join(dir, "work")
}

// groupDirs are the broker's agents' control groups now, in each
// hierarchy (the directories it logged at start).
func (b *broker) groupDirs() map[string][]string {
	b.t.Helper()
	lines := b.Log.Lines(func(m map[string]any) bool { return m["message"] == cgroupsStarted })
	if len(lines) == 0 {
		b.t.Fatalf("the broker did not put its agents in control groups; log:\n%s", b.Log.Tail(8<<10))
	}
	bases, _ := lines[len(lines)-1]["dirs"].([]any)
	out := map[string][]string{}
	for _, base := range bases {
		base := base.(string)
		out[base] = nil
		entries, err := os.ReadDir(base)
		if err != nil {
			continue // removed at the broker's stop
		}
		for _, e := range entries {
			if e.IsDir() {
				out[base] = append(out[base], filepath.Join(base, e.Name()))
			}
		}
	}
	return out
}

// awaitGroups waits up to 10s for each hierarchy to hold n agent groups.
func (b *broker) awaitGroups(n int) map[string][]string {
	b.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		dirs, ok := b.groupDirs(), true
		for _, d := range dirs {
			ok = ok && len(d) == n
		}
		if ok {
			return dirs
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("agent control groups %v, want %d in each hierarchy", dirs, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// groupFile reads a file of the one agent group of the hierarchy that
// has it.
func groupFile(t *testing.T, dirs map[string][]string, name string) string {
	t.Helper()
	for _, groups := range dirs {
		for _, g := range groups {
			if b, err := os.ReadFile(filepath.Join(g, name)); err == nil {
				return strings.TrimSpace(string(b))
			}
		}
	}
	t.Fatalf("no agent group has %s: %v", name, dirs)
	return ""
}

// An agent that uses more memory than its profile's memory_max is
// killed by the kernel, in the default bubblewrap sandbox, as root's
// agent and as another user's; the thread is told so in words, the
// metric counts it, the next message gets a fresh agent, and the
// agents' control groups are gone once the agents stop.
func TestLimits_AnAgentPastItsMemoryLimitIsKilledAndTheThreadTold(t *testing.T) {
	needBwrap(t)
	needCgroups(t)
	for _, user := range []string{"root", "nobody"} {
		t.Run(user, func(t *testing.T) {
			w := newWorld(t, setup{conf: settings{"agent.memory_max": "64MiB", "turn.timeout": "5m"}})
			if user == "nobody" {
				w.asNobody()
			}
			b := w.start()
			thread := w.mention(alice, "alloc 1024")
			got := w.awaitAnswers(thread, 1)[0]
			if want := "-# ❌ failed: the agent ran out of memory (limit 64 MiB)"; !strings.HasPrefix(got.Footer, want) {
				t.Fatalf("the turn ended with %q, want %q", got.Footer, want)
			}
			if !strings.Contains(got.Text, "allocating 1024 MiB") || strings.Contains(got.Text, "allocated") {
				t.Errorf("the agent said %q before it ended", got.Text)
			}
			b.awaitMetric(`acp_broker_agent_oom_kills_total`, func(v float64) bool { return v == 1 })
			b.awaitMetric(`acp_broker_turns_total{outcome="agent_exited"}`, func(v float64) bool { return v == 1 })

			w.Discord.Post(thread, alice, "alloc 16")
			got = w.awaitAnswers(thread, 2)[1]
			if !strings.Contains(got.Text, "allocated 16 MiB") || !strings.HasPrefix(got.Footer, "-# ✅ done") {
				t.Fatalf("16 MiB under the limit got %q / %q", got.Text, got.Footer)
			}
			dirs := b.awaitGroups(1)
			if v := groupFile(t, dirs, "memory.limit_in_bytes"); v != strconv.Itoa(64<<20) {
				t.Errorf("the agent's group has memory.limit_in_bytes %s", v)
			}
			b.awaitMetric(`acp_broker_agent_cgroups`, func(v float64) bool { return v == 1 })
			w.slash(thread, alice, "reset")
			b.awaitGroups(0)
			b.awaitMetric(`acp_broker_agent_cgroups`, func(v float64) bool { return v == 0 })
			b.stop()
			for base := range dirs {
				if _, err := os.Stat(base); !os.IsNotExist(err) {
					t.Errorf("%s outlived the broker: %v", base, err)
				}
			}
		})
	}
}

// A fork bomb in one thread, its agent run as nobody in the default
// sandbox, stops at the profile's pids_max: the kernel refuses it more,
// while the other threads' agents start and answer; and what it forked
// is gone with its agent.
func TestLimits_AForkBombInOneThreadLeavesTheOthersAnswering(t *testing.T) {
	needBwrap(t)
	needCgroups(t)
	const limit = 64
	w := newWorld(t, setup{conf: settings{"agent.pids_max": limit, "pool.max_sessions": 3}})
	w.asNobody()
	b := w.start()
	bomb := w.mention(alice, "fork-bomb 1000")
	if got := w.awaitAnswers(bomb, 1)[0]; !strings.Contains(got.Text, "fork bomb started") {
		t.Fatalf("the bomb's thread got %q", got.Text)
	}
	dirs := b.awaitGroups(1)
	if v := groupFile(t, dirs, "pids.max"); v != strconv.Itoa(limit) {
		t.Fatalf("the bomb's group has pids.max %s", v)
	}
	// The kernel has refused it a fork: it is at the limit.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.HasPrefix(groupFile(t, dirs, "pids.events"), "max ") || groupFile(t, dirs, "pids.events") == "max 0" {
		if time.Now().After(deadline) {
			t.Fatalf("the fork bomb never reached its limit: pids.current %s", groupFile(t, dirs, "pids.current"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	n, _ := strconv.Atoi(groupFile(t, dirs, "pids.current"))
	if n > limit || n < limit/2 {
		t.Errorf("the bomb's group holds %d processes and threads, want at most %d, and most of them", n, limit)
	}
	t.Logf("the bomb's group: %d processes and threads, %s", n, groupFile(t, dirs, "pids.events"))

	start := time.Now()
	others := []string{w.mention(bob, "stream 3"), w.mention(carol, "stream 3")}
	for _, thread := range others {
		got := w.awaitAnswers(thread, 1)[0]
		if !strings.Contains(got.Text, "chunk 3") || !strings.HasPrefix(got.Footer, "-# ✅ done") {
			t.Fatalf("a thread beside the bomb got %q / %q", got.Text, got.Footer)
		}
	}
	t.Logf("two other threads' agents started and answered beside the bomb in %s", time.Since(start))
	within(t, "two other threads' agents starting and answering beside the bomb", time.Since(start), 0, 20*time.Second)
	for _, g := range b.awaitGroups(3)[pidsBase(t, dirs)] {
		v, _ := os.ReadFile(filepath.Join(g, "pids.current"))
		if n, _ := strconv.Atoi(strings.TrimSpace(string(v))); n > limit {
			t.Errorf("%s holds %d processes and threads, past its limit of %d", g, n, limit)
		}
	}

	w.slash(bomb, alice, "reset")
	b.awaitGroups(2)
	b.stop()
	for base := range dirs {
		if _, err := os.Stat(base); !os.IsNotExist(err) {
			t.Errorf("%s outlived the broker: %v", base, err)
		}
	}
}

// pidsBase is the directory of the pids hierarchy's agent groups.
func pidsBase(t *testing.T, dirs map[string][]string) string {
	t.Helper()
	for base, groups := range dirs {
		for _, g := range groups {
			if _, err := os.Stat(filepath.Join(g, "pids.max")); err == nil {
				return base
			}
		}
	}
	t.Fatalf("no pids hierarchy in %v", dirs)
	return ""
}

// A broker that cannot make control groups (here: one running as an
// ordinary user) says so, in check-config and in its log at start, with
// the reason, and runs its agents without limits.
func TestLimits_WithoutControlGroupsItIsSaidAndAgentsStillRun(t *testing.T) {
	needBwrap(t)
	dir := agenttest.OtherUserDir(t)
	for _, bin := range []string{bins.Broker, bins.Agent} {
		data, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(bin)), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	config := filepath.Join(dir, "broker.toml")
	os.WriteFile(config, []byte(settings{
		"chat.platform":    "console",
		"log.format":       "json",
		"http.listen":      "",
		"state.dir":        filepath.Join(dir, "state"),
		"agent.command":    filepath.Join(dir, "fakeagent"),
		"agent.cwd":        filepath.Join(dir, "work"),
		"agent.memory_max": "1GiB",
	}.TOML()), 0o644)
	broker := func(stdin string, args ...string) (stdout, stderr string, err error) {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(dir, "broker"), append(args, "--config", config)...)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: agenttest.Nobody, Gid: agenttest.Nobody}}
		cmd.Stdin = strings.NewReader(stdin)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err = cmd.Run()
		return out.String(), errOut.String(), err
	}

	out, errOut, err := broker("", "check-config")
	if err != nil || !strings.Contains(out, "configuration is valid") {
		t.Fatalf("check-config: %v\n%s%s", err, out, errOut)
	}
	if !strings.Contains(errOut, "broker: warning: memory_max and pids_max: agents' resource limits cannot be applied: ") ||
		!strings.Contains(errOut, "is not writable by the broker (uid 65534)") || !strings.Contains(errOut, "agents run without resource limits") {
		t.Errorf("check-config did not say why agents get no limits:\n%s", errOut)
	}

	out, errOut, err = broker("stream 2\n", "run")
	if err != nil || !strings.Contains(out, "chunk 2") {
		t.Fatalf("the broker without control groups did not answer: %v\n%s\n%s", err, out, errOut)
	}
	var warned bool
	for line := range strings.Lines(errOut) {
		warned = warned || strings.Contains(line, `"level":"warn"`) && strings.Contains(line, "agents run without resource limits (memory_max, pids_max)") &&
			strings.Contains(line, "is not writable by the broker (uid 65534)")
	}
	if !warned {
		t.Errorf("the broker did not warn at start that agents run without limits:\n%s", errOut)
	}
}

// escape is a script an agent runs that starts a process out of its
// process group and session (as a daemon does), which writes its pid to
// escaped.pid; the process-group kills of the stop escalation miss it.
const escape = `setsid -f sh -c 'echo $$ > escaped.pid; exec sleep 600' </dev/null >/dev/null 2>&1
while [ ! -s escaped.pid ]; do sleep 0.05; done
echo escaped
`

// escapee has the agent of a new thread start a process out of its
// process group, and returns the thread and that process's pid.
func (w *world) escapee(u fakediscord.User) (thread string, pid int) {
	w.t.Helper()
	thread = w.mention(u, "stream 1")
	w.awaitAnswers(thread, 1)
	dir := filepath.Join(w.Work, thread)
	if err := os.WriteFile(filepath.Join(dir, "escape.sh"), []byte(escape), 0o644); err != nil {
		w.t.Fatal(err)
	}
	w.Discord.Post(thread, u, "run sh escape.sh")
	if got := w.awaitAnswers(thread, 2)[1]; !strings.Contains(got.Text, "escaped") {
		w.t.Fatalf("the agent's escape said %q", got.Text)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "escaped.pid"))
	pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	if pid == 0 || !agenttest.Running(pid) {
		w.t.Fatalf("the escaped process (%q) is not running", b)
	}
	return thread, pid
}

// What an agent started out of its process group is killed with the
// agent's control group: when the agent is reset, and, for a broker
// killed with SIGKILL, when the next broker starts on the same state and
// removes the groups the killed one left. (Unsandboxed, so that the
// agent outlives the killed broker and the pids are the host's.)
func TestLimits_WhatEscapesTheProcessGroupDiesWithTheControlGroup(t *testing.T) {
	needCgroups(t)
	w := newWorld(t, setup{conf: settings{"agent.sandbox": "none"}})
	b := w.start()
	thread, pid := w.escapee(alice)
	w.slash(thread, alice, "reset")
	if !agenttest.WaitGone(pid, 10*time.Second) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("process %d, out of its agent's process group, outlived the agent's reset", pid)
	}
	b.awaitGroups(0)

	_, pid = w.escapee(bob)
	left := b.awaitGroups(1)
	next := &broker{Broker: brokertest.MustGet(t, patience, func(ctx context.Context) (*brokertest.Broker, error) {
		return w.Restart(ctx, b.Broker, true)
	}), t: t}
	if !agenttest.WaitGone(pid, 10*time.Second) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("process %d, left by a killed broker's agent, outlived the next broker's start", pid)
	}
	for _, groups := range left {
		for _, g := range groups {
			if _, err := os.Stat(g); !os.IsNotExist(err) {
				t.Errorf("the killed broker's group %s is still there", g)
			}
			if len(next.Log.Grep("removed a leftover agent control group", filepath.Base(g))) == 0 {
				t.Errorf("the next broker did not say it removed %s", filepath.Base(g))
			}
		}
	}
	next.awaitGroups(0)
	next.stop()
}
