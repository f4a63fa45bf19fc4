package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"acpbroker/internal/fakediscord"
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

// drain returns the messages received and not yet read.
func (s *systemdSocket) drain() []string {
	var out []string
	for {
		select {
		case m := <-s.msgs:
			out = append(out, m)
		default:
			return out
		}
	}
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
	b.out.waitFor(t, "✅ done in", 20*time.Second)
	b.say(t, "crash 3")
	b.out.waitFor(t, "❌ failed: agent exited", 20*time.Second)
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
		`acp_broker_profile_agents_live{profile="default"} 0`,
		`acp_broker_profile_agents_busy{profile="default"} 0`,
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

// On Discord, systemd hears READY=1 only once the gateway connection is up,
// and the token appears nowhere in the logs, even at debug level.
func TestRun_DiscordReadinessAndTheTokenNeverLogged(t *testing.T) {
	const secret = "MTIz.secret-token.XYZ"
	srv := fakediscord.New(t, fakediscord.Options{Token: secret})
	channel := srv.AddChannel("100", "", "agents")
	sock, systemd := listenNotify(t)
	config := writeConfig(t, "")
	b := startBroker(t, config, "BROKER_CHAT_PLATFORM=discord", "BROKER_DISCORD_TOKEN="+secret,
		"BROKER_DISCORD_API_URL="+srv.APIURL(), "BROKER_DISCORD_ALLOWED_CHANNELS="+channel, "NOTIFY_SOCKET="+sock, "BROKER_LOG_LEVEL=debug")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("broker log:\n%s", b.err)
		}
	})
	systemd.waitFor(t, "READY=1")
	if !srv.Connected() {
		t.Fatal("READY=1 before the gateway connection was up")
	}
	alice := fakediscord.User{ID: "201", Username: "alice"}
	id := srv.SendMessage(channel, alice, srv.Bot().Mention()+" hello")
	srv.Await("answer", func() bool {
		for _, m := range srv.Messages(id) {
			if strings.Contains(m.Content, "You said: hello") && strings.Contains(m.Content, "✅") {
				return true
			}
		}
		return false
	})
	b.cancel()
	<-b.done
	b.done <- 0
	logs := b.err.String()
	if !strings.Contains(logs, `"level":"debug"`) {
		t.Fatalf("no debug logs to search:\n%s", logs)
	}
	for _, part := range []string{secret, "secret-token"} {
		if strings.Contains(logs, part) {
			t.Fatalf("the token appears in the logs")
		}
	}
}

// A broker that has lost Discord stops pinging systemd's watchdog (so a
// broker that cannot get back is restarted) and says not ready, and pings
// again once the gateway is back.
func TestRun_WatchdogPingsStopWhileTheGatewayIsDown(t *testing.T) {
	srv := fakediscord.New(t, fakediscord.Options{Token: "tok"})
	channel := srv.AddChannel("100", "", "agents")
	sock, systemd := listenNotify(t)
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	b := startBroker(t, writeConfig(t, ""), "BROKER_CHAT_PLATFORM=discord", "BROKER_DISCORD_TOKEN=tok",
		"BROKER_DISCORD_API_URL="+srv.APIURL(), "BROKER_DISCORD_ALLOWED_CHANNELS="+channel,
		fmt.Sprintf("BROKER_HTTP_LISTEN=127.0.0.1:%d", port), "NOTIFY_SOCKET="+sock, "WATCHDOG_USEC=200000")
	systemd.waitFor(t, "READY=1")
	systemd.waitFor(t, "WATCHDOG=1")

	srv.SetGatewayDown(true)
	srv.DropGateway()
	b.err.waitFor(t, "unhealthy: no watchdog ping", 20*time.Second)
	if code, body := get(t, base+"/readyz"); code == 200 {
		t.Fatalf("/readyz = 200 %s while the gateway is down", body)
	}
	// Pings every 100ms while healthy: a second of silence is no ping.
	systemd.drain()
	time.Sleep(time.Second)
	if got := systemd.drain(); slices.Contains(got, "WATCHDOG=1") {
		t.Fatalf("the watchdog was pinged while the gateway was down: %q", got)
	}

	srv.SetGatewayDown(false)
	systemd.waitFor(t, "WATCHDOG=1")
	if code, body := get(t, base+"/readyz"); code != 200 {
		t.Fatalf("/readyz = %d %s after the gateway came back", code, body)
	}
	b.cancel()
	<-b.done
	b.done <- 0
}

// SIGHUP reloads the configuration: a changed turn.timeout applies to the
// next turn, a profile's key to new agents, and the log says what changed
// and what needs a restart.
func TestRun_SIGHUPReloadsWhatCanChange(t *testing.T) {
	config := writeConfig(t, "[turn]\ntimeout = \"30m\"\ncancel_grace = \"300ms\"")
	b := startBroker(t, config)
	b.out.waitFor(t, "Type a message", 20*time.Second)
	text, _ := os.ReadFile(config)
	changed := strings.Replace(string(text), `timeout = "30m"`, `timeout = "2s"`, 1)
	changed = strings.Replace(changed, "[agent]\n", "[agent]\nstart_timeout = \"90s\"\n", 1)
	changed = strings.Replace(changed, "[turn]\n", "[turn]\nupdate_queue = 2048\n", 1)
	if err := os.WriteFile(config, []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	b.err.waitFor(t, "configuration reloaded", 10*time.Second)
	logs := b.err.String()
	applied, restart, _ := strings.Cut(logs, `"need_restart"`)
	if !strings.Contains(applied, "turn.timeout: 30m0s -> 2s") || !strings.Contains(applied, "agent.start_timeout: 1m0s -> 1m30s") ||
		!strings.Contains(restart, "turn.update_queue: 1024 -> 2048") {
		t.Fatalf("reload log does not say what changed:\n%s", logs)
	}
	b.say(t, "ignore-cancel")
	took := b.out.waitFor(t, "❌ failed: timed out after 2s", 20*time.Second)
	if took > 10*time.Second {
		t.Fatalf("reloaded timeout took %s", took)
	}
	os.WriteFile(config, []byte("[turn\n"), 0o600)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	b.err.waitFor(t, "reload refused", 10*time.Second)
	b.exit(t)
}
