package broker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/broker"
	"acpbroker/chat"
	"acpbroker/chat/thread"
	"acpbroker/config"
	"acpbroker/internal/brokertest"
	"acpbroker/metrics"
	"acpbroker/store"

	"github.com/prometheus/client_golang/prometheus"
)

// memo is a chat platform of the test's own, served beside Discord: its
// threads are what the test says, its prompts are what it submits, and
// it records what the broker asks of it.
type memo struct {
	name   string
	engine chat.Engine
	ready  chan struct{}
	// hangOnClose: Close waits all of its grace, for last words that
	// never come, as a platform whose connection hangs.
	hangOnClose bool

	mu       sync.Mutex
	health   error
	reported []chat.Interruption
	reloads  []*config.Config
	closed   time.Duration // the grace Close was given
	closedAt time.Time
	convs    int
}

func newMemo(name string) *memo { return &memo{name: name, ready: make(chan struct{})} }

// platform is the memo's PlatformFunc.
func (m *memo) platform(p broker.Parts) (broker.Platform, error) {
	if p.Name != m.name {
		return broker.Platform{}, fmt.Errorf("made as %q, want %q", p.Name, m.name)
	}
	m.engine = p.Engine
	return broker.Platform{
		Platform: m,
		Reload: func(cfg *config.Config) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.reloads = append(m.reloads, cfg)
		},
		Metrics: memoMetrics{m},
	}, nil
}

// memoMetrics collects the memo's conversations, as a platform without
// a thread.Server would.
type memoMetrics struct{ m *memo }

func (c memoMetrics) Describe(ch chan<- *prometheus.Desc) { metrics.Describe(ch, thread.StatsMetrics) }

func (c memoMetrics) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	metrics.Collect(ch, thread.Stats{Conversations: c.m.convs}, thread.StatsMetrics)
}

func (m *memo) Report(turns []chat.Interruption, reported func(id uint64)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reported = append(m.reported, turns...)
	for _, it := range turns {
		reported(it.ID)
	}
}

func (m *memo) Run(ctx context.Context) error {
	close(m.ready)
	<-ctx.Done()
	return nil
}

func (m *memo) Ready() <-chan struct{} { return m.ready }

func (m *memo) Healthy() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.health
}

func (m *memo) Close(grace time.Duration) error {
	m.mu.Lock()
	m.closed, m.closedAt = grace, time.Now()
	m.mu.Unlock()
	if m.hangOnClose {
		t := time.NewTimer(grace)
		defer t.Stop()
		<-t.C
	}
	return nil
}

func (m *memo) setHealth(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.health = err
}

// ask submits text in thread and returns the agent's answer.
func (m *memo) ask(t *testing.T, thread, text string) string {
	t.Helper()
	m.mu.Lock()
	m.convs++
	m.mu.Unlock()
	s := &answerSink{done: make(chan adapter.Outcome, 1)}
	if err := m.engine.Submit(thread, &adapter.Prompt{Ref: m.name + "/" + thread, Title: text, Blocks: []acp.ContentBlock{acp.TextBlock(text)}, Sink: s}); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-s.done:
		if o.Err != nil {
			t.Fatalf("%s thread %s: %v", m.name, thread, o.Err)
		}
		return o.Text
	case <-time.After(30 * time.Second):
		t.Fatalf("%s thread %s: no answer within 30s", m.name, thread)
		return ""
	}
}

// answerSink keeps a turn's outcome.
type answerSink struct{ done chan adapter.Outcome }

func (s *answerSink) Status(adapter.Status) {}
func (s *answerSink) Update(acp.Update)     {}
func (s *answerSink) Ask(ctx context.Context, _ *acp.PermissionRequest) adapter.Answer {
	<-ctx.Done()
	return adapter.Answer{}
}
func (s *answerSink) Notice(adapter.Notice)  {}
func (s *answerSink) Done(o adapter.Outcome) { s.done <- o }

// world is a fake Discord with the configuration of a broker that
// serves Discord and memo platforms named by the test: the fake agent,
// unconfined, metrics on a free port.
func world(t *testing.T, conf brokertest.Settings) *brokertest.World {
	t.Helper()
	return brokertest.NewWorld(t, brokertest.Binaries{Agent: broker.FakeAgent()}, brokertest.Options{Conf: brokertest.Settings{
		"log.level":     "warn",
		"agent.sandbox": "none",
	}.With(conf)})
}

// open serves Discord and the memos with w's configuration.
func open(t *testing.T, w *brokertest.World, memos ...*memo) *brokertest.InProcess {
	t.Helper()
	cfg, err := w.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := broker.Options{Platforms: map[string]broker.PlatformFunc{}}
	for _, m := range memos {
		cfg.Chat.Platforms = append(cfg.Chat.Platforms, m.name)
		opts.Platforms[m.name] = m.platform
	}
	b, err := w.OpenConfig(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Serve(ctx); err != nil {
		t.Fatal(err)
	}
	return b
}

// get fetches a path of b's HTTP server.
func get(t *testing.T, b *brokertest.InProcess, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + b.Addr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// One broker serves Discord and another platform at once, with one pool,
// one engine and one store: a thread of each, with the same id on both,
// gets an agent of its own; the engine, the pool and the store know
// each by its platform, and each platform by its own id. The broker is
// ready once both are; /readyz and the watchdog follow the health of
// each, /metrics counts each platform's conversations under its name,
// and a reload reaches both.
func TestPlatforms_DiscordAndAnotherServeOneBroker(t *testing.T) {
	w := world(t, brokertest.Settings{"agent.args": []string{"--load-session"}})
	other := newMemo("memo")
	b := open(t, w, other)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	thread, err := w.Discord.Mention(ctx, brokertest.Alice, "hello from discord")
	if err != nil {
		t.Fatal(err)
	}
	answers, err := w.Discord.AwaitAnswers(ctx, thread, 1)
	if err != nil || !strings.Contains(answers[0].Text, "You said: hello from discord") {
		t.Fatalf("the Discord thread's answer: %+v, %v", answers, err)
	}
	if got := other.ask(t, thread, "hello from memo"); !strings.Contains(got, "You said: hello from memo") {
		t.Fatalf("the memo thread's answer: %q", got)
	}

	discordID, memoID := broker.ThreadID("discord", thread), broker.ThreadID("memo", thread)
	da, ma := b.Pool().Lookup(discordID), b.Pool().Lookup(memoID)
	if da == nil || ma == nil || da.Proc.PID() == ma.Proc.PID() || b.Pool().Lookup(thread) != nil {
		t.Fatalf("agents: discord %v, memo %v, bare id %v; want one agent for each platform's thread", da, ma, b.Pool().Lookup(thread))
	}
	for _, id := range []string{discordID, memoID} {
		if th, ok := b.Store().Thread(id); !ok || th.SessionID == "" {
			t.Errorf("the store keeps %s as %+v (kept: %v), want its session", id, th, ok)
		}
	}
	if _, ok := b.Store().Thread(thread); ok {
		t.Error("the store keeps a thread by a platform's own id")
	}
	if st := b.Engine().Status(memoID); st.SessionID == "" || st.SessionID == b.Engine().Status(discordID).SessionID {
		t.Errorf("the engine's memo thread: %+v", st)
	}

	if code, body := get(t, b, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d %s with both platforms up", code, body)
	}
	other.setHealth(errors.New("memo is down"))
	if code, body := get(t, b, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "chat memo: memo is down") {
		t.Fatalf("/readyz = %d %q with memo down", code, body)
	}
	other.setHealth(nil)
	if code, body := get(t, b, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d %s with memo back", code, body)
	}
	_, m := get(t, b, "/metrics")
	metrics := brokertest.ParseMetrics(m)
	if metrics[`acp_broker_chat_conversations{platform="discord"}`] != 1 || metrics[`acp_broker_chat_conversations{platform="memo"}`] != 1 {
		t.Fatalf("/metrics:\n%s", metrics.Grep("acp_broker_chat_"))
	}
	if metrics[`acp_broker_chat_rest_calls_total{platform="discord"}`] == 0 {
		t.Fatalf("Discord's REST calls are not counted under its name:\n%s", metrics.Grep("acp_broker_chat_"))
	}

	w.Conf = w.Conf.With(brokertest.Settings{"discord.approvers": []string{brokertest.Carol.ID}})
	if _, err := w.WriteConfig(); err != nil {
		t.Fatal(err)
	}
	b.Reload()
	if err := w.Srv.WaitFor(ctx, func() bool {
		other.mu.Lock()
		defer other.mu.Unlock()
		return len(other.reloads) == 1
	}); err != nil {
		t.Fatalf("the memo platform was not reloaded: %v", err)
	}
	if got := other.reloads[0].Discord.Approvers; !slices.Equal(got, []string{brokertest.Carol.ID}) {
		t.Errorf("the memo platform was reloaded with approvers %v", got)
	}
	if err := w.Srv.WaitFor(ctx, func() bool {
		return slices.Equal(b.Config().Discord.Approvers, []string{brokertest.Carol.ID})
	}); err != nil {
		t.Fatalf("the broker's configuration after the reload: %v", err)
	}
}

// At shutdown every platform is closed at once, each given what is left
// of the grace, however long another takes: two platforms that each
// hang their whole grace end the shutdown within about one grace, not
// two.
func TestPlatforms_ShutdownClosesEachWithinTheGraceAtOnce(t *testing.T) {
	w := world(t, nil)
	one, two := newMemo("one"), newMemo("two")
	one.hangOnClose, two.hangOnClose = true, true
	b := open(t, w, one, two)
	const grace = 3 * time.Second
	start := time.Now()
	if err := b.Stop(grace); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if took > grace+time.Second {
		t.Fatalf("the shutdown took %s with a %s grace: the platforms were closed one after the other", took, grace)
	}
	for _, m := range []*memo{one, two} {
		if m.closed <= 0 || m.closed > grace {
			t.Errorf("%s was given %s to close, want some of the %s grace", m.name, m.closed, grace)
		}
	}
	if d := one.closedAt.Sub(two.closedAt).Abs(); d > time.Second {
		t.Errorf("the platforms began closing %s apart", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Srv.WaitFor(ctx, func() bool { return !w.Srv.Connected() }); err != nil {
		t.Errorf("Discord is still connected after the shutdown: %v", err)
	}
}

// The turns a broker left unfinished are each reported to the platform
// of their thread, by its own id, and marked reported; those of a
// platform not served now are left for a broker that serves it.
func TestPlatforms_InterruptedTurnsGoToTheirOwnPlatform(t *testing.T) {
	w := world(t, nil)
	discordThread := w.Srv.AddChannel(brokertest.GuildID, "", "a thread left running")
	st, err := store.Open(store.Options{Dir: w.Dir + "/state"})
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]uint64{}
	for _, thread := range []string{broker.ThreadID("discord", discordThread), broker.ThreadID("memo", "42"), broker.ThreadID("console", "console-1")} {
		id := st.TurnQueued(thread, brokertest.GuildID+"/"+w.Channel+"/1", "left running on "+thread, "alice")
		st.TurnStarted(id)
		left[thread] = id
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	other := newMemo("memo")
	b := open(t, w, other)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := w.Discord.AwaitBotText(ctx, discordThread, brokertest.RestartNotice, 0); err != nil {
		t.Fatalf("the Discord thread was not told: %v", err)
	}
	other.mu.Lock()
	reported := slices.Clone(other.reported)
	other.mu.Unlock()
	if len(reported) != 1 || reported[0].Thread != "42" || reported[0].ID != left["memo:42"] {
		t.Fatalf("memo was told of %+v, want its thread 42's turn alone", reported)
	}
	if err := b.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}

	st, err = store.Open(store.Options{Dir: w.Dir + "/state"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	again, err := st.Recover()
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 1 || again[0].Thread != "console:console-1" {
		t.Fatalf("left to report after the broker: %+v, want the console's turn alone", again)
	}
}
