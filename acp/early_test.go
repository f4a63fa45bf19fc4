package acp

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// roundTrip returns once the Conn has read everything the peer sent
// before it.
func roundTrip(t *testing.T, c *Conn, p *peer) {
	t.Helper()
	call, err := c.Start(context.Background(), "ping", nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":null}`, p.NextMethod("ping")["id"]))
	waitDone(t, call)
}

// While a session is being created, updates for sessions not yet known
// are kept for it within bounds of count and bytes; the rest are dropped
// and counted. The session gets its own, its state from them first; the
// others are dropped once no session is being created, and nothing stays.
func TestNewSession_EarlyUpdatesAreBoundedAndDoNotOutliveIt(t *testing.T) {
	c, p := newPair(t, Options{})
	var early []Update
	done := asyncResult(func() error {
		var err error
		_, early, err = c.NewSession(context.Background(), ".", nil)
		return err
	})
	req := p.NextMethod("session/new")
	p.Send(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"S1","update":{"sessionUpdate":"current_mode_update","currentModeId":"plan"}}}`)
	p.Send(update("S1", "before the answer"))
	// A flood for sessions that will never exist: many small updates
	// for one, then 12 more ids with 40 updates of 8 KiB each.
	const small, ids, each = 100, 12, 40
	for i := range small {
		p.Send(update("chatty", fmt.Sprint(i)))
	}
	chunk := strings.Repeat("z", 8<<10)
	for i := range each {
		for id := range ids {
			p.Send(update(fmt.Sprintf("made-up-%d", id), fmt.Sprint(i, chunk)))
		}
	}
	roundTrip(t, c, p)
	s := c.Stats()
	if s.EarlyBytes > maxEarlyBytes || s.EarlyBytes < maxEarlyBytes-(10<<10) {
		t.Fatalf("%d bytes kept while the session is created; want just under %d", s.EarlyBytes, maxEarlyBytes)
	}
	sent := 2 + small + ids*each
	if s.EarlyUpdates+int(s.EarlyDropped) != sent {
		t.Fatalf("kept %d updates and dropped %d of %d", s.EarlyUpdates, s.EarlyDropped, sent)
	}
	c.mu.Lock()
	sessions, chatty := len(c.early), len(c.early["chatty"].updates)
	c.mu.Unlock()
	if sessions != maxEarlySessions || chatty != maxEarlyUpdates {
		t.Fatalf("updates kept for %d sessions, %d for one; want %d and %d", sessions, chatty, maxEarlySessions, maxEarlyUpdates)
	}

	p.Reply(req, `{"sessionId":"S1"}`)
	if err := waitErr(t, done); err != nil {
		t.Fatal(err)
	}
	if len(early) != 2 || early[1].Content.Text != "before the answer" {
		t.Fatalf("the session's early updates: %+v", early)
	}
	if st, _ := c.SessionState("S1"); st.CurrentMode() != "plan" {
		t.Fatalf("the mode set before the answer is %q", st.CurrentMode())
	}
	s = c.Stats()
	if s.EarlyUpdates != 0 || s.EarlyBytes != 0 || s.EarlyDropped != uint64(sent-2) {
		t.Fatalf("after session/new: %d updates and %d bytes kept, %d dropped; want 0, 0 and %d", s.EarlyUpdates, s.EarlyBytes, s.EarlyDropped, sent-2)
	}
	// With no session being created, an update for an unknown session is
	// not kept at all.
	p.Send(update("made-up-0", "later"))
	roundTrip(t, c, p)
	if s := c.Stats(); s.EarlyUpdates != 0 || s.EarlyDropped != uint64(sent-1) {
		t.Fatalf("an update for an unknown session later: %d kept, %d dropped", s.EarlyUpdates, s.EarlyDropped)
	}
}

// A turn's queue holds at most Options.UpdateQueueBytes of updates: past
// it an update is dropped and the subscription overflows, as past its
// count; what the turn takes (Took) makes room again, down to nothing.
func TestRoute_TheQueueIsBoundedInBytes(t *testing.T) {
	c, p := newPair(t, Options{UpdateQueueBytes: 1 << 20})
	sub, err := c.Subscribe("s", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	big := strings.Repeat("b", 300<<10)
	for range 3 {
		p.Send(update("s", big))
	}
	roundTrip(t, c, p)
	select {
	case <-sub.Overflowed():
		t.Fatal("overflowed within the bound")
	default:
	}
	for range 3 {
		sub.Took(<-sub.Updates())
	}
	if n := sub.queued.Load(); n != 0 {
		t.Fatalf("%d bytes counted in an empty queue", n)
	}
	for range 4 {
		p.Send(update("s", big))
	}
	roundTrip(t, c, p)
	select {
	case <-sub.Overflowed():
	default:
		t.Fatal("4 × 300 KiB in a queue of 1 MiB did not overflow")
	}
	if s := c.Stats(); s.DroppedUpdates != 1 || len(sub.updates) != 3 {
		t.Fatalf("%d dropped, %d queued; want 1 and 3", s.DroppedUpdates, len(sub.updates))
	}
}

// The agent's requests being served hold at most MaxAgentRequestBytes of
// params: a request past it is refused at once, and what is counted
// returns to nothing once they are answered.
func TestConn_RequestsInFlightAreBoundedInBytes(t *testing.T) {
	c, p := newPair(t, Options{MaxAgentRequestBytes: 10 << 20})
	release := make(chan struct{})
	sub, err := c.Subscribe("s", ApproverFunc(func(ctx context.Context, r *PermissionRequest) PermissionOutcome {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return PermissionOutcome{OptionID: "a"}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	title := strings.Repeat("t", 4<<20)
	for i := range 5 {
		p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/request_permission","params":{"sessionId":"s","toolCall":{"toolCallId":"t","title":%q},"options":[{"optionId":"a","name":"Allow","kind":"allow_once"}]}}`, i, title))
	}
	for range 3 {
		if m := p.Next(); !strings.Contains(string(m["error"]), "of at most 10485760 bytes in all") {
			t.Fatalf("a request past the bytes in flight got %s %s", m["result"], m["error"])
		}
	}
	if st := c.Stats(); st.AgentRequests != 2 || st.RefusedRequests != 3 {
		t.Fatalf("%d served, %d refused; want 2 and 3", st.AgentRequests, st.RefusedRequests)
	}
	close(release)
	for range 2 {
		if m := p.Next(); !strings.Contains(string(m["result"]), `"optionId":"a"`) {
			t.Fatalf("an admitted request got %s %s", m["result"], m["error"])
		}
	}
	waitServed(t, c, 0)
	c.mu.Lock()
	held := c.servingBytes
	c.mu.Unlock()
	if held != 0 {
		t.Fatalf("%d bytes counted in flight after every answer", held)
	}
}

// A session id longer than maxSessionIDBytes fails session/new: it would
// be logged with every line of a turn and kept in the state store.
func TestNewSession_ALongSessionIDIsRefused(t *testing.T) {
	c, p := newPair(t, Options{})
	done := asyncResult(func() error { _, _, err := c.NewSession(context.Background(), ".", nil); return err })
	p.Reply(p.NextMethod("session/new"), fmt.Sprintf(`{"sessionId":%q}`, strings.Repeat("s", maxSessionIDBytes+1)))
	if err := waitErr(t, done); err == nil || !strings.Contains(err.Error(), "more than 1024") {
		t.Fatalf("a session id of %d bytes: %v", maxSessionIDBytes+1, err)
	}
}
