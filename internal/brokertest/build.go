// Package brokertest runs brokers against the fake Discord: it builds the
// broker and the fake agent once, writes a configuration, starts, stops,
// kills and restarts the process, keeps its log, scrapes its metrics, and
// reads threads the way a user sees them.
//
// Suites that run the broker binary use a World and its Brokers; suites
// that run a broker in the test's own process open it from a World too
// (World.Open, World.OpenConfig), wired as the binary wires one (package
// broker). Every wait takes a context and returns an error instead of
// failing the test, so users may act from many goroutines at once.
package brokertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"acpbroker/internal/agenttest"

	"go.uber.org/goleak"
)

// Binaries are the programs a World runs: the broker and the fake agent
// (testdata/fakeagent). Their paths are resolved, as /proc shows them.
type Binaries struct {
	Broker, Agent string
}

// Build builds the broker and the fake agent into dir, from the module
// root. Build once per test binary (in TestMain) and share the result.
func Build(dir string) (Binaries, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return Binaries{}, fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	bin := filepath.Join(dir, "broker")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/broker")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return Binaries{}, fmt.Errorf("build broker: %w\n%s", err, b)
	}
	agent, err := agenttest.Build(dir)
	if err != nil {
		return Binaries{}, err
	}
	var bins Binaries
	if bins.Broker, err = filepath.EvalSymlinks(bin); err != nil {
		return Binaries{}, err
	}
	if bins.Agent, err = filepath.EvalSymlinks(agent); err != nil {
		return Binaries{}, err
	}
	return bins, nil
}

// Main is a TestMain for packages that run the broker binary: it builds
// the broker and the fake agent into *bins, runs the tests, fails them
// if goroutines are left running, removes the binaries and exits.
func Main(m *testing.M, bins *Binaries) {
	dir, err := os.MkdirTemp("", "brokertest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if *bins, err = Build(dir); err == nil {
		err = os.Chmod(dir, 0o755) // for agents run as another user
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}
