package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakediscord"
	"acpbroker/internal/fakeslack"
)

// platforms are the chat platforms a fault is held to, each in a world
// of its own: the promises are the same.
var platforms = []string{"discord", "slack"}

// forEachPlatform runs f as a subtest for each of platforms.
func forEachPlatform(t *testing.T, f func(t *testing.T, platform string)) {
	t.Helper()
	for _, p := range platforms {
		t.Run(p, func(t *testing.T) { f(t, p) })
	}
}

// person is one of a world's users, on whichever platform: "alice",
// "bob", "carol".
type person string

const (
	pAlice person = "alice"
	pBob   person = "bob"
	pCarol person = "carol"
)

// said is a message of the bot as a platform shows it: its id, what it
// shows, its buttons' labels, and the platform's own message.
type said struct {
	id, text string
	buttons  []string
	raw      any
}

// answer is one turn's answer as a thread shows it: its messages' ids,
// what they show joined by newlines, and the final line.
type answer struct {
	ids          []string
	text, footer string
}

// front is one chat platform of a world as its people see it and act
// there, for the fault tests that hold on every platform. A thread is
// named by what the platform names it by (Discord: the thread channel;
// Slack: the ts of the message it hangs from), which is the id of that
// message too. Its waits fail the test.
type front interface {
	name() string
	// mention has who mention the bot in the allowed channel and
	// returns the thread it opens.
	mention(who person, text string) string
	// send is mention without waiting for the bot to take the message.
	send(who person, text string) string
	// post has who write text in the thread; command writes a command
	// to the bot there (Discord: a slash command, Slack: "@bot NAME").
	post(thread string, who person, text string) string
	command(thread string, who person, name string)
	botMessages(thread string) []said
	answers(thread string) []answer
	awaitAnswers(thread string, n int) []answer
	awaitBotText(thread, text string, skip int) said
	// seenAt is when the bot's message id in the thread first showed
	// text.
	seenAt(thread, id, text string) time.Time
	// awaitReaction waits for the bot's status emoji (✅…) on message id
	// of the thread (id == thread: the message it hangs from);
	// botReactions lists them.
	awaitReaction(thread, id, emoji string)
	botReactions(thread, id string) []string
	// react has who put emoji (🛑) on message id of the thread.
	react(thread, id string, who person, emoji string)
	agentPID(thread string, who person) int
	// permissionRequest waits for an open permission request (with
	// buttons) in the thread, other than skip's.
	permissionRequest(thread string, skip ...string) said
	// message is the bot's message id in the thread as it stands.
	message(thread, id string) said
	// click has who click m's button labelled label, and checks the
	// click was answered in the platform's time.
	click(thread string, m said, who person, label string)
	// inject429 has the platform answer the next n message calls in
	// threads (posts and edits) 429 with retryAfter; rateLimited counts
	// the calls it answered 429.
	inject429(n int, retryAfter time.Duration)
	rateLimited() int
	// drop cuts the bot's connection; reconnected waits until it has
	// connected again n times in all.
	drop()
	reconnected(n int)
}

// front is the world's platform of that name.
func (w *world) front(platform string) front {
	switch platform {
	case "discord":
		return &discordFront{w: w}
	case "slack":
		return &slackFront{w: w, s: w.Slack}
	}
	w.t.Fatalf("no platform %q", platform)
	return nil
}

// newWorldOn is newWorld serving one platform, the fake Slack's waits
// as patient as the fake Discord's.
func newWorldOn(t *testing.T, platform string, s setup) (*world, front) {
	t.Helper()
	if platform == "slack" {
		s.slack = true
		s.conf = settings{"chat.platform": "slack"}.With(s.conf)
	}
	w := newWorld(t, s)
	return w, w.front(platform)
}

// await is w.Srv.Await on whichever fake f is.
func await(t *testing.T, f front, what string, cond func() bool) {
	t.Helper()
	brokertest.Must(t, patience, func(ctx context.Context) error {
		var err error
		switch f := f.(type) {
		case *discordFront:
			err = f.w.Srv.WaitFor(ctx, cond)
		case *slackFront:
			err = f.s.Srv.WaitFor(ctx, cond)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
}

// discordFront is a world's fake Discord.
type discordFront struct{ w *world }

func (f *discordFront) name() string { return "discord" }

func (f *discordFront) user(p person) fakediscord.User {
	switch p {
	case pBob:
		return bob
	case pCarol:
		return carol
	}
	return alice
}

func (f *discordFront) mention(who person, text string) string { return f.w.mention(f.user(who), text) }

func (f *discordFront) send(who person, text string) string {
	return f.w.Srv.SendMessage(f.w.Channel, f.user(who), f.w.Srv.Bot().Mention()+" "+text)
}

func (f *discordFront) post(thread string, who person, text string) string {
	return f.w.Discord.Post(thread, f.user(who), text)
}

func (f *discordFront) command(thread string, who person, name string) {
	f.w.slash(thread, f.user(who), name)
}

func discordSaid(m fakediscord.Message) said {
	s := said{id: m.ID, text: m.Content, raw: m}
	for _, b := range m.Buttons() {
		s.buttons = append(s.buttons, b.Label)
	}
	return s
}

func (f *discordFront) botMessages(thread string) []said {
	var out []said
	for _, m := range f.w.Discord.BotMessages(thread) {
		out = append(out, discordSaid(m))
	}
	return out
}

func discordAnswers(as []brokertest.Answer) []answer {
	var out []answer
	for _, a := range as {
		var ids []string
		for _, m := range a.Msgs {
			ids = append(ids, m.ID)
		}
		out = append(out, answer{ids: ids, text: a.Text, footer: a.Footer})
	}
	return out
}

func (f *discordFront) answers(thread string) []answer {
	return discordAnswers(f.w.Discord.Answers(thread))
}

func (f *discordFront) awaitAnswers(thread string, n int) []answer {
	return discordAnswers(f.w.awaitAnswers(thread, n))
}

func (f *discordFront) awaitBotText(thread, text string, skip int) said {
	return discordSaid(f.w.awaitNewBotText(thread, text, skip))
}

func (f *discordFront) seenAt(thread, id, text string) time.Time {
	return f.w.Discord.SeenAt(thread, id, text)
}

// where is the channel message id of a thread is in: the parent for
// the message the thread hangs from.
func (f *discordFront) where(thread, id string) string {
	if id == thread {
		return f.w.Channel
	}
	return thread
}

func (f *discordFront) awaitReaction(thread, id, emoji string) {
	f.w.awaitReaction(f.where(thread, id), id, emoji)
}

func (f *discordFront) botReactions(thread, id string) []string {
	return f.w.Discord.BotReactions(f.where(thread, id), id)
}

func (f *discordFront) react(thread, id string, who person, emoji string) {
	f.w.Srv.AddReaction(f.where(thread, id), id, f.user(who).ID, emoji)
}

func (f *discordFront) agentPID(thread string, who person) int {
	return f.w.agentPID(thread, f.user(who))
}

func (f *discordFront) permissionRequest(thread string, skip ...string) said {
	return discordSaid(f.w.permissionRequest(thread, skip...))
}

func (f *discordFront) message(thread, id string) said {
	m, _ := f.w.Srv.Message(thread, id)
	return discordSaid(m)
}

func (f *discordFront) click(thread string, m said, who person, label string) {
	f.w.response(f.w.Srv.ClickButton(thread, m.id, f.user(who).ID, m.raw.(fakediscord.Message).ButtonID(f.w.t, label)))
}

func (f *discordFront) inject429(n int, retryAfter time.Duration) {
	inAThread := func(route string) fakediscord.Match {
		return func(r fakediscord.Request) bool { return r.Route == route && r.Major != f.w.Channel }
	}
	f.w.Srv.Inject429(inAThread(fakediscord.RouteCreateMessage), n/3, retryAfter)
	f.w.Srv.Inject429(inAThread(fakediscord.RouteEditMessage), n-n/3, retryAfter)
}

func (f *discordFront) rateLimited() int { return len(f.w.Srv.RateLimited()) }

func (f *discordFront) drop() { f.w.Srv.DropGateway() }

func (f *discordFront) reconnected(n int) {
	f.w.Srv.Await("the gateway back", func() bool { st := f.w.Srv.Stats(); return st.Resumes+st.Identifies-1 >= n && st.Connected })
}

// slackFront is a world's fake Slack.
type slackFront struct {
	w *world
	s *brokertest.Slack
}

func (f *slackFront) name() string { return "slack" }

func (f *slackFront) user(p person) fakeslack.User { return f.s.User(string(p)) }

func (f *slackFront) mention(who person, text string) string {
	f.w.t.Helper()
	return brokertest.MustGet(f.w.t, patience, func(ctx context.Context) (string, error) {
		return f.s.Mention(ctx, f.user(who), text)
	})
}

func (f *slackFront) send(who person, text string) string {
	return f.s.Srv.PostMessage(f.s.Channel, f.user(who).ID, f.s.Srv.Bot().Mention()+" "+text)
}

func (f *slackFront) post(thread string, who person, text string) string {
	return f.s.Post(thread, f.user(who), text)
}

func (f *slackFront) command(thread string, who person, name string) {
	f.s.Command(thread, f.user(who), name)
}

// command2 is command, returning the ts of the message who wrote.
func (f *slackFront) command2(thread string, who person, name string) string {
	return f.s.Command(thread, f.user(who), name)
}

func (f *slackFront) said(m fakeslack.Message) said {
	s := said{id: m.TS, text: f.s.Text(m), raw: m}
	for _, e := range brokertest.SlackElements(m.Blocks) {
		s.buttons = append(s.buttons, e.Text.Text)
	}
	return s
}

func (f *slackFront) botMessages(thread string) []said {
	var out []said
	for _, m := range f.s.BotMessages(thread) {
		out = append(out, f.said(m))
	}
	return out
}

func slackAnswers(as []brokertest.SlackAnswer) []answer {
	var out []answer
	for _, a := range as {
		var ids []string
		for _, m := range a.Msgs {
			ids = append(ids, m.TS)
		}
		out = append(out, answer{ids: ids, text: a.Text, footer: a.Footer})
	}
	return out
}

func (f *slackFront) answers(thread string) []answer { return slackAnswers(f.s.Answers(thread)) }

func (f *slackFront) awaitAnswers(thread string, n int) []answer {
	f.w.t.Helper()
	return slackAnswers(brokertest.MustGet(f.w.t, patience, func(ctx context.Context) ([]brokertest.SlackAnswer, error) {
		return f.s.AwaitAnswers(ctx, thread, n)
	}))
}

func (f *slackFront) awaitBotText(thread, text string, skip int) said {
	f.w.t.Helper()
	return f.said(brokertest.MustGet(f.w.t, patience, func(ctx context.Context) (fakeslack.Message, error) {
		return f.s.AwaitBotText(ctx, thread, text, skip)
	}))
}

func (f *slackFront) seenAt(_, id, text string) time.Time { return f.s.SeenAt(f.s.Channel, id, text) }

func (f *slackFront) awaitReaction(_, id, emoji string) {
	f.w.t.Helper()
	brokertest.Must(f.w.t, patience, func(ctx context.Context) error {
		return f.s.AwaitReaction(ctx, f.s.Channel, id, emoji)
	})
}

func (f *slackFront) botReactions(_, id string) []string { return f.s.BotReactions(f.s.Channel, id) }

func (f *slackFront) react(_, id string, who person, emoji string) {
	name := brokertest.SlackEmoji[emoji]
	if name == "" {
		name = emoji
	}
	f.s.Srv.AddReaction(f.s.Channel, id, f.user(who).ID, name)
}

func (f *slackFront) agentPID(thread string, who person) int {
	f.w.t.Helper()
	return brokertest.MustGet(f.w.t, patience, func(ctx context.Context) (int, error) {
		return f.s.AgentPID(ctx, thread, f.user(who))
	})
}

func (f *slackFront) permissionRequest(thread string, skip ...string) said {
	f.w.t.Helper()
	return f.said(brokertest.MustGet(f.w.t, patience, func(ctx context.Context) (fakeslack.Message, error) {
		return f.s.PermissionRequest(ctx, thread, skip...)
	}))
}

func (f *slackFront) message(_, id string) said {
	m, _ := f.s.Srv.Message(f.s.Channel, id)
	return f.said(m)
}

func (f *slackFront) click(_ string, m said, who person, label string) {
	f.w.t.Helper()
	id, ok := brokertest.SlackButton(m.raw.(fakeslack.Message).Blocks, label)
	if !ok {
		f.w.t.Fatalf("no button %q among %q", label, m.buttons)
	}
	env := f.s.Srv.ClickButton(f.s.Channel, m.id, f.user(who).ID, id)
	brokertest.MustGet(f.w.t, patience, func(ctx context.Context) (fakeslack.Envelope, error) { return f.s.AwaitAck(ctx, env) })
}

// whispered waits for who to be shown want alone, after the first skip
// of such messages.
func (f *slackFront) whispered(who person, want string, skip int) fakeslack.Ephemeral {
	f.w.t.Helper()
	return brokertest.MustGet(f.w.t, patience, func(ctx context.Context) (fakeslack.Ephemeral, error) {
		return f.s.Whispered(ctx, f.user(who), want, skip)
	})
}

func (f *slackFront) inject429(n int, retryAfter time.Duration) {
	inAThread := func(c fakeslack.Call) bool {
		return (c.Method == "chat.postMessage" && c.Args["thread_ts"] != "") || c.Method == "chat.update"
	}
	f.s.Srv.Inject429(inAThread, n, retryAfter)
}

func (f *slackFront) rateLimited() int { return len(f.s.Srv.RateLimited()) }

func (f *slackFront) drop() { f.s.Srv.DropConnections() }

func (f *slackFront) reconnected(n int) {
	f.s.Srv.Await("the Socket Mode connection back", func() bool {
		st := f.s.Srv.SocketStats()
		return st.Connections-1 >= n && st.Ready > 0
	})
}

// threadsOf lists what the platform shows as the bot's threads: for a
// test that checks no other was opened.
func threadsOf(f front) int {
	switch f := f.(type) {
	case *discordFront:
		return len(f.w.Srv.Threads())
	case *slackFront:
		n := 0
		for _, m := range f.s.Srv.Messages(f.s.Channel) {
			if !m.FromBot() && len(f.s.Srv.Thread(f.s.Channel, m.TS)) > 1 && strings.Contains(m.Text, f.s.Srv.Bot().Mention()) {
				for _, r := range f.s.Srv.Thread(f.s.Channel, m.TS) {
					if r.FromBot() {
						n++
						break
					}
				}
			}
		}
		return n
	}
	return 0
}
