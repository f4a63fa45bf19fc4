package procgroup

import (
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// start runs script under sh as the leader of its own process group,
// and a goroutine that closes exited once the leader has exited, without
// reaping it.
func start(t *testing.T, script string) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The script says it is ready (its traps set, its child started).
	buf := make([]byte, 64)
	if n, err := out.Read(buf); err != nil || !strings.HasPrefix(string(buf[:n]), "ready") {
		t.Fatalf("the script did not start: %q, %v", buf[:n], err)
	}
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		var info unix.Siginfo
		for errors.Is(unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil), unix.EINTR) {
		}
	}()
	return cmd, exited
}

// A group whose leader ignores SIGTERM is sent SIGKILL after the grace,
// and the grandchild it left behind is killed with the group when the
// leader is reaped.
func TestStop_IgnoredSIGTERMIsFollowedBySIGKILLAndReapKillsTheRest(t *testing.T) {
	cmd, exited := start(t, `trap '' TERM; sleep 300 & echo ready; wait`)
	var log strings.Builder
	logger := zerolog.New(&log)
	began := time.Now()
	const grace = 200 * time.Millisecond
	Stop(cmd.Process.Pid, exited, grace, logger, "test")
	<-exited
	if took := time.Since(began); took < grace {
		t.Fatalf("stopped after %s, before the %s grace", took, grace)
	}
	if !strings.Contains(log.String(), "test ignored SIGTERM; sending SIGKILL to its group") {
		t.Fatalf("log = %s", log.String())
	}
	if err := Reap(cmd, logger, nil); err == nil {
		t.Fatal("a killed leader reaped without an error")
	}
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("leader ended %v, want killed by SIGKILL", cmd.ProcessState)
	}
	groupGone(t, cmd.Process.Pid)
}

// A group that heeds SIGTERM ends within the grace, with no SIGKILL, and
// Reap runs after once the leader is reaped.
func TestStop_SIGTERMHeededEndsWithoutSIGKILL(t *testing.T) {
	cmd, exited := start(t, `sleep 300 & echo ready; wait`)
	var log strings.Builder
	began := time.Now()
	Stop(cmd.Process.Pid, exited, time.Minute, zerolog.New(&log), "test")
	if took := time.Since(began); took > 30*time.Second {
		t.Fatalf("a group that heeds SIGTERM took %s to stop", took)
	}
	if strings.Contains(log.String(), "SIGKILL") {
		t.Fatalf("SIGKILL sent to a group that heeded SIGTERM: %s", log.String())
	}
	ran := false
	Reap(cmd, zerolog.New(&log), func() { ran = true })
	if !ran {
		t.Fatal("after did not run")
	}
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("leader ended %v, want killed by SIGTERM", cmd.ProcessState)
	}
	groupGone(t, cmd.Process.Pid)
}

// groupGone fails unless the process group led by pid is soon empty: a
// process killed is signalable until its parent reaps it.
func groupGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for unix.Kill(-pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the group still has a process after Reap")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
