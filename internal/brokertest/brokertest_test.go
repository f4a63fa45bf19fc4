package brokertest_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
)

var bins brokertest.Binaries

func TestMain(m *testing.M) { brokertest.Main(m, &bins) }

func TestSettings_TOMLHasOneTablePerPrefixAndWithOverrides(t *testing.T) {
	s := brokertest.Settings{"turn.timeout": "5s", "agent.args": []string{"a", "b c"}, "pool.max_sessions": 3}.
		With(brokertest.Settings{"turn.timeout": nil, "turn.cancel_grace": "1s", "log.format": "json"})
	want := "[agent]\nargs = [\"a\", \"b c\"]\n\n[log]\nformat = \"json\"\n\n[pool]\nmax_sessions = 3\n\n[turn]\ncancel_grace = \"1s\"\n\n"
	if got := s.TOML(); got != want {
		t.Errorf("TOML:\n%s\nwant:\n%s", got, want)
	}
}

func TestParseMetrics_ReadsSeriesAndSums(t *testing.T) {
	m := brokertest.ParseMetrics(`# HELP x y
# TYPE acp_broker_turns_total counter
acp_broker_turns_total{outcome="done"} 3
acp_broker_turns_total{outcome="agent exited"} 2
acp_broker_turns_running 0
go_goroutines 41
garbage
`)
	if m[`acp_broker_turns_total{outcome="done"}`] != 3 || m["go_goroutines"] != 41 {
		t.Errorf("parsed %v", m)
	}
	if got := m.Sum("acp_broker_turns_total"); got != 5 {
		t.Errorf("Sum = %v, want 5", got)
	}
	if got := m.Sum("acp_broker_turns"); got != 0 {
		t.Errorf("Sum of a prefix that is not a name = %v, want 0", got)
	}
	if len(m) != 4 {
		t.Errorf("%d series, want 4: %v", len(m), m)
	}
}

func TestFooter_TellsFinalLinesFromStoppingOnes(t *testing.T) {
	for in, want := range map[string]string{
		"answer\n-# ✅ done in 2s":                  "-# ✅ done in 2s",
		"x\n-# ❌ agent exited (status 1)":          "-# ❌ agent exited (status 1)",
		"x\n-# ⏹️ cancelled by alice":              "-# ⏹️ cancelled by alice",
		"x\n-# ⏹️ stopping: cancelled by alice":    "",
		"still streaming":                          "",
		"-# ✅ done\nthen more text after a footer": "",
	} {
		if got := brokertest.Footer(in); got != want {
			t.Errorf("Footer(%q) = %q, want %q", in, got, want)
		}
	}
}

// A World's broker answers a mention, serves metrics and RSS, survives
// SIGKILL and restart on the same state (the interrupted turn is
// reported), stops with status 0 on SIGTERM, and leaves no agent.
func TestWorld_StartKillRestartStop(t *testing.T) {
	w := brokertest.NewWorld(t, bins, brokertest.Options{Conf: brokertest.Settings{
		"agent.args": []string{"--no-exit-on-eof"}, "agent.exit_grace": "300ms", "turn.cancel_grace": "500ms"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := w.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := w.Discord
	thread, err := d.Mention(ctx, brokertest.Alice, "hello there")
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.AwaitAnswers(ctx, thread, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got[0].Text, "You said: hello there") || !strings.HasPrefix(got[0].Footer, "-# ✅") {
		t.Errorf("answer %q, footer %q", got[0].Text, got[0].Footer)
	}
	if err := d.AwaitReaction(ctx, w.Channel, thread, brokertest.Done); err != nil {
		t.Error(err)
	}
	m, err := b.AwaitMetrics(ctx, 50*time.Millisecond, func(m brokertest.Metrics) bool {
		return m[`acp_broker_turns_total{outcome="done"}`] == 1
	})
	if err != nil {
		t.Fatalf("%v; metrics:\n%s", err, m.Grep("acp_broker_"))
	}
	if m["go_goroutines"] <= 0 {
		t.Errorf("no go_goroutines in /metrics")
	}
	rss, err := b.RSS()
	if err != nil || rss < 1<<20 {
		t.Errorf("RSS = %d, %v", rss, err)
	}
	if hwm, err := brokertest.PeakRSS(b.PID()); err != nil || hwm < rss {
		t.Errorf("PeakRSS = %d, %v; RSS is %d", hwm, err, rss)
	}
	if lines := b.Log.Grep(`"level":"info"`); len(lines) == 0 {
		t.Errorf("no info lines in the log file %s", b.Log.Path())
	}
	if _, err := b.Log.Await(ctx, `"level":"info"`, "serving /metrics"); err != nil {
		t.Error(err)
	}
	if at := d.SeenAt(thread, got[0].Msgs[0].ID, "You said: hello there"); at.IsZero() {
		t.Errorf("the answer's revisions never showed its text")
	}

	hang := d.Post(thread, brokertest.Alice, "hang")
	if err := d.AwaitReaction(ctx, thread, hang, brokertest.Working); err != nil {
		t.Fatal(err)
	}
	agent, err := d.AgentPID(ctx, thread, brokertest.Alice)
	if err != nil || agent == 0 {
		t.Fatalf("agent pid %d, %v", agent, err)
	}
	b2, err := w.Restart(ctx, b, true)
	if err != nil {
		t.Fatal(err)
	}
	if b.Signalled() != syscall.SIGKILL {
		t.Errorf("the first broker ended with %v, want SIGKILL", b.Signalled())
	}
	if b2.PID() == b.PID() {
		t.Errorf("the restarted broker has the old pid")
	}
	if _, err := d.AwaitBotText(ctx, thread, "The broker restarted while working on your message “hang”", 0); err != nil {
		t.Error(err)
	}
	if err := d.AwaitReaction(ctx, thread, hang, brokertest.Failed); err != nil {
		t.Error(err)
	}
	code, err := b2.Stop(30 * time.Second)
	if err != nil || code != 0 {
		t.Errorf("stop: status %d, %v", code, err)
	}
	if left := w.LeftoverAgents(5 * time.Second); len(left) > 0 {
		t.Errorf("agents left running: %v (the first was %d)", left, agent)
	}
}

// A broker that exits before it is ready makes Start fail with its exit
// status and log.
func TestWorld_StartReportsAnEarlyExit(t *testing.T) {
	w := brokertest.NewWorld(t, bins, brokertest.Options{Conf: brokertest.Settings{"turn.timeout": "soon"}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := w.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "exited with status") || !strings.Contains(err.Error(), "turn.timeout") {
		t.Fatalf("Start: %v", err)
	}
}
