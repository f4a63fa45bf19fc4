package fakeslack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"acpbroker/internal/fakeslack"

	"github.com/gorilla/websocket"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"
)

func TestUnackedEventIsRedeliveredWithRetryAttempt(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{AckTimeout: time.Second, RetryDelays: []time.Duration{0, 0}})
	var seen atomic.Int32
	b := runBot(t, w.srv, func(c *socketmode.Client, ev socketmode.Event) {
		// The first delivery is dropped on the floor; the retry is
		// acknowledged.
		if seen.Add(1) > 1 {
			c.Ack(*ev.Request)
		}
	})
	start := time.Now()
	w.srv.PostMessage(w.dm.ID, w.alice.ID, "are you there?")
	first := b.next(t, nil)
	retry := b.next(t, nil)
	if first.Request.EnvelopeID != retry.Request.EnvelopeID || first.Request.RetryAttempt != 0 ||
		retry.Request.RetryAttempt != 1 || retry.Request.RetryReason != "timeout" {
		t.Fatalf("deliveries = %+v then %+v", first.Request, retry.Request)
	}
	env := w.srv.AwaitAck(first.Request.EnvelopeID)
	if !env.Acked || len(env.Attempts) != 2 || env.Attempts[0].Reason != "timeout" || !env.Attempts[1].Acked {
		t.Errorf("envelope = %+v", env)
	}
	if gap := env.Attempts[1].At.Sub(start); gap < time.Second {
		t.Errorf("retried after %v, before the 1s deadline", gap)
	}
	if me, ok := innerOf(retry).(*slackevents.MessageEvent); !ok || me.ChannelType != "im" {
		t.Errorf("retried event = %#v", innerOf(retry))
	}
}

func TestEventGivenUpAfterRetriesAndLateAckCounted(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{AckTimeout: 100 * time.Millisecond, RetryDelays: []time.Duration{50 * time.Millisecond}})
	b := runBot(t, w.srv, func(*socketmode.Client, socketmode.Event) {})
	w.srv.PostMessage(w.dm.ID, w.alice.ID, "hello?")
	ev := b.next(t, nil)
	env := w.srv.AwaitAck(ev.Request.EnvelopeID)
	if env.Acked || !env.Failed || len(env.Attempts) != 2 || env.Attempts[1].Retry != 1 {
		t.Fatalf("envelope = %+v", env)
	}
	if w.srv.Pending() != 0 {
		t.Errorf("pending = %d after giving up", w.srv.Pending())
	}
	b.client.Ack(*ev.Request)
	w.srv.Await("the late ack counted", func() bool { return w.srv.SocketStats().LateAcks == 1 })
	if env, _ := w.srv.Envelope(ev.Request.EnvelopeID); env.Acked || env.LateAcks != 1 {
		t.Errorf("after a late ack: %+v", env)
	}
}

func TestInteractionNotAckedIsNotRetried(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{AckTimeout: 200 * time.Millisecond, RetryDelays: []time.Duration{0}})
	b := runBot(t, w.srv, func(*socketmode.Client, socketmode.Event) {})
	_, ts, err := w.api.PostMessage(w.general.ID, slack.MsgOptionBlocks(
		slack.NewActionBlock("acts", slack.NewButtonBlockElement("go", "v1", slack.NewTextBlockObject("plain_text", "Go", false, false)))))
	if err != nil {
		t.Fatal(err)
	}
	id := w.srv.ClickButton(w.general.ID, ts, w.bob.ID, "go")
	ev := b.next(t, func(ev socketmode.Event) bool { return ev.Type == socketmode.EventTypeInteractive })
	cb := ev.Data.(slack.InteractionCallback)
	if cb.Type != slack.InteractionTypeBlockActions || cb.User.ID != w.bob.ID || cb.TriggerID == "" || cb.ResponseURL == "" ||
		len(cb.ActionCallback.BlockActions) != 1 || cb.ActionCallback.BlockActions[0].Value != "v1" || cb.Container.MessageTs != ts {
		t.Errorf("block_actions = %+v", cb)
	}
	env := w.srv.AwaitAck(id)
	if !env.Failed || len(env.Attempts) != 1 || env.Attempts[0].Reason != "timeout" {
		t.Errorf("envelope = %+v", env)
	}
}

func TestEnvelopesGoToOneOfSeveralConnections(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{})
	a := runBot(t, w.srv, nil)
	b := runBot(t, w.srv, nil)
	w.srv.Await("two connections", func() bool { return w.srv.SocketStats().Ready == 2 })
	for i := range 4 {
		w.srv.PostMessage(w.dm.ID, w.alice.ID, "message "+strconv.Itoa(i))
	}
	w.srv.Await("four acks", func() bool { return w.srv.SocketStats().Acks == 4 })
	conns := map[int]int{}
	for _, e := range w.srv.Envelopes() {
		if len(e.Attempts) != 1 {
			t.Fatalf("envelope %s attempts = %+v", e.ID, e.Attempts)
		}
		conns[e.Attempts[0].Conn]++
	}
	if len(conns) != 2 || conns[1] != 2 || conns[2] != 2 {
		t.Errorf("envelopes by connection = %v", conns)
	}
	_, _ = a, b
}

func TestRefreshAndDroppedConnectionsReconnect(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{DisconnectGrace: time.Second})
	b := runBot(t, w.srv, nil)
	w.srv.RefreshConnections()
	w.srv.Await("a second connection", func() bool {
		st := w.srv.SocketStats()
		return st.Connections == 2 && st.Ready == 1 && st.Open == 1
	})
	if st := w.srv.SocketStats(); st.Disconnects["refresh_requested"] != 1 || st.Opens != 2 {
		t.Errorf("stats after refresh = %+v", st)
	}
	w.srv.DropConnections()
	w.srv.Await("a third connection", func() bool { return w.srv.SocketStats().Connections == 3 && w.srv.Connected() })
	ts := w.srv.PostMessage(w.dm.ID, w.alice.ID, "still there?")
	ev := b.next(t, func(ev socketmode.Event) bool {
		me, ok := innerOf(ev).(*slackevents.MessageEvent)
		return ok && me.TimeStamp == ts
	})
	if env := w.srv.AwaitAck(ev.Request.EnvelopeID); !env.Acked || env.Attempts[0].Conn != 3 {
		t.Errorf("envelope = %+v", env)
	}
}

func TestEnvelopesWaitForAConnection(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{})
	ts := w.srv.PostMessage(w.dm.ID, w.alice.ID, "before the bot connects")
	if w.srv.Pending() != 1 {
		t.Fatalf("pending = %d", w.srv.Pending())
	}
	b := runBot(t, w.srv, nil)
	ev := b.next(t, nil)
	if me, ok := innerOf(ev).(*slackevents.MessageEvent); !ok || me.TimeStamp != ts || ev.Request.RetryAttempt != 0 {
		t.Errorf("event = %#v", innerOf(ev))
	}
	w.srv.Await("no envelope pending", func() bool { return w.srv.Pending() == 0 })
}

func TestTooManyConnectionsAreToldToGo(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{MaxConnections: 1, DisconnectGrace: 200 * time.Millisecond})
	runBot(t, w.srv, nil)
	// A raw second connection, so that no client loops reconnecting.
	_, url, err := w.api.StartSocketModeContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	conn := dial(t, url)
	msg := readJSON(t, conn)
	if msg["type"] != "disconnect" || msg["reason"] != "too_many_websockets" {
		t.Errorf("second connection got %v", msg)
	}
	if st := w.srv.SocketStats(); st.Ready != 1 || st.Disconnects["too_many_websockets"] != 1 {
		t.Errorf("stats = %+v", st)
	}
	// A connection told to go that stays is closed after the grace.
	if _, _, err := conn.ReadMessage(); err == nil {
		t.Error("the connection stayed open")
	}
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Errorf("closed after %v, before the 200ms grace", waited)
	}
}

// receiver is an app's Request URL: it checks every request with
// slack-go's verifier, as a front end in HTTP mode does, and keeps the
// event ids it took.
type receiver struct {
	secret string
	mu     sync.Mutex
	taken  map[string]bool
	log    []received
	answer func(r received) (status int, header http.Header, body string, delay time.Duration)
}

type received struct {
	verified error
	retryNum string
	reason   string
	body     []byte
	eventID  string
	dup      bool
}

func (rv *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc := received{body: body, retryNum: r.Header.Get("X-Slack-Retry-Num"), reason: r.Header.Get("X-Slack-Retry-Reason")}
	sv, err := slack.NewSecretsVerifier(r.Header, rv.secret)
	if err == nil {
		sv.Write(body)
		err = sv.Ensure()
	}
	rc.verified = err
	var cb struct {
		EventID string `json:"event_id"`
	}
	json.Unmarshal(body, &cb)
	rc.eventID = cb.EventID
	rv.mu.Lock()
	if err == nil && cb.EventID != "" {
		rc.dup = rv.taken[cb.EventID]
		rv.taken[cb.EventID] = true
	}
	rv.log = append(rv.log, rc)
	n := len(rv.log)
	rv.mu.Unlock()
	if err != nil {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	status, header, out, delay := http.StatusOK, http.Header(nil), "", time.Duration(0)
	if rv.answer != nil {
		status, header, out, delay = rv.answer(rc)
	}
	_ = n
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
		}
	}
	for k, v := range header {
		w.Header()[k] = v
	}
	w.WriteHeader(status)
	io.WriteString(w, out)
}

func (rv *receiver) received() []received {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return append([]received(nil), rv.log...)
}

func newReceiver(t *testing.T, srv *fakeslack.Server) (*receiver, *httptest.Server) {
	rv := &receiver{secret: srv.SigningSecret(), taken: map[string]bool{}}
	hs := httptest.NewServer(rv)
	t.Cleanup(hs.Close)
	return rv, hs
}

func TestHTTPModeSignaturesCheckedBySlackGoVerifier(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{})
	rv, hs := newReceiver(t, w.srv)
	w.srv.UseHTTP(fakeslack.Endpoints{Events: hs.URL})
	ctx := context.Background()

	w.srv.PostMessage(w.dm.ID, w.alice.ID, "over http")
	w.srv.Await("the event acknowledged", func() bool {
		e := w.srv.EnvelopesOf("message")
		return len(e) == 1 && e[0].Acked
	})
	env := w.srv.EnvelopesOf("message")[0]
	got := rv.received()
	if len(got) != 1 || got[0].verified != nil || got[0].eventID != env.EventID || env.Attempts[0].Status != 200 {
		t.Fatalf("receiver got %+v; envelope %+v", got, env)
	}

	forged, err := w.srv.SendSigned(ctx, fakeslack.SignedRequest{Secret: "not-the-secret"})
	if err != nil || forged.Status != http.StatusUnauthorized {
		t.Errorf("forged request answered %+v, %v", forged, err)
	}
	stale, err := w.srv.SendSigned(ctx, fakeslack.SignedRequest{Timestamp: time.Now().Add(-10 * time.Minute)})
	if err != nil || stale.Status != http.StatusUnauthorized {
		t.Errorf("stale request answered %+v, %v", stale, err)
	}
	unsigned, err := w.srv.SendSigned(ctx, fakeslack.SignedRequest{Unsigned: true})
	if err != nil || unsigned.Status != http.StatusUnauthorized {
		t.Errorf("unsigned request answered %+v, %v", unsigned, err)
	}
	good, err := w.srv.SendSigned(ctx, fakeslack.SignedRequest{})
	if err != nil || good.Status != http.StatusOK {
		t.Errorf("well signed request answered %+v, %v", good, err)
	}
	// A replay carries a valid signature: only the event id tells it.
	replayed, err := w.srv.Replay(ctx, env.ID)
	if err != nil || replayed.Status != http.StatusOK {
		t.Fatalf("replay answered %+v, %v", replayed, err)
	}
	got = rv.received()
	if len(got) != 6 {
		t.Fatalf("receiver got %d requests", len(got))
	}
	if !errors.Is(got[1].verified, slack.ErrInvalidSignature) || !errors.Is(got[2].verified, slack.ErrExpiredTimestamp) ||
		!errors.Is(got[3].verified, slack.ErrMissingHeaders) || got[4].verified != nil {
		t.Errorf("verifier said %v, %v, %v, %v", got[1].verified, got[2].verified, got[3].verified, got[4].verified)
	}
	if got[5].verified != nil || !got[5].dup || !bytes.Equal(got[5].body, got[0].body) {
		t.Errorf("replay: verified %v, duplicate %v", got[5].verified, got[5].dup)
	}
	if err := w.srv.VerifyURL(ctx); err == nil {
		t.Error("VerifyURL passed a receiver that does not echo the challenge")
	}
}

func TestHTTPModeRetriesWithHeaders(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{AckTimeout: time.Second, RetryDelays: []time.Duration{0, 0, 0}})
	rv, hs := newReceiver(t, w.srv)
	rv.answer = func(r received) (int, http.Header, string, time.Duration) {
		switch r.retryNum {
		case "":
			return http.StatusInternalServerError, nil, "", 0
		case "1":
			return http.StatusOK, nil, "", 3 * time.Second // too late
		}
		return http.StatusOK, nil, "", 0
	}
	w.srv.UseHTTP(fakeslack.Endpoints{Events: hs.URL})
	w.srv.PostMessage(w.dm.ID, w.alice.ID, "retry me")
	w.srv.Await("the event acknowledged", func() bool {
		e := w.srv.EnvelopesOf("message")
		return len(e) == 1 && e[0].Acked
	})
	env := w.srv.EnvelopesOf("message")[0]
	if len(env.Attempts) != 3 || env.Attempts[0].Reason != "http_error" || env.Attempts[0].Status != 500 ||
		env.Attempts[1].Reason != "http_timeout" || !env.Attempts[2].Acked {
		t.Errorf("attempts = %+v", env.Attempts)
	}
	w.srv.Await("three requests received", func() bool { return len(rv.received()) == 3 })
	got := rv.received()
	if got[1].retryNum != "1" || got[1].reason != "http_error" || got[2].retryNum != "2" || got[2].reason != "http_timeout" {
		t.Errorf("retry headers = %+v / %+v", got[1], got[2])
	}
	for _, r := range got {
		if r.verified != nil {
			t.Errorf("a retry did not verify: %v", r.verified)
		}
	}
}

func TestHTTPModeNoRetryHeaderStopsRetries(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{RetryDelays: []time.Duration{0, 0}})
	rv, hs := newReceiver(t, w.srv)
	rv.answer = func(received) (int, http.Header, string, time.Duration) {
		return http.StatusServiceUnavailable, http.Header{"X-Slack-No-Retry": {"1"}}, "", 0
	}
	w.srv.UseHTTP(fakeslack.Endpoints{Events: hs.URL})
	w.srv.PostMessage(w.dm.ID, w.alice.ID, "no retry")
	w.srv.Await("the event given up", func() bool {
		e := w.srv.EnvelopesOf("message")
		return len(e) == 1 && e[0].Failed
	})
	if n := len(rv.received()); n != 1 {
		t.Errorf("receiver got %d requests", n)
	}
}

func TestHTTPModeInteractivityIsAFormPayload(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{})
	var mu sync.Mutex
	var got []slack.InteractionCallback
	var commands []slack.SlashCommand
	hs := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		sv, err := slack.NewSecretsVerifier(r.Header, w.srv.SigningSecret())
		if err == nil {
			sv.Write(body)
			err = sv.Ensure()
		}
		if err != nil {
			http.Error(rw, "bad signature", http.StatusUnauthorized)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case "/events":
			return // the bot's own message
		case "/commands":
			cmd, err := slack.SlashCommandParse(r)
			if err != nil {
				t.Errorf("SlashCommandParse: %v", err)
			}
			commands = append(commands, cmd)
			io.WriteString(rw, "working on it")
			return
		}
		cb, err := slack.InteractionCallbackParse(r)
		if err != nil {
			t.Errorf("InteractionCallbackParse: %v", err)
		}
		got = append(got, cb)
	}))
	t.Cleanup(hs.Close)
	w.srv.UseHTTP(fakeslack.Endpoints{Events: hs.URL + "/events", Interactivity: hs.URL + "/interactive", Commands: hs.URL + "/commands"})
	_, ts, err := w.api.PostMessage(w.general.ID, slack.MsgOptionBlocks(
		slack.NewActionBlock("acts", slack.NewButtonBlockElement("stop", "now", slack.NewTextBlockObject("plain_text", "Stop", false, false)))))
	if err != nil {
		t.Fatal(err)
	}
	click := w.srv.AwaitAck(w.srv.ClickButton(w.general.ID, ts, w.alice.ID, "stop"))
	cmd := w.srv.AwaitAck(w.srv.SlashCommand(w.general.ID, w.alice.ID, "/ask", "what now"))
	if !click.Acked || !cmd.Acked {
		t.Fatalf("click %+v, command %+v", click, cmd)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].ActionCallback.BlockActions[0].ActionID != "stop" || got[0].User.ID != w.alice.ID {
		t.Errorf("interactions = %+v", got)
	}
	if len(commands) != 1 || commands[0].Command != "/ask" || commands[0].Text != "what now" || commands[0].TriggerID == "" {
		t.Errorf("commands = %+v", commands)
	}
	// A text answer to a command is shown to its user alone.
	eph := w.srv.Ephemerals(w.alice.ID)
	if len(eph) != 1 || eph[0].Text != "working on it" || eph[0].Via != "ack" {
		t.Errorf("ephemerals = %+v", eph)
	}
}

func TestInteractionsWithoutAConnectionFailAtOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{})
	_, ts, err := w.api.PostMessage(w.general.ID, slack.MsgOptionBlocks(
		slack.NewActionBlock("acts", slack.NewButtonBlockElement("go", "", text("Go")))))
	if err != nil {
		t.Fatal(err)
	}
	env, _ := w.srv.Envelope(w.srv.ClickButton(w.general.ID, ts, w.alice.ID, "go"))
	if !env.Failed || len(env.Attempts) != 0 {
		t.Errorf("a click with no connection: %+v", env)
	}
	env, _ = w.srv.Envelope(w.srv.SlashCommand(w.general.ID, w.alice.ID, "/ask", "x"))
	if !env.Failed {
		t.Errorf("a command with no connection: %+v", env)
	}
	// The bot's own message event waits for a connection.
	if w.srv.Pending() != 1 {
		t.Errorf("pending = %d", w.srv.Pending())
	}
}

func TestOversizedAckIsDropped(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{AckTimeout: 500 * time.Millisecond, RetryDelays: []time.Duration{}})
	_, url, err := w.api.StartSocketModeContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	conn := dial(t, url)
	if hello := readJSON(t, conn); hello["type"] != "hello" {
		t.Fatalf("first message = %v", hello)
	}
	w.srv.PostMessage(w.dm.ID, w.alice.ID, "hi")
	env := readJSON(t, conn)
	id, _ := env["envelope_id"].(string)
	big, _ := json.Marshal(map[string]any{"envelope_id": id, "payload": map[string]string{"pad": strings.Repeat("x", 20<<10)}})
	if err := conn.WriteMessage(websocket.TextMessage, big); err != nil {
		t.Fatal(err)
	}
	w.srv.Await("the oversized ack counted", func() bool { return w.srv.SocketStats().Oversized == 1 })
	if e := w.srv.AwaitAck(id); e.Acked || !e.Failed {
		t.Errorf("envelope after an oversized ack = %+v", e)
	}
}
