package web

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat/thread"
)

// The pages watching a turn share its rendering: five pages shown the
// same version of a turn render it once between them.
func TestEvents_PagesWatchingATurnRenderEachVersionOnce(t *testing.T) {
	x := newSite(t, Config{})
	x.chat.see["T1"] = []string{"alice"}
	turn := x.web.Observer.Turn("T1", thread.TurnStart{Prompt: "hi"})
	turn.Update(textChunk("hello there"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := x.cookie("alice")
	for i := range 5 {
		resp := x.stream(ctx, c, "T1")
		defer resp.Body.Close()
		await(t, turnEvents(resp), "hello there")
		if n, _ := x.s.rendered.size(); n != 1 {
			t.Fatalf("after page %d: %d renderings kept, want 1", i+1, n)
		}
	}
	x.s.rendered.mu.Lock()
	made := x.s.rendered.made
	x.s.rendered.mu.Unlock()
	if made != 1 {
		t.Fatalf("five pages of one version of a turn: %d renderings, want 1", made)
	}
}

// A page is sent a turn at most once every 100 ms however fast the
// agent streams, and always its final state.
func TestEvents_APageGetsAStreamingTurnAtItsPaceAndItsEnd(t *testing.T) {
	x := newSite(t, Config{})
	x.chat.see["T1"] = []string{"alice"}
	turn := x.web.Observer.Turn("T1", thread.TurnStart{Prompt: "count"})
	turn.Status(adapter.Status{Phase: adapter.PhaseWorking})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := x.stream(ctx, x.cookie("alice"), "T1")
	defer resp.Body.Close()
	events := turnEvents(resp)
	await(t, events, "count")
	start := time.Now()
	for i := range 100 {
		turn.Update(textChunk(fmt.Sprintf(" w%d", i)))
		time.Sleep(5 * time.Millisecond)
	}
	turn.Done(adapter.Outcome{StopReason: acp.StopEndTurn, Elapsed: 2 * time.Second})
	n := 0
	deadline := time.After(5 * time.Second)
	last := ""
	for ; !strings.Contains(last, "turn-done"); n++ {
		select {
		case last = <-events:
		case <-deadline:
			t.Fatalf("the turn's end did not reach the page within 5s (%d updates seen): %s", n, last)
		}
	}
	took := time.Since(start)
	if !strings.Contains(last, "w0 w1 w2") || !strings.Contains(last, "w98 w99") {
		t.Fatalf("the turn's final state is not whole: %s", last)
	}
	if most := int(took/(100*time.Millisecond)) + 2; n > most {
		t.Fatalf("%d updates of one turn in %s, want at most %d (one every 100 ms)", n, took, most)
	}
	t.Logf("%d updates of one turn in %s", n, took)
}

// A thread's page shows the paths of a turn's tool calls relative to
// the agent's working directory, which the turn's status gives.
func TestThreadPage_ShowsPathsRelativeToTheTurnsDirectory(t *testing.T) {
	x := newSite(t, Config{})
	x.chat.see["T1"] = []string{"alice"}
	turn := x.web.Observer.Turn("T1", thread.TurnStart{Prompt: "edit"})
	turn.Status(adapter.Status{Phase: adapter.PhaseWorking, Dir: "/tmp/ws-9/w"})
	line := 3
	turn.Update(acp.Update{Kind: acp.UpdateToolCall, ToolCallID: "c", Title: new("Read /tmp/ws-9/w/a/b.go"),
		Locations: []acp.ToolCallLocation{{Path: "/tmp/ws-9/w/a/b.go", Line: &line}}})
	c := x.browser()
	x.signIn(c, x.link("alice", "T1"))
	_, body := x.get(c, "/t/chat/T1")
	for _, want := range []string{`<span class="tool-title">Read a/b.go</span>`, `<code>a/b.go:3</code>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the page has no %s", want)
		}
	}
	if strings.Contains(body, "/tmp/ws-9") {
		t.Errorf("the page shows the working directory's path")
	}
}
