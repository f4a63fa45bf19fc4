package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"acpbroker/broker"
	"acpbroker/config"
	"acpbroker/internal/agenttest"

	"github.com/rs/zerolog"
)

// A second SIGTERM during a slow shutdown kills every agent group and exits
// at once.
func TestShutdown_SecondSignalForcesExit(t *testing.T) {
	bin := brokerBin(t)
	config := writeConfigArgs(t, []string{"--ignore-term", "--no-exit-on-eof"}, "[turn]\ncancel_grace = \"60s\"\n[shutdown]\ngrace = \"60s\"")
	p := startProcess(t, bin, config)
	p.say(t, "ignore-cancel")
	p.out.waitFor(t, "working…", 20*time.Second)
	p.say(t, "/status")
	p.out.waitFor(t, "State: busy", 20*time.Second)
	m := statusPID.FindStringSubmatch(p.out.String())
	if m == nil {
		t.Fatalf("no pid in /status:\n%s", p.out)
	}
	var agentPID int
	fmt.Sscan(m[1], &agentPID)
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.out.waitFor(t, "stopping: broker shutting down", 10*time.Second)
	time.Sleep(500 * time.Millisecond)
	if !agenttest.Running(p.cmd.Process.Pid) {
		t.Fatal("the broker did not wait for its turns after one signal")
	}
	start := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	err := p.cmd.Wait()
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the second signal took %s to end the broker", took)
	}
	if err == nil {
		t.Fatal("a forced exit reported success")
	}
	if !agenttest.WaitGone(agentPID, 5*time.Second) {
		t.Fatalf("agent %d outlived the forced exit", agentPID)
	}
}

// The same signal delivered twice at once (to the process and to its
// group) is one request to stop; one that comes later forces the exit.
func TestShutdown_DuplicateDeliveryIsNotASecondSignal(t *testing.T) {
	cfg, err := config.Load(writeConfig(t, ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.Open(cfg, broker.Options{Logger: zerolog.Nop(), Stdin: strings.NewReader(""), Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop(context.Background())
	signals := make(chan os.Signal, 2)
	forced := make(chan struct{})
	first := time.Now()
	go forceOnSecondSignal(b, signals, first, zerolog.Nop(), func() { close(forced) })
	signals <- syscall.SIGTERM // the duplicate
	signals <- syscall.SIGHUP
	select {
	case <-forced:
		t.Fatal("a duplicate delivery forced the exit")
	case <-time.After(300 * time.Millisecond):
	}
	signals <- syscall.SIGTERM
	select {
	case <-forced:
	case <-time.After(5 * time.Second):
		t.Fatal("a second signal did not force the exit")
	}
}
