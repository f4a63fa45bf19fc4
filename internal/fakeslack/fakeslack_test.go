package fakeslack_test

import (
	"context"
	"errors"
	"flag"
	"strings"
	"sync"
	"testing"
	"time"

	"acpbroker/internal/fakeslack"

	"github.com/gorilla/websocket"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The tests mostly wait on timers and sockets, so unless
	// -test.parallel is given they run more at once than GOMAXPROCS.
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", "8")
	}
	// Every goroutine, the server's and slack-go's, must be gone once the
	// clients and servers are closed.
	goleak.VerifyTestMain(m)
}

// world is a fake workspace: alice and bob in #general, and a DM with
// alice.
type world struct {
	srv     *fakeslack.Server
	api     *slack.Client
	alice   fakeslack.User
	bob     fakeslack.User
	general fakeslack.Channel
	dm      fakeslack.Channel
}

func newWorld(t *testing.T, opts fakeslack.Options) *world {
	t.Helper()
	srv := fakeslack.New(t, opts)
	w := &world{srv: srv}
	w.alice = srv.AddUser(fakeslack.User{Name: "alice", Email: "alice@example.com"})
	w.bob = srv.AddUser(fakeslack.User{Name: "bob"})
	w.general = srv.AddChannel(fakeslack.Channel{Name: "general"})
	w.dm = srv.AddDM(w.alice.ID)
	w.api = newAPI(srv, srv.BotToken())
	return w
}

func newAPI(srv *fakeslack.Server, token string) *slack.Client {
	return slack.New(token,
		slack.OptionAPIURL(srv.APIURL()),
		slack.OptionAppLevelToken(srv.AppToken()),
		slack.OptionHTTPClient(srv.HTTPClient()))
}

// bot is a socketmode client run for a test: every event it gets is
// handed to handle, in its own goroutine's order. It is stopped by the
// test's cleanup, before the server closes.
type bot struct {
	client *socketmode.Client
	events chan socketmode.Event
}

// runBot connects a socketmode client; handle (nil: acknowledge
// everything) sees each envelope, which next then returns.
func runBot(t *testing.T, srv *fakeslack.Server, handle func(*socketmode.Client, socketmode.Event), opts ...socketmode.Option) *bot {
	t.Helper()
	api := newAPI(srv, srv.BotToken())
	client := socketmode.New(api, opts...)
	b := &bot{client: client, events: make(chan socketmode.Event, 256)}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { client.RunContext(ctx) })
	wg.Go(func() {
		for {
			select {
			case ev := <-client.Events:
				if ev.Request == nil || ev.Request.EnvelopeID == "" {
					continue // hello, disconnect, the client's own events
				}
				if handle != nil {
					handle(client, ev)
				} else {
					client.Ack(*ev.Request)
				}
				select {
				case b.events <- ev:
				default:
				}
			case <-ctx.Done():
				return
			}
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	srv.Await("a socket mode connection", srv.Connected)
	return b
}

// next returns the next envelope the bot got that match accepts.
func (b *bot) next(t *testing.T, match func(socketmode.Event) bool) socketmode.Event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-b.events:
			if match == nil || match(ev) {
				return ev
			}
		case <-timeout:
			t.Fatal("timed out waiting for an envelope")
		}
	}
}

// recv takes a value from ch, failing the test after 10s.
func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for a %T", *new(T))
		panic("unreachable")
	}
}

// innerOf returns the inner event of an Events API envelope, nil if it is
// another kind.
func innerOf(ev socketmode.Event) any {
	e, ok := ev.Data.(slackevents.EventsAPIEvent)
	if !ok {
		return nil
	}
	return e.InnerEvent.Data
}

func slackErr(t *testing.T, err error) string {
	t.Helper()
	var se slack.SlackErrorResponse
	if !errors.As(err, &se) {
		t.Fatalf("want a Slack error, got %v", err)
	}
	return se.Err
}

func TestSocketModeMentionAckAndThreadReply(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{})
	b := runBot(t, w.srv, nil)
	st := w.srv.SocketStats()
	if st.Opens != 1 || st.Connections != 1 || st.Ready != 1 {
		t.Errorf("socket stats after connect = %+v", st)
	}

	ts := w.srv.PostMessage(w.general.ID, w.alice.ID, w.srv.Bot().Mention()+" hello there")
	// A mention in a channel is a message there too, which the app hears
	// first.
	msg := b.next(t, nil)
	if me, ok := innerOf(msg).(*slackevents.MessageEvent); !ok || me.TimeStamp != ts || me.ChannelType != "channel" || me.User != w.alice.ID {
		t.Errorf("first event = %#v", innerOf(msg))
	}
	ev := b.next(t, nil)
	mention, ok := innerOf(ev).(*slackevents.AppMentionEvent)
	if !ok || mention.User != w.alice.ID || mention.Channel != w.general.ID || mention.TimeStamp != ts || !strings.Contains(mention.Text, "hello there") {
		t.Fatalf("second event = %#v", innerOf(ev))
	}
	env := w.srv.AwaitAck(ev.Request.EnvelopeID)
	if !env.Acked || env.Kind != "app_mention" || len(env.Attempts) != 1 || env.Attempts[0].Conn != 1 {
		t.Errorf("envelope = %+v", env)
	}

	ch, replyTS, err := w.api.PostMessage(w.general.ID, slack.MsgOptionText("thinking…", false), slack.MsgOptionTS(ts),
		slack.MsgOptionDisableLinkUnfurl(), slack.MsgOptionDisableMediaUnfurl())
	if err != nil || ch != w.general.ID {
		t.Fatalf("PostMessage = %s, %v", ch, err)
	}
	if _, _, _, err := w.api.UpdateMessage(w.general.ID, replyTS, slack.MsgOptionText("the answer", false)); err != nil {
		t.Fatalf("UpdateMessage: %v", err)
	}
	thread := w.srv.Thread(w.general.ID, ts)
	if len(thread) != 2 || thread[1].Text != "the answer" || !thread[1].FromBot() || thread[1].ThreadTS != ts || thread[0].Replies != 1 {
		t.Fatalf("thread = %+v", thread)
	}
	if r := thread[1]; r.UnfurlLinks == nil || *r.UnfurlLinks || r.UnfurlMedia == nil || *r.UnfurlMedia || r.Mrkdwn != nil {
		t.Errorf("unfurl flags = %v %v %v", r.UnfurlLinks, r.UnfurlMedia, r.Mrkdwn)
	}
	revs := w.srv.Revisions(w.general.ID, replyTS)
	if len(revs) != 2 || revs[0].Text != "thinking…" || revs[1].Method != "chat.update" {
		t.Errorf("revisions = %+v", revs)
	}
	// slack-go reads the thread back as Slack shows it.
	msgs, _, _, err := w.api.GetConversationReplies(&slack.GetConversationRepliesParameters{ChannelID: w.general.ID, Timestamp: ts})
	if err != nil || len(msgs) != 2 || msgs[0].ReplyCount != 1 || msgs[1].Text != "the answer" || msgs[1].BotID != w.srv.Bot().BotID {
		t.Errorf("conversations.replies = %+v, %v", msgs, err)
	}
	// The bot hears its own reply, as on Slack.
	own := b.next(t, func(ev socketmode.Event) bool {
		me, ok := innerOf(ev).(*slackevents.MessageEvent)
		return ok && me.BotID != ""
	})
	if me := innerOf(own).(*slackevents.MessageEvent); me.ThreadTimeStamp != ts {
		t.Errorf("own message event = %+v", me)
	}
}

// dial opens a Socket Mode URL by hand; the connection is closed by the
// test's cleanup.
func dial(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	conn, resp, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	resp.Body.Close()
	t.Cleanup(func() { conn.Close() })
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	return conn
}

func readJSON(t *testing.T, conn *websocket.Conn) map[string]any {
	t.Helper()
	var msg map[string]any
	if err := conn.ReadJSON(&msg); err != nil {
		t.Fatalf("read: %v", err)
	}
	return msg
}
