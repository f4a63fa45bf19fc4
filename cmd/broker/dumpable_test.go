package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"acpbroker/internal/agenttest"
)

// The broker is not dumpable: another process of its user (an agent run
// without a sandbox) cannot read its environment, where the Discord token
// is. The same read of an ordinary process of that user succeeds, so the
// test can tell.
func TestDumpable_AnotherProcessOfTheUserCannotReadTheBrokersEnvironment(t *testing.T) {
	bin, config, asNobody := nobodysBroker(t)
	readEnviron := func(pid int) error {
		return asNobody(exec.Command("cat", "/proc/"+strconv.Itoa(pid)+"/environ")).Run()
	}
	start := func(c *exec.Cmd) *exec.Cmd {
		c.Env = []string{"PATH=/usr/bin:/bin", "BROKER_DISCORD_TOKEN=secret-token-value"}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		return c
	}

	plain := start(asNobody(exec.Command("sleep", "30")))
	time.Sleep(100 * time.Millisecond)
	if err := readEnviron(plain.Process.Pid); err != nil {
		t.Fatalf("the control read of an ordinary process failed (%v): the test cannot tell", err)
	}

	in, out := asNobody(exec.Command(bin, "--config", config)), &agenttest.Buffer{}
	stdin, err := in.StdinPipe() // the console waits on it
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	in.Stdout, in.Stderr = out, out
	broker := start(in)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), "broker started") {
		if time.Now().After(deadline) {
			t.Fatalf("the broker did not start:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := readEnviron(broker.Process.Pid); err == nil {
		t.Fatal("another process of the broker's user read its environment")
	}
}

// nobodysBroker builds the broker into a directory of nobody's, beside a
// configuration of the console alone with its state there, and returns
// both with what makes a command run as nobody in that directory.
func nobodysBroker(t *testing.T) (bin, config string, asNobody func(*exec.Cmd) *exec.Cmd) {
	t.Helper()
	dir := agenttest.OtherUserDir(t)
	bin = filepath.Join(dir, "broker")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	config = filepath.Join(dir, "broker.toml")
	os.WriteFile(config, []byte("[agent]\ncommand = \"/bin/true\"\ncwd = \""+dir+"/work\"\n[state]\ndir = \""+dir+"/state\"\n[http]\nlisten = \"127.0.0.1:0\"\n"), 0o644)
	return bin, config, func(c *exec.Cmd) *exec.Cmd {
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: agenttest.Nobody, Gid: agenttest.Nobody}}
		c.Dir = dir
		return c
	}
}
