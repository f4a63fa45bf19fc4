package acp

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// A Conn that takes up an agent an earlier Conn set up knows its
// capabilities and its session's state without asking, numbers its
// requests past FirstID, and drops the agent's answer to the earlier
// Conn's request rather than take it for its own.
func TestAdopt_TheAgentIsKnownAndTheEarlierConnsAnswersMatchNothing(t *testing.T) {
	const first = 1_000_000
	c, p := newPair(t, Options{FirstID: first})
	init := InitializeResult{ProtocolVersion: ProtocolVersion, AgentCapabilities: AgentCapabilities{LoadSession: true}}
	state := SessionState{Modes: &SessionModes{Current: "plan", Available: []SessionMode{{ID: "plan", Name: "Plan"}}}}
	if err := c.Adopt(init, "s1", t.TempDir(), state); err != nil {
		t.Fatal(err)
	}
	if !c.Capabilities().LoadSession {
		t.Fatal("the adopted agent's capabilities are not known")
	}
	if got, ok := c.SessionState("s1"); !ok || got.Modes == nil || got.Modes.Current != "plan" {
		t.Fatalf("the adopted session's state: %+v, %v", got, ok)
	}
	call, err := c.Prompt(context.Background(), "s1", []ContentBlock{{Type: "text", Text: "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	id := p.Next()["id"]
	if string(id) != fmt.Sprint(first) {
		t.Fatalf("the first request's id is %s, want %d", id, first)
	}
	// The earlier Conn's prompt, id 1, ends now; then this one's.
	p.Send(`{"jsonrpc":"2.0","id":1,"result":{"stopReason":"cancelled"}}`)
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"stopReason":"end_turn"}}`, id))
	waitDone(t, call)
	var res PromptResult
	if err := call.Result(&res); err != nil || res.StopReason != "end_turn" {
		t.Fatalf("the prompt ended with %+v, %v; want its own answer", res, err)
	}
	if s := c.Stats(); s.StaleResponses != 1 {
		t.Fatalf("stale responses: %d, want the earlier Conn's answer counted", s.StaleResponses)
	}
}

// An adoption that could not be what the earlier Conn set up is refused.
func TestAdopt_RefusesAnotherProtocolOrNoSession(t *testing.T) {
	c, _ := newPair(t, Options{})
	if err := c.Adopt(InitializeResult{ProtocolVersion: ProtocolVersion + 1}, "s1", t.TempDir(), SessionState{}); !errors.Is(err, ErrProtocolVersion) {
		t.Fatalf("another protocol version: %v", err)
	}
	if err := c.Adopt(InitializeResult{ProtocolVersion: ProtocolVersion}, "", t.TempDir(), SessionState{}); !errors.Is(err, ErrInvalidParams) {
		t.Fatalf("no session: %v", err)
	}
}
