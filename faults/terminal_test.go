package faults

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"acpbroker/internal/agenttest"
	"acpbroker/internal/brokertest"
)

// A command an agent runs through the broker's terminal shows its output
// live in the thread, and /cancel ends it: the shell, which ignores
// nothing, and its sleeping grandchild are gone from the host, sandboxed
// or not, no terminal stays open, and the agent, which answered the
// cancel, serves the next message.
func TestTerminal_SlashCancelKillsTheCommandAndItsGrandchild(t *testing.T) {
	for _, sandbox := range []string{"bwrap", "none"} {
		t.Run(sandbox, func(t *testing.T) {
			if sandbox == "bwrap" {
				needBwrap(t)
			}
			slashCancelKillsTheCommand(t, sandbox)
		})
	}
}

func slashCancelKillsTheCommand(t *testing.T, sandbox string) {
	w := newWorld(t, setup{conf: settings{"agent.sandbox": sandbox}})
	b := w.start()
	thread := w.mention(alice, "terminal-long")
	var grandchild, shell int
	said := w.awaitBotText(thread, "grandchild:").Content
	fmt.Sscanf(said[strings.Index(said, "grandchild:"):], "grandchild:%d shell:%d", &grandchild, &shell)
	// The command's processes, seen from the host (sandboxed, the pids
	// the shell says are its sandbox's): the shell, its grandchild, and
	// bubblewrap around them.
	var command []brokertest.Proc
	for _, p := range w.agentProcs(3) {
		if strings.Contains(p.Cmdline, "sleep 300") {
			command = append(command, p)
		}
	}
	pids := func() (out []int) {
		for _, p := range command {
			out = append(out, p.PID)
		}
		return out
	}()
	if len(command) < 2 || sandbox == "none" && (!slices.Contains(pids, grandchild) || !slices.Contains(pids, shell)) {
		t.Fatalf("the terminal's shell %d and grandchild %d are not among the processes on the host: %+v", shell, grandchild, command)
	}
	// The tool call shows the terminal's last lines as they come.
	if m := w.awaitBotText(thread, "tick\ntick"); !strings.Contains(m.Content, "`sh -c ") || !strings.Contains(m.Content, "```\n") {
		t.Errorf("the live terminal is shown as %q", m.Content)
	}
	b.awaitMetric("acp_broker_terminals_open", func(v float64) bool { return v == 1 })
	agent := w.agentPID(thread, alice)

	r := w.slash(thread, alice, "cancel")
	if !strings.Contains(r.Content, "cancelled the current turn") {
		t.Fatalf("/cancel answered %+v", r)
	}
	got := w.awaitAnswers(thread, 1)[0]
	if !strings.HasPrefix(got.Footer, "-# ⏹️ cancelled by Alice") {
		t.Fatalf("the turn ended with %q", got.Footer)
	}
	goneFromHost(t, "the cancelled turn's terminal", command)
	b.awaitMetric("acp_broker_terminals_open", func(v float64) bool { return v == 0 })

	w.Discord.Post(thread, alice, "terminal echo after")
	got = w.awaitAnswers(thread, 2)[1]
	if !strings.Contains(got.Text, "after") || !strings.HasPrefix(got.Footer, "-# ✅ done") {
		t.Fatalf("the next message got %q / %q", got.Text, got.Footer)
	}
	if pid := w.agentPID(thread, alice); pid != agent {
		t.Errorf("the next message ran on agent %d, want the same agent %d", pid, agent)
	}
}

// agent.max_terminals and agent.max_terminal_bytes reach the agent's
// connection: a third terminal at once is refused saying why, and a
// command that prints 8.9 kB keeps its last kilobyte.
func TestTerminal_BoundsFromTheConfiguration(t *testing.T) {
	w := newWorld(t, setup{conf: settings{"agent.max_terminals": "2", "agent.max_terminal_bytes": "1024"}})
	w.start()
	thread := w.mention(alice, "terminals 3")
	got := w.awaitAnswers(thread, 1)[0]
	if !strings.Contains(got.Text, "opened 2 of 3") || !strings.Contains(got.Text, "this session has 2 open, the most allowed; release one first") {
		t.Fatalf("three terminals at once: %q", got.Text)
	}
	w.Discord.Post(thread, alice, "terminal seq 2000")
	got = w.awaitAnswers(thread, 2)[1]
	_, out, ok := strings.Cut(got.Text, "truncated: true\n")
	out, _, _ = strings.Cut(out, "\n-# ") // the footer
	if !ok || len(out) > 1024 || len(out) < 1000 || !strings.HasSuffix(strings.TrimSpace(out), "1999\n2000") {
		t.Fatalf("seq 2000 with 1 KiB kept: %q", got.Text)
	}
}

// sleepers are the pids of the running processes "sleep SECONDS".
func sleepers(seconds string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if strings.HasSuffix(string(cmd), "sleep\x00"+seconds+"\x00") && agenttest.Running(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// A command that leaves its terminal's process group (setsid; the
// terminal waits a second, so that it is out of the group when the group
// is killed) is ended with its terminal in the sandbox, whose PID
// namespace goes with it; unconfined, it is out of reach and outlives
// it, as the README says.
func TestTerminal_ACommandThatLeavesItsGroupEndsOnlyInTheSandbox(t *testing.T) {
	needBwrap(t)
	for _, sandbox := range []string{"bwrap", "none"} {
		t.Run(sandbox, func(t *testing.T) {
			seconds := strconv.Itoa(3000 + os.Getpid()%1000)
			w := newWorld(t, setup{conf: settings{"agent.sandbox": sandbox}})
			w.start()
			thread := w.mention(alice, "terminal /bin/sh -c (/usr/bin/setsid${IFS}/bin/sleep${IFS}"+seconds+"${IFS}&);/bin/sleep${IFS}1;echo${IFS}left")
			var left []int
			for deadline := time.Now().Add(patience); len(left) == 0; left = sleepers(seconds) {
				if time.Now().After(deadline) {
					t.Fatal("the command never ran")
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Cleanup(func() {
				for _, pid := range left {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			if got := w.awaitAnswers(thread, 1)[0]; !strings.Contains(got.Text, "left") {
				t.Fatalf("the terminal answered %q", got.Text)
			}
			gone := agenttest.WaitGone(left[0], 5*time.Second)
			switch {
			case sandbox == "bwrap" && !gone:
				t.Fatalf("in the sandbox, the command that left its group (pid %d) outlived its terminal", left[0])
			case sandbox == "none" && gone:
				t.Fatalf("unconfined, the command that left its group (pid %d) ended with its terminal; the README says it is out of reach", left[0])
			}
		})
	}
}
