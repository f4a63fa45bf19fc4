package faults

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakediscord"
	"acpbroker/internal/fakeslack"
)

// bins are the broker and the fake agent, built once by TestMain.
var bins brokertest.Binaries

func TestMain(m *testing.M) { brokertest.Main(m, &bins) }

var (
	alice = brokertest.Alice
	bob   = brokertest.Bob
	carol = brokertest.Carol
)

// patience bounds every wait on the fake Discord and a broker's start.
const patience = 30 * time.Second

// settings are broker configuration keys over the harness's (a nil value
// removes the key).
type settings = brokertest.Settings

// setup shapes a world: the fake Discord's options and configuration
// keys over the harness's.
type setup struct {
	fake fakediscord.Options
	conf settings
	// slack gives the world a fake Slack too, with slackFake's options
	// (chat.platform says whether the broker serves it).
	slack     bool
	slackFake fakeslack.Options
}

// world is a brokertest.World whose waits fail the test.
type world struct {
	*brokertest.World
	t *testing.T
}

// newWorld makes a World with short graces and a quick edit pace, and
// checks at the test's end that no agent outlived the brokers.
func newWorld(t *testing.T, s setup) *world {
	t.Helper()
	if s.fake.RateLimits == nil {
		// Discord allows 5 message calls per 5s per channel; the broker
		// paces itself to that, which would make these tests slow. The
		// rate-limit test injects its own 429s.
		loose := fakediscord.RateLimit{Limit: 100, Per: time.Second}
		s.fake.RateLimits = map[string]fakediscord.RateLimit{fakediscord.RouteCreateMessage: loose, fakediscord.RouteEditMessage: loose}
	}
	if s.fake.WaitTimeout == 0 {
		s.fake.WaitTimeout = patience
	}
	var slack *fakeslack.Options
	if s.slack {
		slack = &s.slackFake
		if slack.WaitTimeout == 0 {
			slack.WaitTimeout = patience
		}
	}
	w := &world{t: t, World: brokertest.NewWorld(t, bins, brokertest.Options{
		Fake:  s.fake,
		Slack: slack,
		Conf: settings{
			"agent.exit_grace":      "300ms",
			"turn.cancel_grace":     "500ms",
			"shutdown.grace":        "5s",
			"discord.edit_interval": "200ms",
			"slack.edit_interval":   "200ms",
		}.With(s.conf),
		LogTail: 64 << 10,
	})}
	// Registered after the fake's Close and before any broker's stop:
	// it runs once every broker has stopped, before the fake closes.
	t.Cleanup(func() {
		for _, p := range w.LeftoverProcs(5 * time.Second) {
			t.Errorf("process %d (%s) of an agent is still running after the broker stopped", p.PID, p.Cmdline)
		}
	})
	return w
}

// agentProcs waits until the host shows at least n processes of the
// World's agents (see brokertest.World.AgentProcs) and returns them.
func (w *world) agentProcs(n int) []brokertest.Proc {
	w.t.Helper()
	return brokertest.MustGet(w.t, patience, func(ctx context.Context) ([]brokertest.Proc, error) {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			procs := w.AgentProcs()
			if len(procs) >= n {
				return procs, nil
			}
			select {
			case <-ctx.Done():
				return procs, fmt.Errorf("%d processes of agents on the host, want %d: %w", len(procs), n, context.Cause(ctx))
			case <-tick.C:
			}
		}
	})
}

// goneFromHost checks that every one of procs, seen on the host before
// what of them, is gone within 10s: the host has no process of it left,
// sandboxed or not.
func goneFromHost(t *testing.T, what string, procs []brokertest.Proc) {
	t.Helper()
	for _, p := range procs {
		if !p.WaitGone(10 * time.Second) {
			t.Errorf("process %d (%s) of %s is still running", p.PID, p.Cmdline, what)
		}
	}
}

// writeConfig writes the world's configuration and returns its path.
func (w *world) writeConfig() string {
	w.t.Helper()
	path, err := w.WriteConfig()
	if err != nil {
		w.t.Fatal(err)
	}
	return path
}

// broker is a brokertest.Broker whose metric reads fail the test.
type broker struct {
	*brokertest.Broker
	t *testing.T
}

// start runs a broker and waits until it is ready. The test's cleanup
// stops it, and fails the test if SIGTERM did not end it with status 0.
func (w *world) start() *broker {
	w.t.Helper()
	b := brokertest.MustGet(w.t, patience, w.Start)
	w.t.Cleanup(func() {
		code, err := b.Stop(30 * time.Second)
		if err != nil {
			w.t.Error(err)
		} else if code != 0 && !w.t.Failed() && b.Signalled() != syscall.SIGKILL {
			w.t.Errorf("broker exited with status %d after SIGTERM", code)
		}
	})
	return &broker{Broker: b, t: w.t}
}

// stop sends SIGTERM and returns the exit status, failing the test if
// the broker had to be killed.
func (b *broker) stop() int {
	b.t.Helper()
	code, err := b.Stop(30 * time.Second)
	if err != nil {
		b.t.Error(err)
	}
	return code
}

// metric reads one series from /metrics, e.g.
// `acp_broker_turns_total{outcome="done"}`; ok is false if it is absent.
func (b *broker) metric(series string) (value float64, ok bool) {
	b.t.Helper()
	m := brokertest.MustGet(b.t, patience, b.Metrics)
	value, ok = m[series]
	return value, ok
}

// awaitMetric waits up to 20s for a series to be present and satisfy
// cond, and returns its last value.
func (b *broker) awaitMetric(series string, cond func(float64) bool) float64 {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := b.AwaitMetrics(ctx, 50*time.Millisecond, func(m brokertest.Metrics) bool {
		v, ok := m[series]
		return ok && cond(v)
	})
	if err != nil {
		v, ok := m[series]
		b.t.Fatalf("%s = %v (present: %v) never met the condition: %v; /metrics:\n%s", series, v, ok, err, m.Grep("acp_broker_"))
	}
	return m[series]
}

// mention has u mention the bot in the allowed channel and waits for the
// thread the broker opens; the thread's id is the message's.
func (w *world) mention(u fakediscord.User, text string, opts ...fakediscord.MessageOption) string {
	w.t.Helper()
	return brokertest.MustGet(w.t, patience, func(ctx context.Context) (string, error) {
		return w.Discord.Mention(ctx, u, text, opts...)
	})
}

// awaitAnswers waits until the thread shows n finished answers and
// returns them.
func (w *world) awaitAnswers(thread string, n int) []brokertest.Answer {
	w.t.Helper()
	return brokertest.MustGet(w.t, patience, func(ctx context.Context) ([]brokertest.Answer, error) {
		return w.Discord.AwaitAnswers(ctx, thread, n)
	})
}

// awaitBotText waits for a bot message in channel containing text and
// returns it.
func (w *world) awaitBotText(channel, text string) fakediscord.Message {
	w.t.Helper()
	return w.awaitNewBotText(channel, text, 0)
}

// awaitNewBotText is awaitBotText for the bot's messages after the first
// skip.
func (w *world) awaitNewBotText(channel, text string, skip int) fakediscord.Message {
	w.t.Helper()
	return brokertest.MustGet(w.t, patience, func(ctx context.Context) (fakediscord.Message, error) {
		return w.Discord.AwaitBotText(ctx, channel, text, skip)
	})
}

// awaitReaction waits for the bot's reaction emoji on a message.
func (w *world) awaitReaction(channel, messageID, emoji string) {
	w.t.Helper()
	brokertest.Must(w.t, patience, func(ctx context.Context) error {
		return w.Discord.AwaitReaction(ctx, channel, messageID, emoji)
	})
}

// slash has u run a slash command in a channel and returns the bot's
// response, checking it came within Discord's 3 seconds.
func (w *world) slash(channel string, u fakediscord.User, name string) fakediscord.InteractionResponse {
	w.t.Helper()
	return w.response(w.Srv.SlashCommand(channel, u.ID, name, nil))
}

// response waits for the bot's first response to an interaction and
// checks it came in time and was not refused.
func (w *world) response(interactionID string) fakediscord.InteractionResponse {
	w.t.Helper()
	r := brokertest.MustGet(w.t, patience, func(ctx context.Context) (fakediscord.InteractionResponse, error) {
		return w.Discord.Response(ctx, interactionID)
	})
	if r.Late || r.Status >= 300 {
		w.t.Fatalf("interaction answered late or refused: %+v", r)
	}
	return r
}

// needBwrap skips a test that needs bubblewrap where it is not installed.
func needBwrap(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil {
		t.Skip("bubblewrap is not installed")
	}
}

// slashNew has u run /new with an agent and a prompt in the world's
// channel, checks the bot says it started a thread with that agent, and
// returns the thread it opened.
func (w *world) slashNew(u fakediscord.User, agent, prompt string) string {
	w.t.Helper()
	before := map[string]bool{}
	for _, ch := range w.Srv.Threads() {
		before[ch.ID] = true
	}
	r := w.response(w.Srv.SlashCommand(w.Channel, u.ID, "new", map[string]any{"agent": agent, "prompt": prompt}))
	if !strings.Contains(r.Content, "started a thread with **"+agent+"**") {
		w.t.Fatalf("/new agent:%s answered %q", agent, r.Content)
	}
	var thread string
	w.Srv.Await("the thread /new opened", func() bool {
		for _, ch := range w.Srv.Threads() {
			if !before[ch.ID] {
				thread = ch.ID
				return true
			}
		}
		return false
	})
	return thread
}

// agentPID asks /status in a thread for its agent's pid (0: none).
func (w *world) agentPID(thread string, u fakediscord.User) int {
	w.t.Helper()
	return brokertest.MustGet(w.t, patience, func(ctx context.Context) (int, error) {
		return w.Discord.AgentPID(ctx, thread, u)
	})
}

// permissionRequest waits for an open permission request (with buttons)
// in a thread that is not one of skip, and returns it.
func (w *world) permissionRequest(thread string, skip ...string) fakediscord.Message {
	w.t.Helper()
	return brokertest.MustGet(w.t, patience, func(ctx context.Context) (fakediscord.Message, error) {
		return w.Discord.PermissionRequest(ctx, thread, skip...)
	})
}

// newSession starts the notice a turn shows when its thread's earlier
// agent session could not be resumed (the fake agent, unless started
// with --load-session, cannot resume one).
const newSession = "ℹ️ The agent could not resume this thread's earlier conversation, so this is a new session: it does not remember what was said before.\n\n"

// freshSession reports whether an answer says it comes from a new agent
// session, and returns its text without that notice.
func freshSession(text string) (string, bool) {
	rest, ok := strings.CutPrefix(text, newSession)
	return rest, ok
}

// within fails the test unless lo <= d <= hi.
func within(t *testing.T, what string, d, lo, hi time.Duration) {
	t.Helper()
	if d < lo || d > hi {
		t.Errorf("%s took %s, want between %s and %s", what, d.Round(time.Millisecond), lo, hi)
	}
}
