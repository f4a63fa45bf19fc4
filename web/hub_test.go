package web

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat/thread"
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
