package slack_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"acpbroker/adapter"
	"acpbroker/chat/slack"
	"acpbroker/chat/thread"
	"acpbroker/internal/fakeslack"

	"github.com/rs/zerolog"
)

// bareClient is a Client of srv with tokens as given and no engine
// behind it (it is never handed a prompt).
func bareClient(t *testing.T, srv *fakeslack.Server, bot, app string) *slack.Client {
	t.Helper()
	c, err := slack.New(slack.Config{BotToken: bot, AppToken: app, APIURL: srv.APIURL(), HTTPClient: srv.HTTPClient(),
		Access: slack.Access{Access: thread.Access{AllowAllChannels: true}}, Logger: zerolog.New(zerolog.NewTestWriter(t))}, &adapter.Engine{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(time.Second) })
	return c
}

// A setting that cannot work is refused by New, naming its key.
func TestNew_RefusesSettingsThatCannotWork(t *testing.T) {
	for _, tc := range []struct {
		cfg  slack.Config
		want string
	}{
		{slack.Config{}, "slack.bot_token"},
		{slack.Config{BotToken: "xoxb"}, "slack.app_token"},
		{slack.Config{BotToken: "xoxb", Mode: "webhook"}, "slack.mode"},
		{slack.Config{BotToken: "xoxb", Mode: slack.ModeHTTP, Listen: ":0"}, "slack.signing_secret"},
		{slack.Config{BotToken: "xoxb", Mode: slack.ModeHTTP, SigningSecret: "s"}, "slack.listen"},
		{slack.Config{BotToken: "xoxb", AppToken: "xapp", APIURL: "ftp://example.com"}, "slack.api_url"},
		{slack.Config{BotToken: "xoxb", AppToken: "xapp", ThreadPrefix: "sl/ack"}, "prefix"},
	} {
		if _, err := slack.New(tc.cfg, &adapter.Engine{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}

// A token Slack refuses is no passing failure: Run says so at once, for
// the operator to mend, instead of trying for ever: the bot token at
// auth.test, the app-level token when Socket Mode's connection opens.
func TestResilience_ARefusedTokenEndsRunAtOnce(t *testing.T) {
	for _, tc := range []struct{ name, bot, app, want string }{
		{"bot token", "xoxb-not-it", "", "the bot token was refused"},
		{"app token", "", "xapp-not-it", "socket mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := fakeslack.New(t, fakeslack.Options{})
			bot, app := tc.bot, tc.app
			if bot == "" {
				bot = srv.BotToken()
			}
			if app == "" {
				app = srv.AppToken()
			}
			c := bareClient(t, srv, bot, app)
			done := make(chan error, 1)
			go func() { done <- c.Run(context.Background()) }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Run = %v, want %q", err, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run still tries a refused token after 10s")
			}
		})
	}
}

// While Slack keeps failing, stopping the broker ends the tries at once:
// the wait between them is abortable.
func TestResilience_StoppingEndsTheTriesToConnect(t *testing.T) {
	srv := fakeslack.New(t, fakeslack.Options{})
	srv.InjectError(fakeslack.OnMethod("auth.test"), 1000, 503)
	c := bareClient(t, srv, srv.BotToken(), srv.AppToken())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	srv.Await("a second try", func() bool { return len(srv.CallsTo("auth.test")) >= 2 })
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil: stopping is no failure", err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("Run ended %v after the stop, want it at once", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still waits to connect 10s after the stop")
	}
	if err := c.Healthy(); err == nil {
		t.Error("healthy without ever connecting")
	}
}

// Every envelope is acknowledged within Slack's 3 seconds whatever the
// app is doing: here it is stuck six seconds looking up the names of
// three users (Slack stalls users.info), and a click, a command and
// messages meanwhile are acknowledged all the same, then served.
func TestResilience_EnvelopesAreAcknowledgedWhateverTheAppDoes(t *testing.T) {
	h := newHarness(t, setup{})
	c := h.mention(h.alice, "permission")
	q := h.question(c, "🔐")
	h.srv.InjectStall(fakeslack.OnMethod("users.info"), 10, 5*time.Second)
	for _, name := range []string{"dave", "erin", "frank"} {
		// A name to look up, each: the app waits two seconds for each.
		u := h.srv.AddUser(fakeslack.User{Name: name})
		h.srv.PostMessage(h.channel, u.ID, h.srv.Bot().Mention()+" hello")
	}
	ids := []string{
		h.srv.ClickButton(c.channel, q.TS, h.alice.ID, buttonID(t, q.Blocks, "Allow")),
		h.srv.SlashCommand(h.channel, h.alice.ID, "/acp", "help"),
	}
	for i := range 5 {
		h.srv.PostMessage(h.channel, h.bob.ID, "chatter "+string(rune('a'+i)))
	}
	for _, id := range ids {
		if env := h.acked(id); env.AckedAt.Sub(env.Created) > 3*time.Second {
			t.Fatalf("%s acknowledged after %s", env.Kind, env.AckedAt.Sub(env.Created))
		}
	}
	for _, e := range h.srv.EnvelopesOf("message") {
		if env := h.srv.AwaitAck(e.ID); !env.Acked || len(env.Attempts) != 1 {
			t.Fatalf("a message was not acknowledged in time: %+v", env.Attempts)
		}
	}
	h.answer(c, "permission granted: allow")
	h.whispered(h.alice, "/acp new [agent] [prompt]")
}
