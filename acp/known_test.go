package acp

import (
	"context"
	"fmt"
	"testing"
)

// Updates of kinds and content of types this client does not know are
// counted and passed on with their kind only, even when they use known
// field names their own way; the updates around them arrive as usual.
func TestRoute_UnknownKindsAndContentAreCountedAndPassedOn(t *testing.T) {
	c, p := newPair(t, Options{})
	c.register("s", t.TempDir())
	sub, err := c.Subscribe("s", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	send := func(u string) {
		p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":%s}}`, u))
	}
	send(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"before"}}`)
	send(`{"sessionUpdate":"future_thing","title":42,"entries":"not a list","status":{"x":1}}`)
	send(`{"sessionUpdate":"agent_message_chunk","content":{"type":"hologram","data":"x"}}`)
	send(`{"sessionUpdate":"tool_call","toolCallId":"t","title":"Edit","content":[{"type":"smell"},{"type":"content","content":{"type":"hologram"}},{"type":"diff","path":"/w/a.go","oldText":null,"newText":"x\n"}]}`)
	send(`{"sessionUpdate":"usage_update","used":45000,"size":200000,"cost":{"amount":0.12,"currency":"USD"}}`)
	send(`{"sessionUpdate":"session_info_update","title":"Fix the build"}`)
	send(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"after"}}`)

	var got []Update
	for range 7 {
		got = append(got, <-sub.Updates())
	}
	if got[0].Content.Text != "before" || got[6].Content.Text != "after" {
		t.Fatalf("updates around the unknown ones: %+v, %+v", got[0], got[6])
	}
	if u := got[1]; u.Kind != "future_thing" || u.Title != nil || len(u.Raw) == 0 {
		t.Fatalf("unknown kind = %+v", u)
	}
	if u := got[2]; u.Content == nil || u.Content.Type != "hologram" {
		t.Fatalf("unknown block = %+v", u)
	}
	if d := got[3].ToolOutput[2]; d.Type != "diff" || d.Path != "/w/a.go" || d.OldText != nil || d.NewText != "x\n" {
		t.Fatalf("diff = %+v", d)
	}
	if u := got[4].Usage; u == nil || u.Used != 45000 || u.Size != 200000 || u.Cost == nil || u.Cost.Amount != 0.12 || u.Cost.Currency != "USD" {
		t.Fatalf("usage = %+v", got[4].Usage)
	}
	if u := got[5]; u.Kind != UpdateSessionInfo || u.Title == nil || *u.Title != "Fix the build" {
		t.Fatalf("session info = %+v", u)
	}
	s := c.Stats()
	if s.UnknownUpdates != 1 || s.UnknownContent != 3 || s.BadMessages != 0 {
		t.Fatalf("unknown updates %d, content %d, bad messages %d; want 1, 3, 0", s.UnknownUpdates, s.UnknownContent, s.BadMessages)
	}
}

// A prompt's answer may carry the turn's token totals.
func TestPrompt_ResultCarriesUsage(t *testing.T) {
	c, p := newPair(t, Options{})
	call, err := c.Start(context.Background(), "session/prompt", nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"stopReason":"end_turn","usage":{"totalTokens":1500,"inputTokens":1000,"outputTokens":500}}}`, p.Next()["id"]))
	waitDone(t, call)
	var res PromptResult
	if err := call.Result(&res); err != nil {
		t.Fatal(err)
	}
	if res.Usage == nil || res.Usage.TotalTokens != 1500 || res.Usage.OutputTokens != 500 {
		t.Fatalf("usage = %+v", res.Usage)
	}
}
