package faults

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	brokerpkg "acpbroker/broker"
	"acpbroker/internal/brokertest"
)

// One broker serves Discord and Slack at once, one pool, one engine and
// one store: a turn runs in a thread of each; `broker status` names each
// thread by its platform, with its channel and its starter as that
// platform says; /metrics counts each platform's conversations under
// its name and /readyz says both are up; a reload gives each its access
// lists (bob made an approver of both, who then cancels alice's turn on
// each); and a SIGTERM with a turn running in each ends both, each
// thread told why, both connections closed, exit 0.
func TestPlatforms_DiscordAndSlackServeOneBroker(t *testing.T) {
	w := newWorld(t, setup{slack: true, conf: settings{"chat.platform": []string{"discord", "slack"}}})
	d, s := w.front("discord"), w.front("slack")
	b := w.start()

	dThread := d.mention(pAlice, "hang")
	sThread := s.mention(pAlice, "hang")
	d.awaitBotText(dThread, "working…", 0)
	s.awaitBotText(sThread, "working…", 0)

	st := status(t, w)
	byID := map[string]brokerpkg.ThreadStatus{}
	for _, th := range st.Threads {
		byID[th.ID] = th
	}
	want := map[string][3]string{
		"discord:" + dThread:                       {"discord", w.Channel, alice.ID},
		"slack:" + w.Slack.Channel + "/" + sThread: {"slack", w.Slack.Channel, w.Slack.Alice.ID},
	}
	for id, x := range want {
		th, ok := byID[id]
		switch {
		case !ok:
			t.Errorf("broker status does not list %s: %+v", id, st.Threads)
		case th.Platform != x[0] || th.Channel != x[1] || th.Starter != x[2] || th.Turn == nil || th.Agent == nil:
			t.Errorf("broker status shows %s as %+v, want on %s, in %s, started by %s, its agent running a turn", id, th, x[0], x[1], x[2])
		}
	}
	if len(st.Platforms) != 2 || !st.Platforms[0].Connected || !st.Platforms[1].Connected {
		t.Errorf("broker status shows the platforms %+v", st.Platforms)
	}
	if byID["discord:"+dThread].Agent != nil && byID["slack:"+w.Slack.Channel+"/"+sThread].Agent != nil &&
		byID["discord:"+dThread].Agent.PID == byID["slack:"+w.Slack.Channel+"/"+sThread].Agent.PID {
		t.Error("the two platforms' threads share an agent")
	}
	for _, p := range []string{"discord", "slack"} {
		b.awaitMetric(`acp_broker_chat_conversations{platform="`+p+`"}`, func(v float64) bool { return v == 1 })
		b.awaitMetric(`acp_broker_chat_rest_calls_total{platform="`+p+`"}`, func(v float64) bool { return v > 0 })
	}
	b.awaitMetric("acp_broker_turns_running", func(v float64) bool { return v == 2 })
	if code, body, err := b.Get(context.Background(), "/readyz"); err != nil || code != http.StatusOK {
		t.Fatalf("/readyz = %d %q, %v with both platforms up", code, body, err)
	}

	w.Conf = w.Conf.With(settings{"discord.approvers": []string{bob.ID}, "slack.approvers": []string{w.Slack.Bob.ID}})
	w.writeConfig()
	b.Signal(syscall.SIGHUP)
	brokertest.MustGet(t, patience, func(ctx context.Context) (string, error) { return b.Log.Await(ctx, "configuration reloaded") })
	r := w.slash(dThread, bob, "cancel")
	if r.Ephemeral() {
		t.Errorf("bob, an approver now, was refused on Discord: %+v", r)
	}
	s.command(sThread, pBob, "cancel")
	for _, x := range []struct {
		f      front
		thread string
	}{{d, dThread}, {s, sThread}} {
		if got := x.f.awaitAnswers(x.thread, 1)[0]; !strings.Contains(got.footer, "⏹️ cancelled by Bob") {
			t.Errorf("%s: the turn ended with %q, want cancelled by bob", x.f.name(), got.footer)
		}
	}

	// A turn in each again, then SIGTERM with both running.
	d.post(dThread, pAlice, "hang")
	s.post(sThread, pAlice, "hang")
	d.awaitBotText(dThread, "working…", 1)
	s.awaitBotText(sThread, "working…", 2) // after the written command's answer
	sigtermWithin(t, w, b, 5*time.Second)
	for _, x := range []struct {
		f      front
		thread string
	}{{d, dThread}, {s, sThread}} {
		told := false
		for _, m := range x.f.botMessages(x.thread) {
			told = told || strings.Contains(m.text, "broker shutting down")
		}
		if !told {
			t.Errorf("%s: the thread was not told the broker is shutting down", x.f.name())
		}
	}
	if w.Srv.Connected() {
		t.Error("Discord's gateway is still connected after the broker exited")
	}
	if st := w.Slack.Srv.SocketStats(); st.Open != 0 {
		t.Errorf("%d Socket Mode connections still open after the broker exited", st.Open)
	}
}

// status runs `broker status --json` on the world's configuration.
func status(t *testing.T, w *world) brokerpkg.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	cmd := exec.CommandContext(ctx, w.Bins.Broker, "status", "--json", "--config", w.writeConfig())
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + w.Dir}
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("broker status: %v: %s%s", err, out, stderr)
	}
	var st brokerpkg.Status
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("broker status: %v: %s", err, out)
	}
	return st
}
