package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"acpbroker/internal/agenttest"
)

// brokerBin is the broker built as a program, for tests that kill it.
func brokerBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "broker")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// process is the broker running as a real process with its console on
// pipes.
type process struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *screen
}

func startProcess(t *testing.T, bin, config string, env ...string) *process {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--config", config)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, in: in, out: newScreen()}
	cmd.Stdout = p.out
	cmd.Stderr = p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
	})
	return p
}

func (p *process) say(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(p.in, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

var statusPID = regexp.MustCompile(`pid (\d+),`)

// A broker killed with SIGKILL in the middle of a turn leaves nothing
// stuck: at its next start the thread is told in words which message did
// not finish, the turn is recorded interrupted (and told only once), the
// agent it left running is killed, and the next prompt resumes the
// agent session with session/load.
func TestCrash_BrokerKilledMidTurnReportsTheTurnAndResumesTheSession(t *testing.T) {
	bin := brokerBin(t)
	// The agent keeps running after its stdin closes, as codex-acp and
	// claude-agent-acp do: only the next broker can clean it up.
	// A sandboxed agent dies with the broker (bubblewrap's
	// --die-with-parent); an unsandboxed one is what a killed broker can
	// leave behind.
	config := writeConfigArgs(t, []string{"--load-session", "--no-exit-on-eof"}, "")
	unconfined := "BROKER_AGENT_SANDBOX=none"

	first := startProcess(t, bin, config, unconfined)
	first.say(t, "remember the number 42")
	first.out.waitFor(t, "You said: remember the number 42", 20*time.Second)
	first.say(t, "hang")
	first.out.waitFor(t, "working…", 20*time.Second)
	first.say(t, "/status")
	first.out.waitFor(t, "State: busy", 20*time.Second)
	m := statusPID.FindStringSubmatch(first.out.String())
	if m == nil {
		t.Fatalf("no pid in /status:\n%s", first.out)
	}
	agentPID, _ := strconv.Atoi(m[1])
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.cmd.Wait()
	if !agenttest.Running(agentPID) {
		t.Fatalf("agent %d died with the broker; this test needs it left behind", agentPID)
	}

	second := startProcess(t, bin, config, unconfined)
	second.out.waitFor(t, "The broker restarted while working on your message “hang”", 20*time.Second)
	if !agenttest.WaitGone(agentPID, 10*time.Second) {
		t.Fatalf("the agent left by the killed broker (pid %d) is still running", agentPID)
	}
	second.say(t, "what was the number?")
	second.out.waitFor(t, "(resumed) You said: what was the number?", 20*time.Second)
	second.in.Close()
	if err := second.cmd.Wait(); err != nil {
		t.Fatalf("second broker: %v\n%s", err, second.out)
	}

	third := startProcess(t, bin, config)
	third.out.waitFor(t, "Type a message", 20*time.Second)
	third.in.Close()
	third.cmd.Wait()
	if regexp.MustCompile("restarted while working").MatchString(third.out.String()) {
		t.Fatalf("the interrupted turn was reported twice:\n%s", third.out)
	}
}
