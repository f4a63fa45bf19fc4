package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// systemdSocket is the socket systemd listens on for notifications.
type systemdSocket struct {
	conn *net.UnixConn
	msgs chan string
}

func listenNotify(t *testing.T) (string, *systemdSocket) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	s := &systemdSocket{conn: conn, msgs: make(chan string, 1000)}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(s.msgs)
				return
			}
			s.msgs <- string(buf[:n])
		}
	}()
	t.Cleanup(func() { conn.Close() })
	return path, s
}

func (s *systemdSocket) waitFor(t *testing.T, want string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case m := <-s.msgs:
			if strings.Contains(m, want) {
				return
			}
		case <-timeout:
			t.Fatalf("systemd never got %q", want)
		}
	}
}

// A running broker serves Prometheus metrics that follow what happens,
// answers /healthz and /readyz, tells systemd READY=1 once it takes
// messages, pings the watchdog while healthy, and says STOPPING=1.
func TestRun_MetricsHealthAndSystemdNotifications(t *testing.T) {
	sock, systemd := listenNotify(t)
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	b := startBroker(t, writeConfig(t, ""), fmt.Sprintf("BROKER_HTTP_LISTEN=127.0.0.1:%d", port),
		"NOTIFY_SOCKET="+sock, "WATCHDOG_USEC=200000")
	systemd.waitFor(t, "READY=1")
	systemd.waitFor(t, "WATCHDOG=1")
	if code, body := get(t, base+"/healthz"); code != 200 {
		t.Fatalf("/healthz = %d %s", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != 200 {
		t.Fatalf("/readyz = %d %s", code, body)
	}
	b.say(t, "hello")
	b.out.waitFor(t, "[done in", 20*time.Second)
	b.say(t, "crash 3")
	b.out.waitFor(t, "[turn failed: agent exited", 20*time.Second)
	var m string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		// The store writes finished turns asynchronously.
		if _, m = get(t, base+"/metrics"); strings.Contains(m, "acp_broker_store_finished_turns 2\n") || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range []string{
		`acp_broker_turns_total{outcome="done"} 1`,
		`acp_broker_turns_total{outcome="agent_exited"} 1`,
		`acp_broker_agent_spawns_total 1`,
		`acp_broker_agent_stops_total{reason="crashed"} 1`,
		`acp_broker_acp_pending_requests 0`,
		`acp_broker_acp_pending_permission_requests 0`,
		`acp_broker_turns_running 0`,
		`acp_broker_turn_duration_seconds_count{outcome="done"} 1`,
		`acp_broker_turn_first_chunk_seconds_count 2`,
		`acp_broker_store_finished_turns 2`,
	} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", m)
	}
	b.exit(t)
	systemd.waitFor(t, "STOPPING=1")
}
