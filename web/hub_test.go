package web

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat/thread"
	"acpbroker/web/render"
)

func TestHub_KeepsEachThreadsLastTurns(t *testing.T) {
	c := newClock()
	h := newHub(c.now)
	o := observer{h: h, platform: "chat"}
	for i := range maxTurns + 5 {
		o.Turn("T1", thread.TurnStart{Prompt: "prompt " + strconv.Itoa(i)}).Done(adapter.Outcome{})
	}
	s, ok := h.snapshot(key{"chat", "T1"})
	if !ok || len(s.Turns) != maxTurns {
		t.Fatalf("turns kept: %d, want %d", len(s.Turns), maxTurns)
	}
	if got := s.Turns[0].Turn.Prompt; got != "prompt 5" {
		t.Fatalf("the oldest turn kept is %q, want the sixth", got)
	}
}

func TestHub_KeepsAtMostItsThreadsDroppingTheOneChangedLongestAgo(t *testing.T) {
	c := newClock()
	h := newHub(c.now)
	o := observer{h: h, platform: "chat"}
	for i := range maxThreads + 1 {
		c.add(time.Second)
		o.Turn("T"+strconv.Itoa(i), thread.TurnStart{Prompt: "hi"})
	}
	if n := len(h.list()); n != maxThreads {
		t.Fatalf("threads kept: %d, want %d", n, maxThreads)
	}
	if _, ok := h.snapshot(key{"chat", "T0"}); ok {
		t.Fatal("the thread changed longest ago is still kept")
	}
	if _, ok := h.snapshot(key{"chat", "T" + strconv.Itoa(maxThreads)}); !ok {
		t.Fatal("the newest thread is not kept")
	}
}

func TestHub_ATurnsUpdatesAreBoundedAndItsChunksJoined(t *testing.T) {
	h := newHub(newClock().now)
	turn := observer{h: h, platform: "chat"}.Turn("T1", thread.TurnStart{})
	piece := strings.Repeat("x", 1<<20)
	for range 10 {
		turn.Update(textChunk(piece))
	}
	for i := range maxTurnUpdates + 10 {
		turn.Update(acp.Update{Kind: "tool_call", ToolCallID: strconv.Itoa(i)})
	}
	s, _ := h.snapshot(key{"chat", "T1"})
	tr := s.Turns[0].Turn
	if len(tr.Updates) > maxTurnUpdates || len(tr.Updates) == 0 {
		t.Fatalf("updates kept: %d", len(tr.Updates))
	}
	if n := len(tr.Updates[0].Content.Text); n > maxTurnBytes || n < maxTurnBytes-(1<<20) {
		t.Fatalf("the joined chunks hold %d bytes, want at most %d", n, maxTurnBytes)
	}
	if len(tr.Notices) == 0 || !strings.Contains(tr.Notices[len(tr.Notices)-1], "too many to keep") {
		t.Fatalf("the page does not say the rest was left out: %v", tr.Notices)
	}
}

func TestHub_ARequestIsOpenUntilAnsweredOrTheTurnEnds(t *testing.T) {
	h := newHub(newClock().now)
	k := key{"chat", "T1"}
	turn := observer{h: h, platform: "chat"}.Turn("T1", thread.TurnStart{})
	a, b := &acp.PermissionRequest{}, &acp.PermissionRequest{}
	turn.Ask(a)
	turn.Ask(b)
	s, _ := h.snapshot(k)
	if len(s.Asks) != 2 || h.open(k, s.Asks[0].ID).req != a || h.open(k, s.Asks[1].ID).req != b {
		t.Fatalf("open requests: %+v", s.Asks)
	}
	turn.Asked(a)
	if s, _ := h.snapshot(k); len(s.Asks) != 1 || h.open(k, s.Asks[0].ID).req != b {
		t.Fatalf("after one is answered: %+v", s.Asks)
	}
	if list := h.list(); list[0].State != "waiting for permission" {
		t.Fatalf("state %q", list[0].State)
	}
	turn.Done(adapter.Outcome{})
	if s, _ := h.snapshot(k); len(s.Asks) != 0 {
		t.Fatalf("after the turn's end: %+v", s.Asks)
	}
}

// A hostile agent's tool calls of huge raw input count against the
// turn's bound: the hub keeps at most maxTurnBytes of them and says the
// rest is left out, and still keeps the answer that follows them.
func TestHub_ATurnsBoundCountsToolCallsRawInput(t *testing.T) {
	h := newHub(newClock().now)
	turn := observer{h: h, platform: "chat"}.Turn("T1", thread.TurnStart{})
	input := json.RawMessage(`{"x":"` + strings.Repeat("x", 1<<20) + `"}`)
	for i := range 64 {
		turn.Update(acp.Update{Kind: acp.UpdateToolCall, ToolCallID: strconv.Itoa(i), RawInput: input})
	}
	turn.Update(textChunk("the answer after them"))
	h.mu.Lock()
	tl := h.threads[key{"chat", "T1"}].turns[0]
	kept, n, cut := 0, len(tl.updates), tl.cut
	for _, u := range tl.updates {
		kept += len(u.RawInput)
	}
	h.mu.Unlock()
	if kept > maxTurnBytes || !cut {
		t.Fatalf("the hub keeps %d updates, %d bytes of raw input (cut %v), want at most %d bytes", n, kept, cut, maxTurnBytes)
	}
	// The answer has a bound of its own: a flood of tool calls does not
	// leave out its end.
	s, _ := h.snapshot(key{"chat", "T1"})
	if html := string(render.TurnHTML(s.Turns[0].Turn)); !strings.Contains(html, "the answer after them") || !strings.Contains(html, "too many to keep") {
		t.Fatalf("after a flood of tool calls, the turn does not show its answer and say the rest was left out")
	}
}

// The broker's updates of a terminal's output, each its whole output so
// far, replace the one before: a long-running terminal neither fills
// the turn's bound nor is cut, and the page shows its latest output.
func TestHub_ATerminalsOutputReplacesTheOneBefore(t *testing.T) {
	h := newHub(newClock().now)
	turn := observer{h: h, platform: "chat"}.Turn("T1", thread.TurnStart{})
	turn.Update(acp.Update{Kind: acp.UpdateToolCall, ToolCallID: "c", Title: new("make"), ToolOutput: []acp.ToolCallContent{{Type: "terminal", TerminalID: "t1"}}})
	out := strings.Repeat("building\n", 64<<10/9)
	for i := range 160 { // 10 MiB in all
		turn.Update(acp.Update{Kind: acp.UpdateToolCallUpdate, ToolCallID: "c", Terminal: &acp.TerminalOutput{ID: "t1", Output: out + "step " + strconv.Itoa(i) + "\n"}})
	}
	s, _ := h.snapshot(key{"chat", "T1"})
	if n := len(s.Turns[0].Turn.Updates); n != 2 {
		t.Fatalf("the hub keeps %d updates of one terminal, want the call and its latest output", n)
	}
	if html := string(render.TurnHTML(s.Turns[0].Turn)); !strings.Contains(html, "step 159") || strings.Contains(html, "too many to keep") {
		t.Fatalf("the turn does not show the terminal's latest output")
	}
}
