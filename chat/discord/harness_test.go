package discord_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"acpbroker/adapter"
	"acpbroker/chat/discord"
	"acpbroker/internal/agenttest"
	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakediscord"
	"acpbroker/pool"

	"github.com/rs/zerolog"
)

var fakeAgent string

func TestMain(m *testing.M) { agenttest.Main(m, &fakeAgent) }

const (
	guildID = brokertest.GuildID
	token   = "bot-token"
)

var (
	alice = brokertest.Alice
	bob   = brokertest.Bob
	carol = brokertest.Carol
)

// harness is a broker's Discord side against a fake Discord, with a real
// engine, pool and fake agent processes.
type harness struct {
	t       *testing.T
	srv     *fakediscord.Server
	client  *discord.Client
	engine  *adapter.Engine
	pool    *pool.Pool
	channel string // the allowed channel
	discord brokertest.Discord
	wait    time.Duration // bounds each wait, as the fake's Await
	other   string        // a channel the bot may not answer in
	cancel  context.CancelFunc
	runDone chan error
}

type setup struct {
	// before runs once the fake Discord has its channels, before the
	// Client is made (what an earlier broker process left there).
	before func(h *harness)
	// adjust changes the Discord configuration once the channels are
	// known.
	adjust  func(h *harness, d *discord.Config)
	fake    fakediscord.Options
	discord discord.Config
	engine  adapter.Config
	pool    pool.Config
	// discordLog, if set, receives the Discord client's log from info
	// level up (else it goes to the test's log from warn up).
	discordLog io.Writer
}

func newHarness(t *testing.T, s setup) *harness {
	t.Helper()
	s.fake.Token = token
	if s.fake.RateLimits == nil {
		// Most tests edit faster than Discord allows, to run quickly; the
		// test of the limit uses Discord's limits and the default pace.
		fast := fakediscord.RateLimit{Limit: 100, Per: time.Second}
		s.fake.RateLimits = map[string]fakediscord.RateLimit{fakediscord.RouteCreateMessage: fast, fakediscord.RouteEditMessage: fast}
	}
	if s.fake.WaitTimeout == 0 {
		s.fake.WaitTimeout = 10 * time.Second
	}
	srv := fakediscord.New(t, s.fake)
	h := &harness{t: t, srv: srv, wait: s.fake.WaitTimeout, runDone: make(chan error, 1)}
	for _, u := range []fakediscord.User{alice, bob, carol} {
		srv.AddUser(u)
	}
	h.channel = srv.AddChannel(guildID, "", "agents")
	h.discord = brokertest.Discord{Srv: srv, Channel: h.channel}
	h.other = srv.AddChannel(guildID, "", "random")
	if s.before != nil {
		s.before(h)
	}
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)

	s.pool.Command = fakeAgent
	s.pool.WorkDir = t.TempDir()
	s.pool.PerThreadDir = true
	s.pool.Logger = log
	if s.pool.MaxSessions == 0 {
		s.pool.MaxSessions = 8
	}
	if s.pool.ExitGrace == 0 {
		s.pool.ExitGrace = 500 * time.Millisecond
	}
	h.pool = pool.New(s.pool)
	s.engine.Logger = log
	if s.engine.CancelGrace == 0 {
		s.engine.CancelGrace = 2 * time.Second
	}
	h.engine = adapter.New(h.pool, s.engine)

	s.discord.Token = token
	s.discord.APIURL = srv.APIURL()
	s.discord.Logger = log
	if s.discordLog != nil {
		s.discord.Logger = zerolog.New(s.discordLog).Level(zerolog.InfoLevel)
	}
	if s.discord.Access.AllowedChannels == nil && !s.discord.Access.AllowAllChannels {
		s.discord.Access.AllowedChannels = []string{h.channel}
	}
	if s.discord.EditInterval == 0 {
		s.discord.EditInterval = 200 * time.Millisecond
	}
	if s.adjust != nil {
		s.adjust(h, &s.discord)
	}
	c, err := discord.New(s.discord, h.engine)
	if err != nil {
		t.Fatal(err)
	}
	h.client = c
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.runDone <- c.Run(ctx) }()
	select {
	case <-c.Ready():
	case err := <-h.runDone:
		t.Fatalf("Run: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("not connected within 20s")
	}
	srv.Await("slash commands registered", func() bool { return len(srv.Commands()) == 9 })
	t.Cleanup(h.close)
	return h
}

// close stops in the broker's order: no new prompts, turns ended, the
// last messages posted, then agents stopped.
func (h *harness) close() {
	h.cancel()
	<-h.runDone
	h.engine.Close()
	h.client.Close(10 * time.Second)
	h.pool.Close()
}

// mention has user start a conversation; it returns the thread (whose id
// is the message's).
func (h *harness) mention(user fakediscord.User, text string, opts ...fakediscord.MessageOption) string {
	h.t.Helper()
	return brokertest.MustGet(h.t, h.wait, func(ctx context.Context) (string, error) {
		return h.discord.Mention(ctx, user, text, opts...)
	})
}

// answer waits for the bot's last message in thread to end with a final
// footer containing want, and returns the bot's messages there.
func (h *harness) answer(thread, want string) []fakediscord.Message {
	h.t.Helper()
	var msgs []fakediscord.Message
	h.srv.Await("final answer with "+want, func() bool {
		msgs = h.botMessages(thread)
		if len(msgs) == 0 {
			return false
		}
		last := msgs[len(msgs)-1].Content
		return strings.Contains(last, want) && finalFooter(last)
	})
	return msgs
}

// finalFooter reports whether a message ends with the line that says how a
// turn ended.
func finalFooter(s string) bool { return brokertest.Footer(s) != "" }

// botMessages are the bot's messages in a channel, without permission
// requests.
func (h *harness) botMessages(channel string) []fakediscord.Message {
	var out []fakediscord.Message
	for _, m := range h.srv.Messages(channel) {
		if m.Author.ID == h.srv.Bot().ID && !strings.HasPrefix(m.Content, "🔐") && m.InteractionID == "" {
			out = append(out, m)
		}
	}
	return out
}

func joined(msgs []fakediscord.Message) string {
	var parts []string
	for _, m := range msgs {
		parts = append(parts, m.Content)
	}
	return strings.Join(parts, "\n")
}

// accessFor allows only users in the harness's channel.
func accessFor(h *harness, users ...string) discord.Access {
	return discord.Access{AllowedChannels: []string{h.channel}, AllowedUsers: users}
}

// slashWith has u run a slash command with options in a channel and
// returns the bot's first response.
func (h *harness) slashWith(channel string, u fakediscord.User, name string, options map[string]any) fakediscord.InteractionResponse {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), h.wait)
	defer cancel()
	r, err := h.discord.Response(ctx, h.srv.SlashCommand(channel, u.ID, name, options))
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

// threadOf waits for the thread opened from the bot's last message in
// the allowed channel that says text, and returns its id.
func (h *harness) threadOf(text string) string {
	h.t.Helper()
	var id string
	h.srv.Await("a thread from the bot's message "+text, func() bool {
		for _, m := range h.srv.Messages(h.channel) {
			if m.Author.ID == h.srv.Bot().ID && strings.Contains(m.Content, text) {
				id = m.ID
			}
		}
		ch, ok := h.srv.Channel(id)
		return id != "" && ok && ch.IsThread()
	})
	return id
}

// until waits, up to the harness's wait, for cond about the Client (not
// the fake Discord, whose changes Await follows) to hold, looking every
// 10ms.
func (h *harness) until(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.NewTimer(h.wait)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			h.t.Fatalf("waiting for %s: not within %s", what, h.wait)
		case <-tick.C:
		}
	}
}
