package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
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

// A broker serving the console on a terminal stops, cleanly, when the
// terminal hangs up (SIGHUP and a terminal that is gone), instead of
// reloading and keeping the state locked for the next start.
func TestHangup_ConsoleBrokerStopsWhenItsTerminalHangsUp(t *testing.T) {
	bin := brokerBin(t)
	master, slave := openPTY(t)
	defer master.Close()
	cmd := exec.Command(bin, "--config", writeConfig(t, ""))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	stderr := newScreen()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, stderr
	// The terminal is the broker's controlling terminal, as a shell's is.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-done
		}
	}()
	readUntil(t, master, "/help lists the commands", 20*time.Second)
	// A turn runs: the broker does not wait for it as it would at the
	// input's end.
	if _, err := master.WriteString("slow 500ms 100\n"); err != nil {
		t.Fatal(err)
	}
	readUntil(t, master, "chunk 1", 20*time.Second)
	master.Close() // the terminal hangs up
	select {
	case err := <-done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("the broker exited with %v after its terminal hung up; stderr:\n%s", err, stderr)
		}
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("the broker still runs 15s after its terminal hung up; stderr:\n%s", stderr)
	}
}
