package web

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat/thread"
	"acpbroker/internal/eventually"
)

// chunk is an agent's text chunk.
func textChunk(s string) acp.Update {
	return acp.Update{Kind: acp.UpdateMessageChunk, Content: &acp.ContentBlock{Type: "text", Text: s}}
}

// cookie signs user in and returns their session cookie.
func (x *site) cookie(user string) *http.Cookie {
	x.t.Helper()
	resp := x.signIn(x.browser(), x.link(user, ""))
	for _, c := range resp.Cookies() {
		if c.Name == cookieName {
			return c
		}
	}
	x.t.Fatal("no session cookie")
	return nil
}

// stream opens a thread's events for the session of c.
func (x *site) stream(ctx context.Context, c *http.Cookie, th string) *http.Response {
	x.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", x.ts.URL+"/t/chat/"+th+"/events", nil)
	req.AddCookie(c)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		x.t.Fatal(err)
	}
	return resp
}

// turnEvents reads the "turn" events of a stream onto a channel: after
// each, the turn it changed as the page holds it (its <article>), each
// event applied as the page's script applies it.
func turnEvents(resp *http.Response) <-chan string {
	out := make(chan string, 1024)
	go func() {
		defer close(out)
		p := newPage()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && event == "turn":
				html, err := p.apply([]byte(strings.TrimPrefix(line, "data: ")))
				if err != nil {
					html = "cannot apply: " + err.Error()
				}
				out <- html
			}
		}
	}()
	return out
}

// page holds a thread's turns as app.js does: each turn's version,
// class and blocks, the source of each block as the events gave it.
type page struct {
	turns map[uint64]*pageTurn
}

type pageTurn struct {
	version uint64
	class   string
	ids     []string
	src     map[string]string
}

func newPage() *page { return &page{turns: map[uint64]*pageTurn{}} }

// apply applies a "turn" event's data and returns the turn's <article>
// as the page now holds it.
func (p *page) apply(data []byte) (string, error) {
	var e struct {
		Seq, Version, From uint64
		Class              string
		Blocks             []struct {
			ID   string
			Keep int
			HTML *string
		}
	}
	if err := json.Unmarshal(data, &e); err != nil {
		return "", err
	}
	old := p.turns[e.Seq]
	if e.From != 0 && (old == nil || old.version != e.From) {
		return "", fmt.Errorf("an event from version %d of turn %d, which the page does not have", e.From, e.Seq)
	}
	t := &pageTurn{version: e.Version, class: e.Class, src: map[string]string{}}
	for _, b := range e.Blocks {
		src, had := "", false
		if old != nil {
			src, had = old.src[b.ID]
		}
		switch {
		case b.HTML == nil && (e.From == 0 || !had):
			return "", fmt.Errorf("block %s kept, and the page has none", b.ID)
		case b.HTML == nil:
		case b.Keep > 0:
			u := utf16.Encode([]rune(src))
			if b.Keep > len(u) {
				return "", fmt.Errorf("block %s: keep %d of %d", b.ID, b.Keep, len(u))
			}
			src = string(utf16.Decode(u[:b.Keep])) + *b.HTML
		default:
			src = *b.HTML
		}
		t.ids = append(t.ids, b.ID)
		t.src[b.ID] = src
	}
	p.turns[e.Seq] = t
	var b strings.Builder
	b.WriteString(`<article class="` + t.class + `">`)
	for _, id := range t.ids {
		b.WriteString(t.src[id])
	}
	b.WriteString("</article>\n")
	return b.String(), nil
}

// await is the first html from events that has want, within 5s.
func await(t *testing.T, events <-chan string, want string) string {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case html, ok := <-events:
			if !ok {
				t.Fatalf("the stream ended before showing %q", want)
			}
			if strings.Contains(html, want) {
				return html
			}
		case <-deadline:
			t.Fatalf("no update showing %q within 5s", want)
		}
	}
}

func TestEvents_ATurnsChunksReachThePageAsTheyStream(t *testing.T) {
	x := newSite(t, Config{})
	x.chat.see["T1"] = []string{"alice"}
	obs := x.web.Observer
	turn := obs.Turn("T1", thread.TurnStart{Prompt: "say <b>hi</b>", Author: "Alice", AuthorID: "alice", Started: x.clock.now()})
	turn.Status(adapter.Status{Phase: adapter.PhaseWorking})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := x.stream(ctx, x.cookie("alice"), "T1")
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := turnEvents(resp)
	first := await(t, events, "say &lt;b&gt;hi&lt;/b&gt;")
	if strings.Contains(first, "<b>hi") {
		t.Fatalf("the prompt's markup reached the page: %s", first)
	}
	turn.Update(textChunk("hello "))
	await(t, events, "<p>hello</p>")
	turn.Update(textChunk("world"))
	await(t, events, "hello world")
	turn.Done(adapter.Outcome{StopReason: acp.StopEndTurn, Text: "hello world", Elapsed: 2 * time.Second})
	await(t, events, "done in 2s")
}

func TestEvents_OnlyWhoMaySeeTheThreadWatchesIt(t *testing.T) {
	x := newSite(t, Config{})
	x.chat.see["T1"] = []string{"alice"}
	x.web.Observer.Turn("T1", thread.TurnStart{Prompt: "secret"})
	resp := x.stream(context.Background(), x.cookie("bob"), "T1")
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("bob's stream of alice's thread: %d", resp.StatusCode)
	}
}

func TestEvents_APersonWatchesAtMostEightPages(t *testing.T) {
	x := newSite(t, Config{})
	x.chat.see["T1"] = []string{"alice", "bob"}
	x.web.Observer.Turn("T1", thread.TurnStart{Prompt: "hi"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	alice := x.cookie("alice")
	for i := range maxWatchersPerPerson {
		if resp := x.stream(ctx, alice, "T1"); resp.StatusCode != 200 {
			t.Fatalf("alice's stream %d: %d", i+1, resp.StatusCode)
		}
	}
	resp := x.stream(ctx, alice, "T1")
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("alice's stream %d: %d, want 429", maxWatchersPerPerson+1, resp.StatusCode)
	}
	if resp := x.stream(ctx, x.cookie("bob"), "T1"); resp.StatusCode != 200 {
		t.Fatalf("bob's stream while alice has hers: %d", resp.StatusCode)
	}
	if got := x.s.Stats().Watchers; got != maxWatchersPerPerson+1 {
		t.Fatalf("watchers %d, want %d", got, maxWatchersPerPerson+1)
	}
	cancel()
	eventually.Within(t, 5*time.Second, "the streams' watchers are released", func() bool { return x.s.Stats().Watchers == 0 })
}

// A page that takes nothing it is sent never slows the turn: the
// agent's updates go on at once, and the page is dropped once a write
// to it waits too long.
func TestEvents_ASlowPageIsDroppedAndNeverSlowsTheTurn(t *testing.T) {
	x := newSite(t, Config{})
	x.s.writeWait = 300 * time.Millisecond
	x.chat.see["T1"] = []string{"alice"}
	turn := x.web.Observer.Turn("T1", thread.TurnStart{Prompt: "flood"})
	conn, err := net.Dial("tcp", strings.TrimPrefix(x.ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /t/chat/T1/events HTTP/1.1\r\nHost: x\r\nCookie: %s=%s\r\n\r\n", cookieName, x.cookie("alice").Value)
	eventually.Within(t, 5*time.Second, "the slow page watches", func() bool { return x.s.Stats().Watchers == 1 })
	// Each turn is new to the page, so it is sent whole: a large prompt
	// fills what the connection buffers in a few sends.
	piece := strings.Repeat("x", 256<<10)
	start := time.Now()
	var slowest time.Duration
	for i := 0; i < 240 && x.s.Stats().Watchers > 0; i++ {
		t0 := time.Now()
		if i%2 == 0 {
			turn.Update(textChunk("more"))
		} else {
			turn = x.web.Observer.Turn("T1", thread.TurnStart{Prompt: piece})
		}
		slowest = max(slowest, time.Since(t0))
		time.Sleep(10 * time.Millisecond) // the agent's pace, for the page to be sent each
	}
	eventually.Within(t, 5*time.Second, "the slow page is dropped", func() bool { return x.s.Stats().Watchers == 0 })
	// Well under the page's bound (300ms): no update waited for the page.
	if slowest > 200*time.Millisecond {
		t.Fatalf("an update waited %s for the slow page (in %s)", slowest, time.Since(start))
	}
}

// A turn that has only begun (its prompt, no update yet) reaches a page
// already watching its thread, and its first updates after it.
func TestEvents_ANewTurnReachesAWatchingPageBeforeItsFirstUpdate(t *testing.T) {
	x := newSite(t, Config{})
	x.chat.see["T1"] = []string{"alice"}
	x.web.Observer.Turn("T1", thread.TurnStart{Prompt: "first"}).Done(adapter.Outcome{StopReason: acp.StopEndTurn})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := x.stream(ctx, x.cookie("alice"), "T1")
	defer resp.Body.Close()
	events := turnEvents(resp)
	await(t, events, "first")
	turn := x.web.Observer.Turn("T1", thread.TurnStart{Prompt: "second"})
	await(t, events, "second")
	turn.Update(textChunk("an answer"))
	if got := await(t, events, "an answer"); !strings.Contains(got, "second") {
		t.Fatalf("the turn's update lost its prompt: %s", got)
	}
}
