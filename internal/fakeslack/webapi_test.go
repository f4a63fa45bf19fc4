package fakeslack_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/fakeslack"

	"github.com/slack-go/slack"
)

func text(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject("plain_text", s, false, false)
}

func section(s string) slack.Block {
	return slack.NewSectionBlock(slack.NewTextBlockObject("mrkdwn", s, false, false), nil, nil)
}

// rawCall posts a form to a Web API method and decodes the answer.
func rawCall(t *testing.T, srv *fakeslack.Server, method string, form url.Values, header http.Header) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.APIURL()+method, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := srv.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	body, _ := io.ReadAll(resp.Body)
	json.Unmarshal(body, &out)
	return resp.StatusCode, out
}

func TestTokensAndUnknownMethods(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{})
	if _, err := newAPI(w.srv, "xoxb-wrong").AuthTest(); slackErr(t, err) != "invalid_auth" {
		t.Errorf("wrong token: %v", err)
	}
	if _, err := newAPI(w.srv, "").AuthTest(); slackErr(t, err) != "not_authed" {
		t.Errorf("no token: %v", err)
	}
	if _, _, err := newAPI(w.srv, w.srv.AppToken()).PostMessage(w.general.ID, slack.MsgOptionText("hi", false)); slackErr(t, err) != "not_allowed_token_type" {
		t.Errorf("app token for chat.postMessage: %v", err)
	}
	botAsApp := slack.New(w.srv.BotToken(), slack.OptionAPIURL(w.srv.APIURL()), slack.OptionAppLevelToken(w.srv.BotToken()), slack.OptionHTTPClient(w.srv.HTTPClient()))
	if _, _, err := botAsApp.StartSocketModeContext(context.Background()); slackErr(t, err) != "not_allowed_token_type" {
		t.Errorf("bot token for apps.connections.open: %v", err)
	}
	at, err := w.api.AuthTest()
	if err != nil || at.UserID != w.srv.Bot().UserID || at.BotID != w.srv.Bot().BotID || at.TeamID != w.srv.Team().ID {
		t.Errorf("auth.test = %+v, %v", at, err)
	}
	status, body := rawCall(t, w.srv, "chat.frobnicate", url.Values{"token": {w.srv.BotToken()}}, nil)
	if status != 200 || body["ok"] != false || body["error"] != "unknown_method" {
		t.Errorf("unknown method: %d %v", status, body)
	}
	// The token may come as a header or as an argument; the call record
	// keeps it out of the arguments.
	status, body = rawCall(t, w.srv, "auth.test", nil, http.Header{"Authorization": {"Bearer " + w.srv.BotToken()}})
	if status != 200 || body["ok"] != true {
		t.Errorf("bearer token: %d %v", status, body)
	}
	for _, c := range w.srv.Calls() {
		if _, ok := c.Args["token"]; ok {
			t.Errorf("call %s kept the token", c.Method)
		}
	}
}

func TestBlockKitLimitsAnsweredAsSlackDoes(t *testing.T) {
	t.Parallel()
	// Refused calls count against the limit too; this test is about the
	// refusals.
	w := newWorld(t, fakeslack.Options{NoRateLimits: true})
	many := make([]slack.Block, 51)
	for i := range many {
		many[i] = slack.NewDividerBlock()
	}
	menu := make([]*slack.OptionBlockObject, 101)
	for i := range menu {
		menu[i] = slack.NewOptionBlockObject("v", text("option"), nil)
	}
	cases := []struct {
		name    string
		opts    []slack.MsgOption
		err     string
		pointer string
	}{
		{"51 blocks", []slack.MsgOption{slack.MsgOptionBlocks(many...)}, "invalid_blocks", "/blocks"},
		{"section text of 3001", []slack.MsgOption{slack.MsgOptionBlocks(section(strings.Repeat("x", 3001)))}, "invalid_blocks", "/blocks/0/text/text"},
		{"button text of 76", []slack.MsgOption{slack.MsgOptionBlocks(slack.NewActionBlock("a",
			slack.NewButtonBlockElement("b", "v", text(strings.Repeat("x", 76)))))}, "invalid_blocks", "/blocks/0/elements/0/text/text"},
		{"button value of 2001", []slack.MsgOption{slack.MsgOptionBlocks(slack.NewActionBlock("a",
			slack.NewButtonBlockElement("b", strings.Repeat("v", 2001), text("ok"))))}, "invalid_blocks", "/blocks/0/elements/0/value"},
		{"action_id of 256", []slack.MsgOption{slack.MsgOptionBlocks(slack.NewActionBlock("a",
			slack.NewButtonBlockElement(strings.Repeat("a", 256), "v", text("ok"))))}, "invalid_blocks", "/blocks/0/elements/0/action_id"},
		{"block_id of 256", []slack.MsgOption{slack.MsgOptionBlocks(slack.NewDividerBlock(), slack.NewActionBlock(strings.Repeat("b", 256),
			slack.NewButtonBlockElement("a", "v", text("ok"))))}, "invalid_blocks", "/blocks/1/block_id"},
		{"select of 101 options", []slack.MsgOption{slack.MsgOptionBlocks(slack.NewActionBlock("a",
			slack.NewOptionsSelectBlockElement("static_select", text("pick"), "s", menu...)))}, "invalid_blocks", "/blocks/0/elements/0/options"},
		{"text of 40,001", []slack.MsgOption{slack.MsgOptionText(strings.Repeat("x", 40001), false)}, "msg_too_long", ""},
		{"nothing", []slack.MsgOption{slack.MsgOptionText("", false)}, "no_text", ""},
	}
	for _, c := range cases {
		_, _, err := w.api.PostMessage(w.general.ID, c.opts...)
		var se slack.SlackErrorResponse
		if !errors.As(err, &se) || se.Err != c.err {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if c.pointer == "" {
			continue
		}
		want := "[json-pointer:" + c.pointer + "]"
		if len(se.ResponseMetadata.Messages) == 0 || !strings.Contains(se.ResponseMetadata.Messages[0], want) {
			t.Errorf("%s: messages %q, want %s", c.name, se.ResponseMetadata.Messages, want)
		}
	}
	// At the limits, all is well.
	if _, _, err := w.api.PostMessage(w.general.ID, slack.MsgOptionText(strings.Repeat("x", 40000), false),
		slack.MsgOptionBlocks(section(strings.Repeat("y", 3000)))); err != nil {
		t.Errorf("at the limits: %v", err)
	}
	if n := len(w.srv.Messages(w.general.ID)); n != 1 {
		t.Errorf("%d messages stored, want only the one within limits", n)
	}
}

func TestOnlyTheBotsMessagesChangeAndEphemeralsNever(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{})
	userTS := w.srv.PostMessage(w.general.ID, w.alice.ID, "mine")
	if _, _, _, err := w.api.UpdateMessage(w.general.ID, userTS, slack.MsgOptionText("yours", false)); slackErr(t, err) != "cant_update_message" {
		t.Errorf("update a user's message: %v", err)
	}
	if _, _, err := w.api.DeleteMessage(w.general.ID, userTS); slackErr(t, err) != "cant_delete_message" {
		t.Errorf("delete a user's message: %v", err)
	}
	ephTS, err := w.api.PostEphemeral(w.general.ID, w.alice.ID, slack.MsgOptionText("only you", false))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := w.api.UpdateMessage(w.general.ID, ephTS, slack.MsgOptionText("changed", false)); slackErr(t, err) != "message_not_found" {
		t.Errorf("update an ephemeral: %v", err)
	}
	if eph := w.srv.Ephemerals(w.alice.ID); len(eph) != 1 || eph[0].Text != "only you" || eph[0].TS != ephTS {
		t.Errorf("ephemerals = %+v", eph)
	}
	private := w.srv.AddChannel(fakeslack.Channel{Name: "secret", Kind: fakeslack.Private, Members: []string{w.bob.ID}})
	if _, err := w.api.PostEphemeral(private.ID, w.alice.ID, slack.MsgOptionText("hi", false)); slackErr(t, err) != "user_not_in_channel" {
		t.Errorf("ephemeral to a user outside: %v", err)
	}
	_, ts, err := w.api.PostMessage(w.general.ID, slack.MsgOptionText("bye", false))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.api.DeleteMessage(w.general.ID, ts); err != nil {
		t.Fatal(err)
	}
	if m, _ := w.srv.Message(w.general.ID, ts); !m.Deleted {
		t.Errorf("deleted message = %+v", m)
	}
	if _, _, err := w.api.DeleteMessage(w.general.ID, ts); slackErr(t, err) != "message_not_found" {
		t.Errorf("delete twice: %v", err)
	}
	w.srv.SetBotAbsent(w.general.ID, true)
	if _, _, err := w.api.PostMessage(w.general.ID, slack.MsgOptionText("hi", false)); slackErr(t, err) != "not_in_channel" {
		t.Errorf("post where the bot is not: %v", err)
	}
}

func TestReplyToAThreadThatIsNotThereGoesTopLevel(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{})
	_, ts, m, err := w.api.PostMessageWithResponse(w.general.ID, slack.MsgOptionText("orphan", false), slack.MsgOptionTS("1700000000.000001"))
	if err != nil || m.ThreadTimestamp != "" {
		t.Fatalf("reply to no thread: thread_ts %q, %v", m.ThreadTimestamp, err)
	}
	if got, _ := w.srv.Message(w.general.ID, ts); got.UnthreadedFrom != "1700000000.000001" || got.ThreadTS != "" {
		t.Errorf("message = %+v", got)
	}
	// A parent deleted while it has replies stays as a tombstone, and its
	// thread goes on.
	parent := w.srv.PostMessage(w.general.ID, w.alice.ID, "question")
	w.srv.PostMessage(w.general.ID, w.bob.ID, "answer", fakeslack.InThread(parent))
	w.srv.DeleteMessage(w.general.ID, parent)
	_, _, m, err = w.api.PostMessageWithResponse(w.general.ID, slack.MsgOptionText("still here", false), slack.MsgOptionTS(parent))
	if err != nil || m.ThreadTimestamp != parent {
		t.Errorf("reply under a tombstone: thread_ts %q, %v", m.ThreadTimestamp, err)
	}
	thread := w.srv.Thread(w.general.ID, parent)
	if len(thread) != 3 || !thread[0].Tombstone {
		t.Errorf("thread = %+v", thread)
	}
}

func TestRateLimitsSeenBySlackGo(t *testing.T) {
	t.Parallel()
	// Slack's one a second, stretched so that a slow machine cannot earn
	// a token back between the calls.
	limit := fakeslack.PostMessage
	limit.Per *= 10
	w := newWorld(t, fakeslack.Options{RateLimits: map[string]fakeslack.RateLimit{"chat.postMessage": limit}})
	other := w.srv.AddChannel(fakeslack.Channel{Name: "other"})
	for i := range 3 {
		if _, _, err := w.api.PostMessage(w.general.ID, slack.MsgOptionText("burst", false)); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
	}
	_, _, err := w.api.PostMessage(w.general.ID, slack.MsgOptionText("one too many", false))
	var rl *slack.RateLimitedError
	if !errors.As(err, &rl) || rl.RetryAfter < 9*time.Second || rl.RetryAfter > 10*time.Second {
		t.Fatalf("fourth post at once: %v", err)
	}
	// The limit is per channel.
	if _, _, err := w.api.PostMessage(other.ID, slack.MsgOptionText("elsewhere", false)); err != nil {
		t.Errorf("post in another channel: %v", err)
	}
	limited := w.srv.RateLimited()
	if len(limited) != 1 || limited[0].Method != "chat.postMessage" || limited[0].Channel() != w.general.ID || limited[0].Status != 429 {
		t.Errorf("rate limited calls = %+v", limited)
	}
	w.srv.Inject429(fakeslack.OnMethod("chat.update"), 1, 2500*time.Millisecond)
	_, ts, _ := w.api.PostMessage(other.ID, slack.MsgOptionText("x", false))
	_, _, _, err = w.api.UpdateMessage(other.ID, ts, slack.MsgOptionText("y", false))
	if !errors.As(err, &rl) || rl.RetryAfter != 3*time.Second {
		t.Errorf("injected 429: %v", err)
	}
	if _, _, _, err := w.api.UpdateMessage(other.ID, ts, slack.MsgOptionText("y", false)); err != nil {
		t.Errorf("after the injected 429: %v", err)
	}
}

func TestTierLimitRefills(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{RateLimits: map[string]fakeslack.RateLimit{
		"reactions.get": {Limit: 1, Per: 2 * time.Second, Burst: 2},
	}})
	_, ts, _ := w.api.PostMessage(w.general.ID, slack.MsgOptionText("x", false))
	item := slack.NewRefToMessage(w.general.ID, ts)
	for range 2 {
		if _, err := w.api.GetReactions(item, slack.GetReactionsParameters{}); err != nil {
			t.Fatal(err)
		}
	}
	var rl *slack.RateLimitedError
	if _, err := w.api.GetReactions(item, slack.GetReactionsParameters{}); !errors.As(err, &rl) {
		t.Fatalf("third call in the burst: %v", err)
	}
	time.Sleep(2100 * time.Millisecond) // a token comes back every 2s
	if _, err := w.api.GetReactions(item, slack.GetReactionsParameters{}); err != nil {
		t.Errorf("after the refill: %v", err)
	}
}

func TestInjectedFaults(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{})
	w.srv.InjectError(fakeslack.OnMethod("chat.postMessage"), 1, http.StatusServiceUnavailable)
	_, _, err := w.api.PostMessage(w.general.ID, slack.MsgOptionText("x", false))
	var sc slack.StatusCodeError
	if !errors.As(err, &sc) || sc.Code != 503 {
		t.Errorf("injected 503: %v", err)
	}
	w.srv.InjectSlackError(fakeslack.OnMethodIn("chat.postMessage", w.general.ID), 1, "internal_error")
	if _, _, err := w.api.PostMessage(w.general.ID, slack.MsgOptionText("x", false)); slackErr(t, err) != "internal_error" {
		t.Errorf("injected internal_error: %v", err)
	}
	w.srv.InjectDrop(fakeslack.OnMethod("auth.test"), 1)
	if _, err := w.api.AuthTest(); err == nil || errors.As(err, &sc) {
		t.Errorf("dropped connection: %v", err)
	}
	w.srv.InjectStall(fakeslack.OnMethod("auth.test"), 1, 300*time.Millisecond)
	start := time.Now()
	if _, err := w.api.AuthTest(); err != nil || time.Since(start) < 300*time.Millisecond {
		t.Errorf("stalled call: %v after %v", err, time.Since(start))
	}
	if len(w.srv.Messages(w.general.ID)) != 0 {
		t.Errorf("a failed post was stored")
	}
	injected := 0
	for _, c := range w.srv.Calls() {
		if c.Injected {
			injected++
		}
	}
	if injected != 4 {
		t.Errorf("%d calls marked injected, want 4", injected)
	}
}

func TestChaosFailsAShareOfCalls(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{NoRateLimits: true})
	w.srv.SetChaos(fakeslack.Chaos{Seed: 7, Rate429: 0.2, RateError: 0.2, Match: fakeslack.OnMethod("auth.test")})
	failed := 0
	for range 100 {
		if _, err := w.api.AuthTest(); err != nil {
			failed++
		}
	}
	counts := w.srv.ChaosCounts()
	if counts.TooManyRequests+counts.Errors[503] != failed || failed < 20 || failed > 60 {
		t.Errorf("%d of 100 failed; counts %+v", failed, counts)
	}
	w.srv.SetChaos(fakeslack.Chaos{})
	if _, err := w.api.AuthTest(); err != nil {
		t.Errorf("with chaos off: %v", err)
	}
}

func TestReactions(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{})
	b := runBot(t, w.srv, nil)
	ts := w.srv.PostMessage(w.general.ID, w.alice.ID, "react to me")
	item := slack.NewRefToMessage(w.general.ID, ts)
	if err := w.api.AddReaction("eyes", item); err != nil {
		t.Fatal(err)
	}
	if err := w.api.AddReaction("eyes", item); slackErr(t, err) != "already_reacted" {
		t.Errorf("twice: %v", err)
	}
	if err := w.api.AddReaction(":eyes:", item); slackErr(t, err) != "invalid_name" {
		t.Errorf("with colons: %v", err)
	}
	w.srv.AddReaction(w.general.ID, ts, w.bob.ID, "eyes")
	got, err := w.api.GetReactions(item, slack.GetReactionsParameters{})
	if err != nil || len(got.Reactions) != 1 || got.Reactions[0].Count != 2 || got.Reactions[0].Name != "eyes" {
		t.Errorf("reactions.get = %+v, %v", got, err)
	}
	if err := w.api.RemoveReaction("eyes", item); err != nil {
		t.Fatal(err)
	}
	if err := w.api.RemoveReaction("eyes", item); slackErr(t, err) != "no_reaction" {
		t.Errorf("remove twice: %v", err)
	}
	if !w.srv.HasReaction(w.general.ID, ts, w.bob.ID, "eyes") || w.srv.HasReaction(w.general.ID, ts, w.srv.Bot().UserID, "eyes") {
		t.Errorf("reactions = %+v", w.srv.Reactions(w.general.ID, ts))
	}
	// The app hears bob's reaction, and its own two changes.
	w.srv.Await("reaction events", func() bool {
		return len(w.srv.EnvelopesOf("reaction_added")) == 2 && len(w.srv.EnvelopesOf("reaction_removed")) == 1
	})
	_ = b
}
