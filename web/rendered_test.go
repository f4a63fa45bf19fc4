package web

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat/thread"
	"acpbroker/web/render"
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

// The renderings kept are bounded in number and bytes, the oldest going
// first, and a thread's turns the hub no longer keeps are let go; the
// metrics show what is kept.
func TestRenders_AreBoundedAndLetGo(t *testing.T) {
	x := newSite(t, Config{})
	r := x.s.rendered
	ctx := context.Background()
	k := key{"chat", "T1"}
	var turns []turnShot
	for i := range maxRenders + 10 {
		ts := turnShot{Seq: uint64(i + 1), Version: 1, Turn: &render.Turn{Prompt: "p"}}
		turns = append(turns, ts)
		if _, err := r.rendering(ctx, k, ts); err != nil {
			t.Fatal(err)
		}
	}
	if st := x.s.Stats(); st.Renders != maxRenders || st.RenderBytes <= 0 {
		t.Fatalf("after %d turns: %d renderings, %d bytes kept; want %d", maxRenders+10, st.Renders, st.RenderBytes, maxRenders)
	}
	// The oldest went first: the newest is still kept, not made again.
	made := r.made
	if _, err := r.rendering(ctx, k, turns[len(turns)-1]); err != nil || r.made != made {
		t.Fatalf("the newest rendering was made again (%v)", err)
	}
	r.maxBytes = 1 << 20
	big := turnShot{Seq: 1 << 20, Version: 1, Turn: &render.Turn{Prompt: strings.Repeat("x ", 32<<10)}}
	for i := range 40 {
		big.Seq++
		if _, err := r.rendering(ctx, key{"chat", fmt.Sprint("B", i)}, big); err != nil {
			t.Fatal(err)
		}
	}
	if n, bytes := r.size(); bytes > r.maxBytes || n == 0 {
		t.Fatalf("%d renderings of %d bytes kept, want at most %d bytes", n, bytes, r.maxBytes)
	}
	r.forget(key{"chat", "B39"}, nil)
	for rk := range r.by {
		if rk.k.thread == "B39" {
			t.Fatalf("a turn the hub let go is still kept")
		}
	}
	for rk := range r.by {
		r.forget(rk.k, nil)
	}
	if st := x.s.Stats(); st.Renders != 0 || st.RenderBytes != 0 {
		t.Fatalf("after letting every turn go: %d renderings, %d bytes", st.Renders, st.RenderBytes)
	}
}

// A page watching a long streaming turn is sent what changed, not the
// turn again each time: the blocks of the turn that changed, a growing
// one from where it grew; applied in order, they make the turn as a
// whole rendering shows it.
func TestEvents_APageIsSentWhatChangedAndHoldsTheWholeTurn(t *testing.T) {
	x := newSite(t, Config{})
	x.chat.see["T1"] = []string{"alice"}
	turn := x.web.Observer.Turn("T1", thread.TurnStart{Prompt: "write"})
	turn.Status(adapter.Status{Phase: adapter.PhaseWorking})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := x.stream(ctx, x.cookie("alice"), "T1")
	defer resp.Body.Close()
	var sent atomic.Int64
	events := turnEvents(countingBody(resp, &sent))
	await(t, events, "write")
	words := strings.Repeat("and so on, ", 100) // 1.1 KB a paragraph
	for i := range 60 {
		turn.Update(textChunk(fmt.Sprintf("Paragraph %d: %s\n\n", i, words)))
		if i%10 == 0 {
			turn.Update(acp.Update{Kind: acp.UpdateToolCall, ToolCallID: fmt.Sprint("c", i), Title: new(fmt.Sprint("Run step ", i)), Status: "in_progress"})
		}
		if i%10 == 5 {
			turn.Update(acp.Update{Kind: acp.UpdateToolCallUpdate, ToolCallID: fmt.Sprint("c", i-5), Status: "completed"})
		}
		time.Sleep(10 * time.Millisecond)
	}
	turn.Done(adapter.Outcome{StopReason: acp.StopEndTurn, Elapsed: 2 * time.Second})
	shown := await(t, events, "turn-done")
	snap, _ := x.s.hub.snapshot(key{"chat", "T1"})
	whole := string(render.TurnHTML(snap.Turns[0].Turn))
	if shown != whole {
		t.Fatalf("the page holds the turn as:\n%s\nwhere a whole rendering is:\n%s", shown, whole)
	}
	// Sent whole each time, the turn would cost its length at each of its
	// updates: more than 60 KB times the updates over two.
	n := len(whole)
	if got := sent.Load(); got > int64(3*n) {
		t.Fatalf("the page was sent %d bytes for a turn of %d", got, n)
	}
	t.Logf("a turn of %d bytes of HTML, streamed: %d bytes sent to its page", n, sent.Load())
}

// countingBody counts in n the bytes read from resp's body.
func countingBody(resp *http.Response, n *atomic.Int64) *http.Response {
	r := *resp
	r.Body = countingReader{resp.Body, n}
	return &r
}

type countingReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// A permission request's input shows the paths inside the turn's
// directory relative to it, as the turn's tool calls do.
func TestThreadPage_AsksShowPathsRelativeToTheTurnsDirectory(t *testing.T) {
	x := newSite(t, Config{})
	x.chat.see["T1"] = []string{"alice"}
	x.chat.act["T1"] = []string{"alice"}
	turn := x.web.Observer.Turn("T1", thread.TurnStart{Prompt: "edit"})
	turn.Status(adapter.Status{Phase: adapter.PhaseWorking, Dir: "/tmp/ws-9/w"})
	turn.Ask(&acp.PermissionRequest{ToolCall: acp.PermissionToolCall{ToolCallID: "c", Title: "Edit /tmp/ws-9/w/a.go",
		RawInput: []byte(`{"file_path":"/tmp/ws-9/w/a.go"}`)}, Options: []acp.PermissionOption{{OptionID: "y", Name: "Allow", Kind: "allow_once"}}})
	c := x.browser()
	x.signIn(c, x.link("alice", "T1"))
	_, body := x.get(c, "/t/chat/T1")
	for _, want := range []string{`<strong>Edit a.go</strong>`, `{&#34;file_path&#34;:&#34;a.go&#34;}`} {
		if !strings.Contains(body, want) {
			t.Errorf("the page has no %s", want)
		}
	}
	if strings.Contains(body, "/tmp/ws-9") {
		t.Errorf("the page shows the working directory's path:\n%s", body)
	}
}

// A page that missed updates (it reconnects, naming the version of each
// turn it holds) is sent the turns that changed whole: every block, from
// no version, whatever it was sent on its last stream.
func TestEvents_APageThatReconnectsGetsTheTurnWhole(t *testing.T) {
	x := newSite(t, Config{})
	x.chat.see["T1"] = []string{"alice"}
	turn := x.web.Observer.Turn("T1", thread.TurnStart{Prompt: "count"})
	turn.Update(textChunk(strings.Repeat("one two three ", 20)))
	c := x.cookie("alice")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := x.stream(ctx, c, "T1")
	await(t, turnEvents(first), "one two three")
	first.Body.Close()
	snap, _ := x.s.hub.snapshot(key{"chat", "T1"})
	had := fmt.Sprintf("%d.%d", snap.Turns[0].Seq, snap.Turns[0].Version)
	turn.Update(textChunk(" four"))

	req, _ := http.NewRequestWithContext(ctx, "GET", x.ts.URL+"/t/chat/T1/events?have="+had, nil)
	req.AddCookie(c)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || !strings.Contains(data, `"blocks"`) {
			continue
		}
		var e struct {
			From   uint64
			Blocks []struct{ ID, HTML string }
		}
		json.Unmarshal([]byte(data), &e)
		if e.From != 0 {
			t.Fatalf("the reconnected page was sent the turn from version %d", e.From)
		}
		for _, b := range e.Blocks {
			if b.HTML == "" {
				t.Fatalf("the reconnected page was sent block %s as unchanged: %s", b.ID, data)
			}
		}
		if !strings.Contains(data, "three  four") {
			t.Fatalf("the turn sent is not its latest: %s", data)
		}
		return
	}
	t.Fatal("the stream ended before a turn")
}
