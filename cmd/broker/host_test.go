package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"acpbroker/cluster"

	"github.com/rs/zerolog"
)

// syncBuffer is a bytes.Buffer safe to read while a command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// natsForHosts is a NATS server with a password, as a broker embeds one.
func natsForHosts(t *testing.T) string {
	t.Helper()
	e, err := cluster.StartEmbedded(cluster.EmbeddedOptions{Listen: "127.0.0.1:0", User: "acp", Password: "host-test-password", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	return e.URL()
}

// hostConfig writes an agent host's configuration joining url as acp
// with password.
func hostConfig(t *testing.T, url, password string) string {
	t.Helper()
	return writeConfig(t, fmt.Sprintf("[cluster]\nurl = %q\nuser = \"acp\"\npassword = %q\nname = \"h1\"\n[host]\nlabels = [\"zone=test\"]\n", url, password))
}

// An agent host needs a cluster to join: without cluster.url it exits 2
// naming the key, before anything starts.
func TestHost_NeedsTheClusterToJoin(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"host", "--config", writeConfig(t, "")}, nil, strings.NewReader(""), &out, &errOut)
	if code != 2 || !strings.Contains(errOut.String(), "cluster.url") {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
}

// An agent host tells systemd READY=1 once it has joined its cluster, and
// STOPPING=1 when it stops; stopped, it exits 0.
func TestHost_TellsSystemdItIsReadyOnceJoined(t *testing.T) {
	sock, systemd := listenNotify(t)
	url := natsForHosts(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"host", "--config", hostConfig(t, url, "host-test-password")}, []string{"NOTIFY_SOCKET=" + sock, "PATH=" + os.Getenv("PATH")},
			strings.NewReader(""), &out, &errOut)
	}()
	systemd.waitFor(t, "READY=1")
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d after its stop; stderr %s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the host did not stop")
	}
	systemd.waitFor(t, "STOPPING=1")
}

// A host without the cluster's password is refused by NATS: it exits 1
// saying so, and does not say it is ready.
func TestHost_AWrongPasswordExitsSayingSo(t *testing.T) {
	sock, systemd := listenNotify(t)
	url := natsForHosts(t)
	var out, errOut syncBuffer
	code := run(context.Background(), []string{"host", "--config", hostConfig(t, url, "wrong")}, []string{"NOTIFY_SOCKET=" + sock, "PATH=" + os.Getenv("PATH")},
		strings.NewReader(""), &out, &errOut)
	if code != 1 || !strings.Contains(strings.ToLower(errOut.String()), "authorization") {
		t.Fatalf("exit %d, stderr %s", code, errOut.String())
	}
	for _, m := range systemd.drain() {
		if strings.Contains(m, "READY=1") {
			t.Errorf("a host refused by its cluster told systemd %q", m)
		}
	}
}
