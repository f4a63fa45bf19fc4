package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"acpbroker/acp/acptest"
	"acpbroker/internal/redact"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "acp-fakeagent-")
	if err == nil {
		fakeAgent, err = buildFakeAgent(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// peer is the agent's end of a Conn: real bytes over pipes, scripted by
// the test.
type peer = acptest.Peer

func newPair(t *testing.T, opts Options) (*Conn, *peer) {
	t.Helper()
	p, agentOut, agentIn := acptest.NewPeer(t)
	opts.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	c := NewConn(agentOut, agentIn, opts)
	t.Cleanup(func() { c.Close() })
	return c, p
}

var str = acptest.Str

func waitDone(t *testing.T, call *Call) {
	t.Helper()
	select {
	case <-call.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("call %s not done within 5s", call.ID)
	}
}

func update(sid, text string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":%q,"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":%q}}}}`, sid, text)
}

func TestCall_LateAnswerToAbandonedRequestIsDroppedNotRoutedToNext(t *testing.T) {
	c, p := newPair(t, Options{})
	ctx := context.Background()
	first, err := c.Start(ctx, "session/prompt", map[string]string{"n": "1"})
	if err != nil {
		t.Fatal(err)
	}
	firstID := p.Next()["id"]
	first.Abandon()
	if got := c.Stats().PendingRequests; got != 0 {
		t.Fatalf("pending after abandon = %d, want 0", got)
	}
	p.Withdrawn(firstID)
	second, err := c.Start(ctx, "session/prompt", map[string]string{"n": "2"})
	if err != nil {
		t.Fatal(err)
	}
	secondID := p.Next()["id"]
	// The first prompt's answer arrives while the second runs.
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"stopReason":"end_turn","which":1}}`, firstID))
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"stopReason":"end_turn","which":2}}`, secondID))
	waitDone(t, second)
	var res struct{ Which int }
	if err := second.Result(&res); err != nil || res.Which != 2 {
		t.Fatalf("second call got which=%d err=%v, want its own answer (2)", res.Which, err)
	}
	if !errors.Is(first.Result(nil), ErrAbandoned) {
		t.Fatalf("abandoned call result = %v, want ErrAbandoned", first.Result(nil))
	}
	if s := c.Stats(); s.StaleResponses != 1 || s.PendingRequests != 0 {
		t.Fatalf("stats = %+v, want 1 stale response and 0 pending", s)
	}
}

func TestCall_ThousandAbandonedCallsLeaveNoBookkeeping(t *testing.T) {
	c, p := newPair(t, Options{})
	ids := make([]json.RawMessage, 0, 1000)
	for range 1000 {
		ctx, cancel := context.WithCancelCause(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- c.Call(ctx, "session/prompt", struct{}{}, nil) }()
		id := p.Next()["id"]
		ids = append(ids, id)
		cancel(errors.New("turn ceiling"))
		if err := <-errc; err == nil || err.Error() != "turn ceiling" {
			t.Fatalf("Call returned %v, want the context's cause", err)
		}
		p.Withdrawn(id)
	}
	if s := c.Stats(); s.PendingRequests != 0 {
		t.Fatalf("pending = %d after 1000 abandoned calls, want 0", s.PendingRequests)
	}
	for _, id := range ids {
		p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":null}`, id))
	}
	// A fresh call still works and sees only its own answer.
	call, err := c.Start(context.Background(), "ping", nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"ok":true}}`, p.Next()["id"]))
	waitDone(t, call)
	if s := c.Stats(); s.StaleResponses != 1000 || s.PendingRequests != 0 {
		t.Fatalf("stats = %+v, want 1000 stale and 0 pending", s)
	}
}

func TestStream_JunkAndOversizeLinesAreSkippedAndCounted(t *testing.T) {
	c, p := newPair(t, Options{MaxLineBytes: 1 << 20})
	call, err := c.Start(context.Background(), "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	id := p.Next()["id"]
	p.Send("Starting agent v1.2 ...")
	p.Send(`{"hello":"world"}`)
	p.Send(`[1,2,3]`)                // a batch: answered -32600 (see TestRoute_BatchesAndUnreadableIdsAreAnswered)
	p.Send(`{"jsonrpc":"2.0","id":`) // truncated JSON
	p.Send(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` + strings.Repeat("x", 2<<20) + `"}}}}`)
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"ok":true}}`, id))
	waitDone(t, call)
	if err := call.Result(nil); err != nil {
		t.Fatalf("call after junk: %v", err)
	}
	s := c.Stats()
	if s.JunkLines != 3 || s.InvalidRequests != 1 || s.OversizeLines != 1 {
		t.Fatalf("stats = %+v, want 3 junk lines, 1 invalid request and 1 oversize line", s)
	}
}

func TestStream_TwelveMiBLineIsDelivered(t *testing.T) {
	c, p := newPair(t, Options{})
	sub, err := c.Subscribe("s", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	big := strings.Repeat("y", 12<<20)
	p.Send(update("s", big))
	p.Send(update("s", "after"))
	for _, want := range []int{len(big), len("after")} {
		select {
		case u := <-sub.Updates():
			if u.Content == nil || len(u.Content.Text) != want {
				t.Fatalf("update text length %d, want %d", len(u.Content.Text), want)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("update not delivered")
		}
	}
}

func TestRoute_RequestWithOurPendingIDIsARequest(t *testing.T) {
	c, p := newPair(t, Options{})
	sub, err := c.Subscribe("s", ApproverFunc(func(ctx context.Context, r *PermissionRequest) PermissionOutcome {
		return PermissionOutcome{OptionID: "yes"}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	call, err := c.Start(context.Background(), "session/prompt", nil)
	if err != nil {
		t.Fatal(err)
	}
	id := p.Next()["id"]
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"session/request_permission","params":{"sessionId":"s","toolCall":{"toolCallId":"t"},"options":[{"optionId":"yes","name":"Yes","kind":"allow_once"}]}}`, id))
	reply := p.Next()
	if string(reply["id"]) != string(id) || !strings.Contains(string(reply["result"]), `"selected"`) {
		t.Fatalf("reply = %s / %s, want our answer to the agent's request", reply["id"], reply["result"])
	}
	select {
	case <-call.Done():
		t.Fatal("the agent's request completed our pending call")
	default:
	}
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"stopReason":"end_turn"}}`, id))
	waitDone(t, call)
}

func TestRoute_UnknownMethodGetsMethodNotFound(t *testing.T) {
	_, p := newPair(t, Options{})
	p.Send(`{"jsonrpc":"2.0","id":"abc-1","method":"x/unknown","params":{}}`)
	m := p.Next()
	if string(m["id"]) != `"abc-1"` || !strings.Contains(string(m["error"]), "-32601") {
		t.Fatalf("reply = %v, want error -32601 with the string id echoed", m)
	}
}

func TestRoute_UpdatesArriveInOrderBeforeTheAnswer(t *testing.T) {
	c, p := newPair(t, Options{})
	c.register("s", t.TempDir())
	sub, err := c.Subscribe("s", nil)
	if err != nil {
		t.Fatal(err)
	}
	call, err := c.Start(context.Background(), "session/prompt", nil)
	if err != nil {
		t.Fatal(err)
	}
	id := p.Next()["id"]
	for i := range 50 {
		p.Send(update("s", fmt.Sprint(i)))
	}
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"stopReason":"end_turn"}}`, id))
	waitDone(t, call)
	for i := range 50 {
		select {
		case u := <-sub.Updates():
			if u.Content.Text != fmt.Sprint(i) {
				t.Fatalf("update %d has text %q", i, u.Content.Text)
			}
		default:
			t.Fatalf("update %d was not queued before the answer was delivered", i)
		}
	}
	sub.Close()
	p.Send(update("s", "late"))
	p.Send(update("other", "early"))
	// A round trip orders the check after both updates were read.
	call, _ = c.Start(context.Background(), "ping", nil)
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":null}`, p.Next()["id"]))
	waitDone(t, call)
	// "s" is a known session with no turn: late. "other" is not known, and
	// no session is being created: dropped, and counted apart.
	if s := c.Stats(); s.LateUpdates != 1 || s.EarlyDropped != 1 || s.EarlyUpdates != 0 {
		t.Fatalf("late updates = %d, early dropped = %d, early kept = %d; want 1, 1, 0", s.LateUpdates, s.EarlyDropped, s.EarlyUpdates)
	}
	if got := c.register("other", t.TempDir()); len(got) != 0 {
		t.Fatalf("early updates for a session registered later = %+v", got)
	}
}

func TestRoute_FullQueueNeverBlocksTheReadLoop(t *testing.T) {
	c, p := newPair(t, Options{UpdateQueue: 4})
	sub, err := c.Subscribe("s", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	call, err := c.Start(context.Background(), "session/prompt", nil)
	if err != nil {
		t.Fatal(err)
	}
	id := p.Next()["id"]
	for i := range 10 {
		p.Send(update("s", fmt.Sprint(i)))
	}
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"stopReason":"end_turn"}}`, id))
	waitDone(t, call) // the answer got through although nobody read the updates
	select {
	case <-sub.Overflowed():
	default:
		t.Fatal("overflow not signalled")
	}
	if s := c.Stats(); s.DroppedUpdates != 6 {
		t.Fatalf("dropped = %d, want 6", s.DroppedUpdates)
	}
}

func permissionRequest(id, sid string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"session/request_permission","params":{"sessionId":%q,"toolCall":{"toolCallId":"t","title":"rm"},"options":[{"optionId":"a","name":"Allow","kind":"allow_once"},{"optionId":"r","name":"Reject","kind":"reject_once"}]}}`, id, sid)
}

func TestPermission_CancelAnswersCancelledAndReleasesTheEntry(t *testing.T) {
	c, p := newPair(t, Options{})
	asked := make(chan struct{})
	sub, err := c.Subscribe("s", ApproverFunc(func(ctx context.Context, r *PermissionRequest) PermissionOutcome {
		close(asked)
		<-ctx.Done() // a human who never clicks
		return PermissionOutcome{OptionID: "a"}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	p.Send(permissionRequest("7", "s"))
	<-asked
	if n := c.Stats().PendingPermissions; n != 1 {
		t.Fatalf("pending permissions = %d, want 1", n)
	}
	c.CancelPermissions("s", errors.New("turn cancelled"))
	m := p.Next()
	if string(m["id"]) != "7" || string(m["result"]) != `{"outcome":{"outcome":"cancelled"}}` {
		t.Fatalf("reply = %s %s, want cancelled for id 7", m["id"], m["result"])
	}
	if n := c.Stats().PendingPermissions; n != 0 {
		t.Fatalf("pending permissions = %d after cancel, want 0", n)
	}
}

func TestPermission_NoTurnListeningIsAnsweredCancelled(t *testing.T) {
	_, p := newPair(t, Options{})
	p.Send(permissionRequest(`"uuid-1"`, "nobody"))
	m := p.Next()
	if string(m["id"]) != `"uuid-1"` || !strings.Contains(string(m["result"]), "cancelled") {
		t.Fatalf("reply = %v", m)
	}
}

func TestPermission_OptionNotOfferedIsAnsweredCancelled(t *testing.T) {
	c, p := newPair(t, Options{})
	sub, _ := c.Subscribe("s", ApproverFunc(func(ctx context.Context, r *PermissionRequest) PermissionOutcome {
		return PermissionOutcome{OptionID: "made-up"}
	}))
	defer sub.Close()
	p.Send(permissionRequest("1", "s"))
	if m := p.Next(); !strings.Contains(string(m["result"]), "cancelled") {
		t.Fatalf("reply = %s", m["result"])
	}
}

func TestConn_AgentEOFFailsPendingCalls(t *testing.T) {
	c, p := newPair(t, Options{})
	call, err := c.Start(context.Background(), "session/prompt", nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Next()
	p.W.Close()
	waitDone(t, call)
	if err := call.Result(nil); !errors.Is(err, ErrAgentGone) {
		t.Fatalf("result = %v, want ErrAgentGone", err)
	}
	<-c.Done()
	if _, err := c.Start(context.Background(), "x", nil); !errors.Is(err, ErrAgentGone) {
		t.Fatalf("Start after EOF = %v, want ErrAgentGone", err)
	}
}

// The agent gets "cancelled" as soon as the request is cancelled, even
// from an approver that takes its time to return (it has a message to
// tidy up somewhere).
func TestPermission_CancelDoesNotWaitForTheApprover(t *testing.T) {
	c, p := newPair(t, Options{})
	asked := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	sub, err := c.Subscribe("s", ApproverFunc(func(ctx context.Context, r *PermissionRequest) PermissionOutcome {
		close(asked)
		<-ctx.Done()
		<-release // slow to return after the cancel
		return PermissionOutcome{}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	p.Send(permissionRequest("9", "s"))
	<-asked
	c.CancelPermissions("s", errors.New("turn cancelled"))
	m := p.Next() // fails after 5s without an answer
	if string(m["id"]) != "9" || string(m["result"]) != `{"outcome":{"outcome":"cancelled"}}` {
		t.Fatalf("reply = %s %s, want cancelled for id 9", m["id"], m["result"])
	}
	if n := c.Stats().PendingPermissions; n != 0 {
		t.Fatalf("pending permissions = %d after cancel, want 0", n)
	}
}

// An agent's error message can carry a secret it was given (an API key
// in a failing request's text): it is masked before anyone logs or shows
// it.
func TestCall_AnErrorMessageIsRedacted(t *testing.T) {
	c, p := newPair(t, Options{Redact: redact.New("sk-secret-123")})
	errc := make(chan error, 1)
	go func() { errc <- c.Call(context.Background(), "session/prompt", map[string]string{}, nil) }()
	req := p.NextMethod("session/prompt")
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32603,"message":"upstream refused key sk-secret-123"}}`, req["id"]))
	err := <-errc
	var rpcErr *RPCError
	if !errors.As(err, &rpcErr) || strings.Contains(err.Error(), "sk-secret-123") || !strings.Contains(err.Error(), "upstream refused key [redacted]") {
		t.Fatalf("err = %v, want the message with the key masked", err)
	}
}

// A request of ours abandoned while the agent still works on it (its
// context ended: a deadline, a cancelled turn) is withdrawn from the
// agent with $/cancel_request, once, even after Cancel; one answered,
// or never sent, is not.
func TestCall_AbandonedRequestIsWithdrawnFromTheAgent(t *testing.T) {
	c, p := newPair(t, Options{})
	ctx, cancel := context.WithCancelCause(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.SetConfigOption(ctx, "S1", "model", "fast")
		errc <- err
	}()
	req := p.NextMethod(MethodSetConfigOption)
	cancel(errors.New("deadline"))
	if err := <-errc; err == nil {
		t.Fatal("SetConfigOption returned no error after its context ended")
	}
	p.Withdrawn(req["id"])

	call, err := c.Start(context.Background(), "session/prompt", struct{}{})
	if err != nil {
		t.Fatal(err)
	}
	id := p.NextMethod("session/prompt")["id"]
	call.Cancel()
	p.Withdrawn(id)
	call.Cancel()
	call.Abandon()

	// Answered, then abandoned: nothing to withdraw. The next message the
	// agent gets is the next request.
	answered, err := c.Start(context.Background(), "x/answered", struct{}{})
	if err != nil {
		t.Fatal(err)
	}
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{}}`, p.NextMethod("x/answered")["id"]))
	waitDone(t, answered)
	answered.Abandon()
	c.Start(context.Background(), "x/last", struct{}{})
	if m := p.Next(); str(m["method"]) != "x/last" {
		t.Fatalf("got %s %s, want x/last: a withdrawal too many", m["method"], m["params"])
	}
}
