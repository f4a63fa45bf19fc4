package discord_test

import (
	"context"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"acpbroker/adapter"
	"acpbroker/broker"
	"acpbroker/chat"
	"acpbroker/chat/discord"
	"acpbroker/chat/thread"
	"acpbroker/internal/agenttest"
	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakediscord"
	"acpbroker/pool"

	"github.com/rs/zerolog"
)

var fakeAgent string

func TestMain(m *testing.M) { agenttest.Main(m, &fakeAgent) }

const guildID = brokertest.GuildID

var (
	alice = brokertest.Alice
	bob   = brokertest.Bob
	carol = brokertest.Carol
)

// harness is a broker serving Discord against a fake Discord, wired as
// the broker binary wires one (package broker, through
// brokertest.World.Open), with the fake agent for its agents.
type harness struct {
	t       *testing.T
	srv     *fakediscord.Server
	client  *discord.Client
	engine  engine // by Discord's thread ids, as the client sees it
	pool    agents // by Discord's thread ids
	broker  *brokertest.InProcess
	channel string // the allowed channel
	discord brokertest.Discord
	wait    time.Duration // bounds each wait, as the fake's Await
	other   string        // a channel the bot may not answer in
}

// engine is the broker's engine as the Discord client sees it, with the
// engine's counters.
type engine struct {
	chat.Engine
	b *broker.Broker
}

func (e engine) Stats() adapter.Stats { return e.b.Engine().Stats() }

// agents is the broker's pool, by Discord's thread ids.
type agents struct{ b *broker.Broker }

func (a agents) Stats() pool.Stats { return a.b.Pool().Stats() }

func (a agents) Lookup(thread string) *pool.Agent {
	return a.b.Pool().Lookup(broker.ThreadID("discord", thread))
}

// setup is what a test changes of the broker. Where a configuration key
// says it, it is set as that key.
type setup struct {
	// before runs once the fake Discord has its channels, before the
	// broker opens (what an earlier broker process left there).
	before func(h *harness)
	// adjust changes the Discord client's configuration once the
	// channels are known.
	adjust func(h *harness, d *discord.Config)
	fake   fakediscord.Options
	// discord: its Memory (the test's own; none when nil, not the
	// state store's), ForgetAfter and RetitleInterval are the client's;
	// EditInterval, MaxMessages and MaxFileBytes are keys.
	discord discord.Config
	// engine: PermissionTimeout, PermissionMode and CancelGrace are
	// keys; a Journal or an Auditor replaces the state store's.
	engine adapter.Config
	// pool: Profiles (Command, Args, Env, WorkDir, PerThreadDir,
	// MaxSessions) with DefaultProfile, Args and MaxSessions are keys.
	pool pool.Config
	// discordLog, if set, receives the Discord client's log from info
	// level up (else it goes to the broker's log).
	discordLog io.Writer
}

func newHarness(t *testing.T, s setup) *harness {
	t.Helper()
	if s.fake.RateLimits == nil {
		// Most tests edit faster than Discord allows, to run quickly; the
		// test of the limit uses Discord's limits and the default pace.
		fast := fakediscord.RateLimit{Limit: 100, Per: time.Second}
		s.fake.RateLimits = map[string]fakediscord.RateLimit{fakediscord.RouteCreateMessage: fast, fakediscord.RouteEditMessage: fast}
	}
	if s.fake.WaitTimeout == 0 {
		s.fake.WaitTimeout = 10 * time.Second
	}
	w := brokertest.NewWorld(t, brokertest.Binaries{Agent: fakeAgent}, brokertest.Options{Fake: s.fake, Conf: settingsOf(t, s)})
	h := &harness{t: t, srv: w.Srv, wait: s.fake.WaitTimeout, channel: w.Channel, discord: w.Discord}
	h.other = w.Srv.AddChannel(guildID, "", "random")
	if s.before != nil {
		s.before(h)
	}
	opts := broker.Options{
		Platforms: map[string]broker.PlatformFunc{"discord": func(p broker.Parts) (broker.Platform, error) {
			h.engine.Engine = p.Engine
			made, err := broker.Discord(func(d *discord.Config) { h.adjustDiscord(s, d) })(p)
			if err == nil {
				h.client = made.Platform.(*discord.Client)
			}
			return made, err
		}},
		Engine: func(e *adapter.Config) {
			if s.engine.Journal != nil {
				e.Journal = s.engine.Journal
			}
			if s.engine.Auditor != nil {
				e.Auditor = s.engine.Auditor
			}
		},
	}
	cfg, err := w.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := w.OpenConfig(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	h.broker, h.engine.b, h.pool.b = b, b.Broker, b.Broker
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.Serve(ctx); err != nil {
		t.Fatal(err)
	}
	w.Srv.Await("slash commands registered", func() bool { return len(w.Srv.Commands()) == len(thread.Commands) })
	return h
}

// settingsOf are the keys of what s says, over those of a harness: the
// fake agent, unconfined, quick to stop, no metrics endpoint.
func settingsOf(t *testing.T, s setup) brokertest.Settings {
	conf := brokertest.Settings{
		"log.level":             "warn",
		"http.listen":           "",
		"agent.sandbox":         "none",
		"agent.exit_grace":      "500ms",
		"pool.max_sessions":     8,
		"turn.cancel_grace":     "2s",
		"discord.edit_interval": "200ms",
	}
	if d := s.discord.EditInterval; d > 0 {
		conf["discord.edit_interval"] = d.String()
	}
	if n := s.discord.MaxMessages; n > 0 {
		conf["discord.max_answer_messages"] = n
	}
	if n := s.discord.MaxFileBytes; n > 0 {
		conf["discord.max_file_bytes"] = n
	}
	if d := s.engine.PermissionTimeout; d > 0 {
		conf["turn.permission_timeout"] = d.String()
	}
	if m := s.engine.PermissionMode; m != "" {
		conf["turn.permission_mode"] = m
	}
	if d := s.engine.CancelGrace; d > 0 {
		conf["turn.cancel_grace"] = d.String()
	}
	if n := s.pool.MaxSessions; n > 0 {
		conf["pool.max_sessions"] = n
	}
	if a := s.pool.Args; a != nil {
		conf["agent.args"] = a
	}
	for _, name := range sortedKeys(s.pool.Profiles) {
		p := s.pool.Profiles[name]
		section := "agents." + name + "."
		conf[section+"command"] = p.Command
		if p.Args != nil {
			conf[section+"args"] = p.Args
		}
		if p.Env != nil {
			conf[section+"env"] = p.Env
		}
		if p.WorkDir != "" {
			conf[section+"cwd"] = p.WorkDir
		}
		conf[section+"per_thread_dir"] = p.PerThreadDir
		if p.MaxSessions > 0 {
			conf[section+"max_sessions"] = p.MaxSessions
		}
	}
	if s.pool.DefaultProfile != "" {
		conf["agents.default"] = s.pool.DefaultProfile
	}
	if len(s.pool.Profiles) == 0 {
		conf["agent.cwd"] = t.TempDir()
	}
	return conf
}

// adjustDiscord gives the Discord client what s says that no key does.
func (h *harness) adjustDiscord(s setup, d *discord.Config) {
	d.Memory = s.discord.Memory
	if s.discord.ForgetAfter > 0 {
		d.ForgetAfter = s.discord.ForgetAfter
	}
	if s.discord.RetitleInterval > 0 {
		d.RetitleInterval = s.discord.RetitleInterval
	}
	if s.discordLog != nil {
		d.Logger = zerolog.New(s.discordLog).Level(zerolog.InfoLevel)
	}
	if s.adjust != nil {
		s.adjust(h, d)
	}
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

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
