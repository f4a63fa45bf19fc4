package slack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"acpbroker/adapter"
	"acpbroker/chat/slack"
	"acpbroker/chat/thread"
	"acpbroker/internal/agenttest"
	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakeslack"
	"acpbroker/pool"

	"github.com/rs/zerolog"
)

var fakeAgent string

func TestMain(m *testing.M) { agenttest.Main(m, &fakeAgent) }

// harness is a broker's Slack side against a fake Slack, with a real
// engine, pool and fake agent processes.
type harness struct {
	t         *testing.T
	closeOnce sync.Once
	srv       *fakeslack.Server
	client    *slack.Client
	engine    *adapter.Engine
	pool      *pool.Pool
	channel   string // the allowed channel
	other     string // a channel the app may not answer in
	alice     fakeslack.User
	bob       fakeslack.User
	carol     fakeslack.User
	wait      time.Duration
	cancel    context.CancelFunc
	runDone   chan error
}

type setup struct {
	// before runs once the fake Slack has its users and channels, before
	// the Client is made.
	before func(h *harness)
	// adjust changes the Slack configuration once the channels are known.
	adjust func(h *harness, c *slack.Config)
	fake   fakeslack.Options
	slack  slack.Config
	engine adapter.Config
	pool   pool.Config
	// http serves over the HTTP Events API instead of Socket Mode.
	http bool
	// slackLog, if set, receives the Slack client's log from info level
	// up (else it goes to the test's log from warn up).
	slackLog io.Writer
}

func newHarness(t *testing.T, s setup) *harness {
	t.Helper()
	if s.fake.WaitTimeout == 0 {
		s.fake.WaitTimeout = 15 * time.Second
	}
	srv := fakeslack.New(t, s.fake)
	h := &harness{t: t, srv: srv, wait: s.fake.WaitTimeout, runDone: make(chan error, 1)}
	h.alice = srv.AddUser(fakeslack.User{Name: "alice", RealName: "Alice Liddell", DisplayName: "Alice"})
	h.bob = srv.AddUser(fakeslack.User{Name: "bob", RealName: "Bob Builder", DisplayName: "Bob"})
	h.carol = srv.AddUser(fakeslack.User{Name: "carol", RealName: "Carol Singer", DisplayName: "Carol"})
	h.channel = srv.AddChannel(fakeslack.Channel{Name: "agents"}).ID
	h.other = srv.AddChannel(fakeslack.Channel{Name: "random"}).ID
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

	c := s.slack
	c.BotToken = srv.BotToken()
	c.AppToken = srv.AppToken()
	c.APIURL = srv.APIURL()
	c.FilesURL = srv.FilesURL()
	c.HTTPClient = srv.HTTPClient()
	c.Logger = log
	if s.slackLog != nil {
		c.Logger = zerolog.New(s.slackLog).Level(zerolog.InfoLevel)
	}
	if s.http {
		c.Mode = slack.ModeHTTP
		c.SigningSecret = srv.SigningSecret()
		c.Listen = "127.0.0.1:0"
	}
	if c.Access.AllowedChannels == nil && !c.Access.AllowAllChannels {
		c.Access.AllowedChannels = []string{h.channel}
	}
	if c.EditInterval == 0 {
		c.EditInterval = 200 * time.Millisecond
	}
	if s.adjust != nil {
		s.adjust(h, &c)
	}
	client, err := slack.New(c, h.engine)
	if err != nil {
		t.Fatal(err)
	}
	h.client = client
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.runDone <- client.Run(ctx) }()
	select {
	case <-client.Ready():
	case err := <-h.runDone:
		t.Fatalf("Run: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("not connected within 20s")
	}
	if s.http {
		base := "http://" + client.Addr().String()
		srv.UseHTTP(fakeslack.Endpoints{Events: base + slack.PathEvents, Interactivity: base + slack.PathInteractivity, Commands: base + slack.PathCommands})
	}
	t.Cleanup(h.close)
	return h
}

// close stops in the broker's order: no new prompts, turns ended, the
// last messages posted, then agents stopped. Once it returns, every
// message the app took has been handled. It is safe to call twice.
func (h *harness) close() {
	h.closeOnce.Do(func() {
		h.cancel()
		<-h.runDone
		h.engine.Close()
		h.client.Close(10 * time.Second)
		h.pool.Close()
	})
}

// conv is a conversation the test started: the message it hangs from,
// and the engine's name of its thread.
type conv struct {
	channel, ts, key string
}

// mention has u mention the app in channel (the allowed one if "") and
// returns the conversation it would open.
func (h *harness) mention(u fakeslack.User, text string, opts ...fakeslack.MessageOption) conv {
	h.t.Helper()
	return h.mentionIn(h.channel, u, text, opts...)
}

func (h *harness) mentionIn(channel string, u fakeslack.User, text string, opts ...fakeslack.MessageOption) conv {
	h.t.Helper()
	ts := h.srv.PostMessage(channel, u.ID, h.srv.Bot().Mention()+" "+text, opts...)
	if ts == "" {
		h.t.FailNow()
	}
	return conv{channel: channel, ts: ts, key: "slack:" + channel + "/" + ts}
}

// say has u write text in the conversation's thread, and returns its ts.
func (h *harness) say(c conv, u fakeslack.User, text string) string {
	h.t.Helper()
	return h.srv.PostMessage(c.channel, u.ID, text, fakeslack.InThread(c.ts))
}

// command has u write a command to the app in the thread.
func (h *harness) command(c conv, u fakeslack.User, text string) string {
	h.t.Helper()
	return h.say(c, u, h.srv.Bot().Mention()+" "+text)
}

// shown is what a message shows, from its blocks: sections as they are,
// small print (context blocks) as "-# " lines, actions left out.
func shown(blocks []json.RawMessage, text string) string {
	if len(blocks) == 0 {
		return text
	}
	var lines []string
	for _, raw := range blocks {
		var b struct {
			Type string `json:"type"`
			Text struct {
				Text string `json:"text"`
			} `json:"text"`
			Elements []struct {
				Text string `json:"text"`
			} `json:"elements"`
		}
		json.Unmarshal(raw, &b)
		switch b.Type {
		case "section":
			lines = append(lines, b.Text.Text)
		case "context":
			for _, e := range b.Elements {
				for l := range strings.SplitSeq(e.Text, "\n") {
					lines = append(lines, "-# "+l)
				}
			}
		}
	}
	return strings.Join(lines, "\n")
}

func text(m fakeslack.Message) string { return shown(m.Blocks, m.Text) }

// element is an interactive element of a message.
type element struct {
	Type     string `json:"type"`
	ActionID string `json:"action_id"`
	URL      string `json:"url"`
	Style    string `json:"style"`
	Text     struct {
		Text string `json:"text"`
	} `json:"text"`
	Options []struct {
		Value string `json:"value"`
		Text  struct {
			Text string `json:"text"`
		} `json:"text"`
	} `json:"options"`
	InitialOption *struct {
		Value string `json:"value"`
	} `json:"initial_option"`
}

// elements are the interactive elements of blocks.
func elements(blocks []json.RawMessage) []element {
	var out []element
	for _, raw := range blocks {
		var b struct {
			Type     string    `json:"type"`
			Elements []element `json:"elements"`
		}
		json.Unmarshal(raw, &b)
		if b.Type == "actions" {
			out = append(out, b.Elements...)
		}
	}
	return out
}

// buttonID is the action id of the button labelled label.
func buttonID(t *testing.T, blocks []json.RawMessage, label string) string {
	t.Helper()
	var labels []string
	for _, e := range elements(blocks) {
		if e.Type == "button" && e.Text.Text == label {
			return e.ActionID
		}
		labels = append(labels, e.Text.Text)
	}
	t.Fatalf("no button %q among %q", label, labels)
	return ""
}

// botMessages are the app's messages in the conversation's thread, its
// permission requests and its file shares left out.
func (h *harness) botMessages(c conv) []fakeslack.Message {
	var out []fakeslack.Message
	for _, m := range h.srv.Thread(c.channel, c.ts) {
		if m.FromBot() && m.TS != c.ts && !strings.HasPrefix(text(m), "🔐") && len(m.Files) == 0 {
			out = append(out, m)
		}
	}
	return out
}

func joined(msgs []fakeslack.Message) string {
	var parts []string
	for _, m := range msgs {
		parts = append(parts, text(m))
	}
	return strings.Join(parts, "\n")
}

// finalFooter reports whether a message ends with the line that says how
// a turn ended.
func finalFooter(s string) bool { return brokertest.Footer(s) != "" }

// answer waits for the app's last message in the thread to end with a
// final footer containing want, and returns the app's messages there.
func (h *harness) answer(c conv, want string) []fakeslack.Message {
	h.t.Helper()
	var msgs []fakeslack.Message
	h.srv.Await("final answer with "+want, func() bool {
		msgs = h.botMessages(c)
		if len(msgs) == 0 {
			return false
		}
		last := text(msgs[len(msgs)-1])
		return strings.Contains(last, want) && finalFooter(last)
	})
	return msgs
}

// said waits for an app's message in the thread that says want.
func (h *harness) said(c conv, want string) fakeslack.Message {
	h.t.Helper()
	var found fakeslack.Message
	h.srv.Await("a message saying "+want, func() bool {
		for _, m := range h.srv.Thread(c.channel, c.ts) {
			if m.FromBot() && strings.Contains(text(m), want) {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

// whispered waits for a message shown to u alone that says want.
func (h *harness) whispered(u fakeslack.User, want string) fakeslack.Ephemeral {
	h.t.Helper()
	var found fakeslack.Ephemeral
	h.srv.Await(u.Name+" told "+want, func() bool {
		for _, e := range h.srv.Ephemerals(u.ID) {
			if strings.Contains(shown(e.Blocks, e.Text), want) {
				found = e
				return true
			}
		}
		return false
	})
	return found
}

// acked waits for an envelope's acknowledgement and checks it came in
// Slack's 3 seconds.
func (h *harness) acked(id string) fakeslack.Envelope {
	h.t.Helper()
	env := h.srv.AwaitAck(id)
	if !env.Acked || env.Failed {
		h.t.Fatalf("envelope %s (%s) not acknowledged in time: %+v", id, env.Kind, env.Attempts)
	}
	return env
}

// waitWorking waits until the agent has started on the conversation's
// prompt.
func (h *harness) waitWorking(c conv) {
	h.t.Helper()
	h.srv.Await("agent working", func() bool { return strings.Contains(joined(h.botMessages(c)), "working") })
}

// hasReaction reports whether the app reacted to message ts with name.
func (h *harness) hasReaction(channel, ts, name string) bool {
	return h.srv.HasReaction(channel, ts, h.srv.Bot().UserID, name)
}

// botReactions are the app's reactions on a message.
func (h *harness) botReactions(channel, ts string) []string {
	var out []string
	for _, r := range h.srv.Reactions(channel, ts) {
		for _, u := range r.Users {
			if u == h.srv.Bot().UserID {
				out = append(out, r.Name)
			}
		}
	}
	return out
}

// until waits, up to the harness's wait, for cond about the Client (not
// the fake Slack, whose changes Await follows) to hold.
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

// access allows only users in the harness's channel.
func (h *harness) access(users ...string) slack.Access {
	return slack.Access{Access: thread.Access{AllowedChannels: []string{h.channel}, AllowedUsers: users}}
}

func chunks(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "chunk %d\n", i)
	}
	return b.String()
}

// poolOf is a pool of up to n agents.
func poolOf(n int) pool.Config { return pool.Config{MaxSessions: n} }
