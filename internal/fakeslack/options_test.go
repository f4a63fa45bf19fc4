package fakeslack_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"acpbroker/internal/fakeslack"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"
)

func TestPingsKeepTheClientAndTheirAbsenceMakesItReconnect(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{PingInterval: 100 * time.Millisecond})
	runBot(t, w.srv, nil, socketmode.OptionPingInterval(time.Second))
	// Past the client's interval, the pings have kept it on its first
	// connection; it answered them.
	time.Sleep(1500 * time.Millisecond)
	st := w.srv.SocketStats()
	if st.Connections != 1 || st.Pings < 3 || st.Pongs < 1 {
		t.Fatalf("with pings every 100ms, after 1.5s: %+v", st)
	}
	w.srv.SetPings(false)
	w.srv.Await("a reconnection", func() bool { return w.srv.SocketStats().Connections >= 2 })
	w.srv.SetPings(true)
}

func TestDisableLinkSendsItsReason(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{})
	runBot(t, w.srv, nil)
	w.srv.DisableLink()
	w.srv.Await("a reconnection", func() bool {
		st := w.srv.SocketStats()
		return st.Connections == 2 && st.Ready == 1 && st.Disconnects["link_disabled"] == 1
	})
}

func TestSubscriptionsChooseTheEvents(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{Events: []string{"app_mention", "message.im"}})
	runBot(t, w.srv, nil)
	w.srv.PostMessage(w.general.ID, w.alice.ID, w.srv.Bot().Mention()+" here")
	w.srv.PostMessage(w.general.ID, w.alice.ID, "not for the bot")
	w.srv.PostMessage(w.dm.ID, w.alice.ID, "direct")
	w.srv.Await("two events", func() bool { return w.srv.SocketStats().Acks == 2 })
	var kinds []string
	for _, e := range w.srv.Envelopes() {
		kinds = append(kinds, e.Kind)
	}
	if got := strings.Join(kinds, " "); got != "app_mention message" {
		t.Errorf("events = %s", got)
	}
}

func TestNoEchoSilencesTheBotsOwnEvents(t *testing.T) {
	t.Parallel()
	for _, noEcho := range []bool{false, true} {
		w := newWorld(t, fakeslack.Options{NoEcho: noEcho})
		_, ts, err := w.api.PostMessage(w.general.ID, slack.MsgOptionText("mine", false))
		if err != nil {
			t.Fatal(err)
		}
		w.api.AddReaction("tada", slack.NewRefToMessage(w.general.ID, ts))
		w.srv.PostMessage(w.general.ID, w.alice.ID, "theirs")
		want := 3
		if noEcho {
			want = 1
		}
		if n := len(w.srv.Envelopes()); n != want {
			t.Errorf("NoEcho %v: %d envelopes, want %d", noEcho, n, want)
		}
	}
}

func TestMaxTextLength(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{MaxTextLength: 4000})
	if _, _, err := w.api.PostMessage(w.general.ID, slack.MsgOptionText(strings.Repeat("x", 4001), false)); slackErr(t, err) != "msg_too_long" {
		t.Errorf("4,001 characters: %v", err)
	}
	if _, _, err := w.api.PostMessage(w.general.ID, slack.MsgOptionText(strings.Repeat("é", 4000), false)); err != nil {
		t.Errorf("4,000 characters of two bytes: %v", err)
	}
}

func TestRecordsAreBounded(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{MaxCalls: 10, MaxEnvelopes: 5, NoRateLimits: true})
	runBot(t, w.srv, nil)
	for i := range 30 {
		w.api.PostMessage(w.general.ID, slack.MsgOptionText(strconv.Itoa(i), false))
	}
	calls := w.srv.Calls()
	if len(calls) > 20 || calls[len(calls)-1].Args["text"] != "29" {
		t.Errorf("%d calls kept, last %v", len(calls), calls[len(calls)-1].Args)
	}
	w.srv.Await("every event acknowledged", func() bool { return w.srv.SocketStats().Acks == 30 })
	w.srv.PostMessage(w.dm.ID, w.alice.ID, "one more")
	w.srv.Await("its ack", func() bool { return w.srv.SocketStats().Acks == 31 })
	if n := len(w.srv.Envelopes()); n > 10 {
		t.Errorf("%d envelopes kept", n)
	}
	if w.srv.Pending() != 0 {
		t.Errorf("pending = %d", w.srv.Pending())
	}
}

func TestIdentitiesAsConfigured(t *testing.T) {
	t.Parallel()
	srv := fakeslack.New(t, fakeslack.Options{
		BotToken: "xoxb-42", AppToken: "xapp-42", TeamID: "T42", TeamDomain: "acme",
		BotUserID: "U42", BotID: "B42", AppID: "A42", BotName: "acp",
	})
	at, err := newAPI(srv, "xoxb-42").AuthTest()
	if err != nil || at.TeamID != "T42" || at.UserID != "U42" || at.BotID != "B42" || at.User != "acp" || at.URL != "https://acme.slack.com/" {
		t.Errorf("auth.test = %+v, %v", at, err)
	}
	if _, err := newAPI(srv, fakeslack.DefaultBotToken).AuthTest(); slackErr(t, err) != "invalid_auth" {
		t.Errorf("the default token still works: %v", err)
	}
	_, url, err := newAPI(srv, "xoxb-42").StartSocketModeContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	hello := readJSON(t, dial(t, url))
	if info, _ := hello["connection_info"].(map[string]any); hello["type"] != "hello" || info["app_id"] != "A42" {
		t.Errorf("hello = %v", hello)
	}
}

func TestViewClosedOnlyWhenAskedFor(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{})
	triggers := make(chan string, 4)
	closed := make(chan slack.InteractionCallback, 4)
	runBot(t, w.srv, func(c *socketmode.Client, ev socketmode.Event) {
		c.Ack(*ev.Request)
		switch d := ev.Data.(type) {
		case slack.SlashCommand:
			triggers <- d.TriggerID
		case slack.InteractionCallback:
			if d.Type == slack.InteractionTypeViewClosed {
				closed <- d
			}
		}
	})
	open := func(m slack.ModalViewRequest) *slack.ViewResponse {
		w.srv.SlashCommand(w.dm.ID, w.alice.ID, "/ask", "")
		v, err := w.api.OpenView(recv(t, triggers), m)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	quiet := open(askModal("Quiet"))
	if id := w.srv.CloseView(quiet.ID, w.alice.ID); id != "" {
		t.Errorf("a view without notify_on_close sent %s", id)
	}
	loud := askModal("Loud")
	loud.NotifyOnClose, loud.ClearOnClose = true, true
	v := open(loud)
	w.srv.CloseView(v.ID, w.alice.ID)
	cb := recv(t, closed)
	if cb.View.ID != v.ID || !cb.IsCleared {
		t.Errorf("view_closed = %+v", cb)
	}
	tooMany := askModal("Many")
	for range 100 {
		tooMany.Blocks.BlockSet = append(tooMany.Blocks.BlockSet, slack.NewDividerBlock())
	}
	w.srv.SlashCommand(w.dm.ID, w.alice.ID, "/ask", "")
	_, err := w.api.OpenView(recv(t, triggers), tooMany)
	var se slack.SlackErrorResponse
	if !errors.As(err, &se) || se.Err != "invalid_arguments" || !strings.Contains(fmt.Sprint(se.ResponseMetadata.Messages), "[json-pointer:/view/blocks]") {
		t.Errorf("a modal of 102 blocks: %v", err)
	}
}

func TestVerifyURLEchoesTheChallenge(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{})
	hs := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ev, err := slackevents.ParseEvent(json.RawMessage(body), slackevents.OptionNoVerifyToken())
		if err != nil || ev.Type != slackevents.URLVerification {
			http.Error(rw, "not a challenge", http.StatusBadRequest)
			return
		}
		io.WriteString(rw, ev.Data.(*slackevents.EventsAPIURLVerificationEvent).Challenge)
	}))
	t.Cleanup(hs.Close)
	w.srv.UseHTTP(fakeslack.Endpoints{Events: hs.URL})
	if err := w.srv.VerifyURL(context.Background()); err != nil {
		t.Error(err)
	}
}

// recordingTB takes the failures the fake reports, to check how it
// reports misuse; Fatalf ends the goroutine as testing's does.
type recordingTB struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *recordingTB) failures() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.errs...)
}

func TestMisuseIsReportedAndAwaitGivesUp(t *testing.T) {
	t.Parallel()
	rec := &recordingTB{TB: t}
	srv := fakeslack.New(rec, fakeslack.Options{WaitTimeout: 200 * time.Millisecond})
	general := srv.AddChannel(fakeslack.Channel{Name: "general"})
	if id := srv.ClickButton(general.ID, "1.000001", "U1", "go"); id != "" {
		t.Errorf("a click on no message sent %s", id)
	}
	if ts := srv.PostMessage("C-none", "U1", "hi"); ts != "" {
		t.Errorf("a post in no channel gave %s", ts)
	}
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Await("something that never happens", func() bool { return false })
	}()
	<-done
	if waited := time.Since(start); waited < 200*time.Millisecond || waited > 5*time.Second {
		t.Errorf("Await gave up after %v", waited)
	}
	got := rec.failures()
	if len(got) != 3 || !strings.Contains(got[0], "ClickButton") || !strings.Contains(got[1], "unknown channel") ||
		!strings.Contains(got[2], "something that never happens") {
		t.Errorf("failures = %q", got)
	}
}
