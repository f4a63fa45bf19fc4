package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"acpbroker/store"

	"github.com/rs/zerolog"
)

// The audit socket serves what the store selects, replaces a socket a
// dead broker left, serves a bounded number of requests at once (others
// are told to try again), refuses a request that is not one JSON line,
// and is gone once closed.
func TestAuditSocket_ServesBoundedAndReplacesALeftover(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, auditSocketName)
	old, err := net.Listen("unix", path) // a dead broker's
	if err != nil {
		t.Fatal(err)
	}
	old.(*net.UnixListener).SetUnlinkOnClose(false)
	old.Close()

	release := make(chan struct{})
	var asked sync.WaitGroup
	asked.Add(auditMaxConns)
	want := []store.Decision{{ID: 7, Thread: "42", Tool: "Run make", Outcome: "allowed", Via: "rule", By: "rule 1"}}
	var mu sync.Mutex
	var filters []store.DecisionFilter
	s, err := serveAudit(dir, func(f store.DecisionFilter) ([]store.Decision, error) {
		mu.Lock()
		filters = append(filters, f)
		mu.Unlock()
		if f.Thread == "slow" {
			asked.Done()
			<-release
		}
		return want, nil
	}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	unblock := sync.OnceFunc(func() { close(release) })
	defer unblock() // before Close, which waits for the requests held
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, %v", fi.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("the state directory holds %d entries, want the socket alone", len(entries))
	}

	ctx := context.Background()
	since := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	got, err := askAudit(ctx, dir, store.DecisionFilter{Since: since, Thread: "42"})
	if err != nil || len(got) != 1 || got[0] != want[0] {
		t.Fatalf("askAudit: %+v, %v", got, err)
	}
	if f := filters[0]; !f.Since.Equal(since) || f.Thread != "42" {
		t.Fatalf("the store was asked for %+v", f)
	}

	// The first request's slot is given back just after its answer is
	// written, which the client may read first.
	for deadline := time.Now().Add(10 * time.Second); len(s.servers) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d slots still taken after the first answer", len(s.servers))
		}
	}
	var slow sync.WaitGroup
	for range auditMaxConns {
		slow.Go(func() {
			if _, err := askAudit(ctx, dir, store.DecisionFilter{Thread: "slow"}); err != nil {
				t.Errorf("a request within the bound: %v", err)
			}
		})
	}
	waited := make(chan struct{})
	go func() { asked.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("the requests within the bound were not all served")
	}
	if _, err := askAudit(ctx, dir, store.DecisionFilter{}); err == nil || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("a request past the bound: %v", err)
	}
	unblock()
	slow.Wait()

	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	conn.Write([]byte(strings.Repeat("x", 10<<10)))
	var r auditReply
	if err := json.NewDecoder(conn).Decode(&r); err != nil || !strings.Contains(r.Error, "not one JSON line") {
		t.Fatalf("junk: %+v, %v", r, err)
	}
	conn.Close()

	s.Close()
	s.Close()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the socket outlived Close: %v", err)
	}
	if _, err := askAudit(ctx, dir, store.DecisionFilter{}); err == nil {
		t.Fatal("askAudit after Close succeeded")
	}
}

// With the state file locked and no broker answering on the socket,
// `broker audit` says both, and where else the decisions are.
func TestAudit_LockedWithoutASocketSaysSo(t *testing.T) {
	config := writeConfig(t, "")
	st, err := store.Open(store.Options{Dir: filepath.Join(filepath.Dir(config), "state")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	code, _, errOut := auditCmd(t, "--config", config)
	if code != 1 || !strings.Contains(errOut, "is in use by another broker process") || !strings.Contains(errOut, "no broker answers on its audit socket") ||
		!strings.Contains(errOut, `"permission decided"`) {
		t.Fatalf("exit %d, %q", code, errOut)
	}
}

// A peer of the broker's own user in another user namespace, as a
// sandboxed agent is, is refused even when it reaches the socket; the
// same client outside it is served.
func TestAuditSocket_RefusesAPeerInAnotherUserNamespace(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap is not installed")
	}
	bin := brokerBin(t)
	config := writeConfig(t, "")
	dir := filepath.Join(filepath.Dir(config), "state")
	st, err := store.Open(store.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.Decided(store.Decision{Time: time.Now().UTC(), Thread: "42", Tool: "Run make", Outcome: "allowed", Via: "rule", By: "rule 1"})
	s, err := serveAudit(dir, st.Decisions, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ask := func(sandboxed bool) (string, error) {
		args := []string{bin, "audit", "--config", config}
		if sandboxed {
			args = append([]string{"bwrap", "--unshare-user", "--dev-bind", "/", "/", "--"}, args...)
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := ask(false); err != nil || !strings.Contains(out, "Run make") {
		t.Fatalf("outside a user namespace: %v, %s", err, out)
	}
	out, err := ask(true)
	if err == nil || strings.Contains(out, "Run make") || !strings.Contains(out, "refused: the audit trail is not served into a sandbox") {
		t.Fatalf("from another user namespace: %v, %s", err, out)
	}
}
