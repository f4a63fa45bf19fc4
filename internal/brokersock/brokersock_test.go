package brokersock

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"acpbroker/store"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The socket serves what the store selects, replaces a socket a dead
// broker left (and the audit socket of an earlier one), serves a bounded
// number of requests at once (others are told to try again), refuses a
// request that is not one JSON line, and is gone once closed.
func TestSocket_ServesTheAuditTrailBoundedAndReplacesALeftover(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, SocketName)
	for _, name := range []string{SocketName, legacySocketName} {
		old, err := net.Listen("unix", filepath.Join(dir, name)) // a dead broker's
		if err != nil {
			t.Fatal(err)
		}
		old.(*net.UnixListener).SetUnlinkOnClose(false)
		old.Close()
	}

	release := make(chan struct{})
	var asked sync.WaitGroup
	asked.Add(maxConns)
	want := []store.Decision{{ID: 7, Thread: "42", Tool: "Run make", Outcome: "allowed", Via: "rule", By: "rule 1"}}
	var mu sync.Mutex
	var filters []store.DecisionFilter
	s, err := Serve(dir, Answers{Decisions: func(f store.DecisionFilter) ([]store.Decision, error) {
		mu.Lock()
		filters = append(filters, f)
		mu.Unlock()
		if f.Thread == "slow" {
			asked.Done()
			<-release
		}
		return want, nil
	}}, zerolog.Nop())
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
	got, err := Ask(ctx, dir, store.DecisionFilter{Since: since, Thread: "42"})
	if err != nil || len(got) != 1 || got[0] != want[0] {
		t.Fatalf("askAudit: %+v, %v", got, err)
	}
	mu.Lock()
	f := filters[0]
	mu.Unlock()
	if !f.Since.Equal(since) || f.Thread != "42" {
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
	for range maxConns {
		slow.Go(func() {
			if _, err := Ask(ctx, dir, store.DecisionFilter{Thread: "slow"}); err != nil {
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
	if _, err := Ask(ctx, dir, store.DecisionFilter{}); err == nil || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("a request past the bound: %v", err)
	}
	unblock()
	slow.Wait()

	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	conn.Write([]byte(strings.Repeat("x", 10<<10)))
	var r reply
	if err := json.NewDecoder(conn).Decode(&r); err != nil || !strings.Contains(r.Error, "not one JSON line") {
		t.Fatalf("junk: %+v, %v", r, err)
	}
	conn.Close()

	s.Close()
	s.Close()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the socket outlived Close: %v", err)
	}
	if _, err := Ask(ctx, dir, store.DecisionFilter{}); err == nil {
		t.Fatal("askAudit after Close succeeded")
	}
}

// A request for the status is answered with what Status returns, as
// JSON; one that names nothing is asked the audit trail (as `broker
// audit` asked before the socket told anything else); a broker without
// a status, or a request for something else, is said so.
func TestSocket_ServesTheStatus(t *testing.T) {
	dir := t.TempDir()
	type status struct {
		Threads []string `json:"threads"`
		Live    int      `json:"live"`
	}
	s, err := Serve(dir, Answers{
		Decisions: func(store.DecisionFilter) ([]store.Decision, error) { return nil, nil },
		Status:    func() any { return status{Threads: []string{"discord:1"}, Live: 1} },
	}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var got status
	if err := AskStatus(ctx, dir, &got); err != nil || got.Live != 1 || len(got.Threads) != 1 || got.Threads[0] != "discord:1" {
		t.Fatalf("AskStatus: %+v, %v", got, err)
	}
	for line, want := range map[string]string{
		`{"since":"0001-01-01T00:00:00Z"}` + "\n": `{"decisions":[]}`,
		`{"ask":"secrets"}` + "\n":                `{"decisions":null,"error":"unknown request \"secrets\""}`,
	} {
		conn, err := net.Dial("unix", filepath.Join(dir, SocketName))
		if err != nil {
			t.Fatal(err)
		}
		conn.Write([]byte(line))
		b, _ := io.ReadAll(conn)
		conn.Close()
		if strings.TrimSpace(string(b)) != want {
			t.Errorf("%s answered %s, want %s", strings.TrimSpace(line), b, want)
		}
	}
	s.Close()

	s, err = Serve(dir, Answers{Decisions: func(store.DecisionFilter) ([]store.Decision, error) { return nil, nil }}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := AskStatus(ctx, dir, &got); err == nil || !strings.Contains(err.Error(), "does not tell its status") {
		t.Fatalf("AskStatus of a broker without a status: %v", err)
	}
}

// A request that comes with a descriptor of another namespace than the
// broker's user namespace (its network namespace, say) is refused; with
// one of the broker's user namespace, or none (the peer's is read in
// /proc then), it is served.
func TestSocket_ADescriptorOfAnotherNamespaceIsRefused(t *testing.T) {
	dir := t.TempDir()
	s, err := Serve(dir, Answers{Decisions: func(store.DecisionFilter) ([]store.Decision, error) { return nil, nil }}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for ns, want := range map[string]string{
		"/proc/self/ns/net":  `{"decisions":null,"error":"refused: the broker answers no one in a sandbox"}`,
		"/proc/self/ns/user": `{"decisions":[]}`,
		"":                   `{"decisions":[]}`,
	} {
		conn, err := net.Dial("unix", filepath.Join(dir, SocketName))
		if err != nil {
			t.Fatal(err)
		}
		var oob []byte
		if ns != "" {
			f, err := os.Open(ns)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			oob = unix.UnixRights(int(f.Fd()))
		}
		if _, _, err := conn.(*net.UnixConn).WriteMsgUnix([]byte(`{"ask":"audit"}`+"\n"), oob, nil); err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(conn)
		conn.Close()
		if strings.TrimSpace(string(b)) != want {
			t.Errorf("with %q: answered %s, want %s", ns, b, want)
		}
	}
}
