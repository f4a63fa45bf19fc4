package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal: its master, which the test holds, and
// its slave, the broker's terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	slave, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return master, slave
}

// readUntil reads the master until want shows, within d.
func readUntil(t *testing.T, master *os.File, want string, d time.Duration) string {
	t.Helper()
	var got bytes.Buffer
	buf := make([]byte, 4096)
	master.SetReadDeadline(time.Now().Add(d))
	for !strings.Contains(got.String(), want) {
		n, err := master.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			t.Fatalf("no %q on the terminal: %v; it shows:\n%s", want, err, got.String())
		}
	}
	return got.String()
}

// onPTY is the broker running as a program on a pseudo-terminal, its
// controlling terminal as a shell's is; the test holds the master.
type onPTY struct {
	cmd    *exec.Cmd
	master *os.File
	done   chan error
}

// startOnPTY starts bin on a new terminal: its stdin and stdout, and its
// stderr unless stderr is given.
func startOnPTY(t *testing.T, bin, config string, stderr io.Writer, env ...string) *onPTY {
	t.Helper()
	master, slave := openPTY(t)
	cmd := exec.Command(bin, "--config", config)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	if stderr != nil {
		cmd.Stderr = stderr
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	p := &onPTY{cmd: cmd, master: master, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		master.Close()
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// A broker serving the console on a terminal stops, cleanly, when the
// terminal hangs up (SIGHUP and a terminal that is gone), instead of
// reloading and keeping the state locked for the next start.
func TestTerminal_ConsoleBrokerStopsWhenItsTerminalHangsUp(t *testing.T) {
	stderr := newScreen()
	p := startOnPTY(t, brokerBin(t), writeConfig(t, ""), stderr)
	readUntil(t, p.master, "/help lists the commands", 20*time.Second)
	// A turn runs: the broker does not wait for it as it would at the
	// input's end.
	if _, err := p.master.WriteString("slow 500ms 100\n"); err != nil {
		t.Fatal(err)
	}
	readUntil(t, p.master, "chunk 1", 20*time.Second)
	p.master.Close() // the terminal hangs up
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Fatalf("the broker exited with %v after its terminal hung up; stderr:\n%s", err, stderr)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("the broker still runs 15s after its terminal hung up; stderr:\n%s", stderr)
	}
}

// When stderr is the console's terminal, the log goes to a file in
// state.dir, which the start names, and no log line lands inside the
// conversation.
func TestTerminal_LogsLeaveTheConsolesTerminal(t *testing.T) {
	config := writeConfig(t, "")
	p := startOnPTY(t, brokerBin(t), config, nil, "BROKER_LOG_LEVEL=info")
	shown := readUntil(t, p.master, "/help lists the commands", 20*time.Second)
	if _, err := p.master.WriteString("hello\n"); err != nil {
		t.Fatal(err)
	}
	shown += readUntil(t, p.master, "✅ done in", 20*time.Second)
	logFile := filepath.Join(filepath.Dir(config), "state", "broker.log")
	if !strings.Contains(shown, "[the broker logs to "+logFile+"]") {
		t.Errorf("the start does not say where the log goes:\n%s", shown)
	}
	if strings.Contains(shown, "broker started") || strings.Contains(shown, `"level"`) {
		t.Errorf("log lines in the conversation:\n%s", shown)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, _ := os.ReadFile(logFile)
		if strings.Contains(string(data), "broker started") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log in %s: %q", logFile, data)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
