package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakeslack"
)

// On Slack, /readyz names Slack while the Socket Mode connection is not
// up yet (Slack answering apps.connections.open with 503s), systemd
// hears READY=1 only once it is, a mention is answered, and neither
// token appears in the logs, even at debug level.
func TestRun_SlackReadinessAndItsTokensNeverLogged(t *testing.T) {
	srv := fakeslack.New(t, fakeslack.Options{})
	channel := srv.AddChannel(fakeslack.Channel{Name: "agents"}).ID
	alice := srv.AddUser(fakeslack.User{Name: "alice"})
	srv.InjectError(func(c fakeslack.Call) bool { return c.Method == "apps.connections.open" }, 3, 503)
	sock, systemd := listenNotify(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	b := startBroker(t, writeConfig(t, ""), "BROKER_CHAT_PLATFORM=slack", "BROKER_SLACK_BOT_TOKEN="+srv.BotToken(),
		"BROKER_SLACK_APP_TOKEN="+srv.AppToken(), "BROKER_SLACK_API_URL="+srv.APIURL(), "BROKER_SLACK_ALLOWED_CHANNELS="+channel,
		"BROKER_HTTP_LISTEN="+strings.TrimPrefix(base, "http://"), "NOTIFY_SOCKET="+sock, "BROKER_LOG_LEVEL=debug")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("broker log:\n%s", b.err)
		}
	})
	b.err.waitFor(t, "serving /metrics", 20*time.Second)
	unready := false
	for !srv.Connected() {
		if code, body := get(t, base+"/readyz"); code != 200 && strings.Contains(body, "chat slack: not connected") {
			unready = true
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !unready {
		t.Error("/readyz never said Slack was not connected while apps.connections.open failed")
	}
	systemd.waitFor(t, "READY=1")
	if code, body := get(t, base+"/readyz"); code != 200 {
		t.Fatalf("/readyz = %d %s once connected", code, body)
	}
	ts := srv.PostMessage(channel, alice.ID, srv.Bot().Mention()+" hello")
	srv.Await("the answer", func() bool {
		for _, m := range srv.Thread(channel, ts) {
			if text := brokertest.SlackText(m.Blocks, m.Text); m.FromBot() && strings.Contains(text, "You said: hello") && strings.Contains(text, "✅") {
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
	for _, secret := range []string{srv.BotToken(), srv.AppToken()} {
		if strings.Contains(logs, secret) {
			t.Errorf("a token appears in the logs")
		}
	}
}
