package web

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat/thread"
	"acpbroker/store"
)

func openStore(t *testing.T, dir string) *store.Store {
	t.Helper()
	st, err := store.Open(store.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// A Server given a State shows, after a restart on it, the threads and
// turns the last one showed: the answer, the tool call with its input,
// the outcome; a turn that was running shows as interrupted, never as
// running; the recent failures are kept.
func TestState_AHubLoadedFromTheStoreShowsTheThreadsAndTurns(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	x := newSite(t, Config{State: st})
	obs := x.web.Observer
	done := obs.Turn("T1", thread.TurnStart{Prompt: "explain the build", Author: "alice", AuthorID: "alice"})
	done.Status(adapter.Status{Phase: adapter.PhaseWorking})
	done.Update(acp.Update{Kind: acp.UpdateMessageChunk, Content: &acp.ContentBlock{Type: "text", Text: "It uses "}})
	done.Update(acp.Update{Kind: acp.UpdateMessageChunk, Content: &acp.ContentBlock{Type: "text", Text: "make."}})
	title := "Read Makefile"
	done.Update(acp.Update{Kind: acp.UpdateToolCall, ToolCallID: "c1", Title: &title, RawInput: json.RawMessage(`{"path":"Makefile-input"}`)})
	done.Done(adapter.Outcome{StopReason: "end_turn"})
	running := obs.Turn("T2", thread.TurnStart{Prompt: "run the tests", Author: "alice", AuthorID: "alice"})
	running.Status(adapter.Status{Phase: adapter.PhaseWorking})
	running.Update(acp.Update{Kind: acp.UpdateMessageChunk, Content: &acp.ContentBlock{Type: "text", Text: "Running them now"}})
	obs.Turn("T3", thread.TurnStart{Prompt: "deploy"}).Done(adapter.Outcome{Err: context.DeadlineExceeded})
	// The Server stops with T2 running, as when the broker is killed:
	// what it saved last is what the next one finds.
	x.s.Close(context.Background())
	st.Close()

	y := newSite(t, Config{State: openStore(t, dir)})
	y.chat.see["T1"] = []string{"alice"}
	y.chat.see["T2"] = []string{"alice"}
	y.chat.see["T3"] = []string{"alice"}
	c := y.browser()
	y.signIn(c, y.link("alice", ""))
	_, list := y.get(c, "/threads")
	for _, want := range []string{`data-thread="T1"`, `data-thread="T2"`, `data-thread="T3"`, "explain the build", "run the tests"} {
		if !strings.Contains(list, want) {
			t.Errorf("the list after a restart has no %q:\n%s", want, list)
		}
	}
	if strings.Contains(list, `data-state="running"`) {
		t.Errorf("a thread shows as running after a restart:\n%s", list)
	}
	resp, page := y.get(c, "/t/chat/T1")
	if resp.StatusCode != 200 || !strings.Contains(page, "It uses make.") || !strings.Contains(page, "Read Makefile") ||
		!strings.Contains(page, "Makefile-input") || !strings.Contains(page, "explain the build") {
		t.Errorf("T1's page after a restart: %d\n%s", resp.StatusCode, page)
	}
	_, page = y.get(c, "/t/chat/T2")
	if !strings.Contains(page, "Running them now") || !strings.Contains(page, "interrupted: the broker stopped before this turn ended") {
		t.Errorf("T2's page after a restart does not show its turn interrupted:\n%s", page)
	}
	if s, _ := y.s.hub.snapshot(key{"chat", "T2"}); s.Running {
		t.Errorf("T2's turn is running after a restart")
	}
	if f := y.s.hub.recentFailures(); len(f) != 1 || f[0].Thread != "T3" || f[0].Prompt != "deploy" {
		t.Errorf("the failures after a restart: %+v", f)
	}
	// A turn after the restart is numbered after the ones before it.
	y.web.Observer.Turn("T1", thread.TurnStart{Prompt: "and the tests?"})
	s, _ := y.s.hub.snapshot(key{"chat", "T1"})
	if len(s.Turns) != 2 || s.Turns[1].Seq <= s.Turns[0].Seq {
		t.Errorf("the turns of T1 after one more: %+v", s.Turns)
	}
}

// memState is a State in memory that records what it is given.
type memState struct {
	mu      sync.Mutex
	threads map[string]store.WebThread
}

func (m *memState) SaveWebThread(t store.WebThread) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.threads[t.Thread] = t
}
func (m *memState) SaveWebFailures([]store.WebFailure) {}
func (m *memState) WebState() ([]store.WebThread, []store.WebFailure, error) {
	return nil, nil, nil
}

// turns is what m was last given of th's turns.
func (m *memState) turns(th string) []savedTurn {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []savedTurn
	for _, tu := range m.threads[th].Turns {
		var st savedTurn
		if err := json.Unmarshal(tu.Data, &st); err == nil {
			out = append(out, st)
		}
	}
	return out
}

// A running turn is saved within saveEvery, not only at its end; its
// end is saved at once; a save holds the turns that changed alone.
func TestState_ARunningTurnIsSavedAtIntervalsAndItsEndAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &memState{threads: map[string]store.WebThread{}}
		s := New(Config{State: m})
		defer s.Close(context.Background())
		obs := s.Platform("chat", &threadsOf{}).Observer
		turn := obs.Turn("T1", thread.TurnStart{Prompt: "a long one"})
		turn.Update(acp.Update{Kind: acp.UpdateMessageChunk, Content: &acp.ContentBlock{Type: "text", Text: "so far"}})
		synctest.Wait()
		time.Sleep(saveEvery - time.Millisecond)
		synctest.Wait()
		if got := m.turns("T1"); len(got) != 0 {
			t.Fatalf("saved before the interval: %+v", got)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if got := m.turns("T1"); len(got) != 1 || got[0].Done || len(got[0].Updates) != 1 || got[0].Updates[0].U.Content.Text != "so far" {
			t.Fatalf("the running turn as saved after %v: %+v", saveEvery, got)
		}
		turn.Done(adapter.Outcome{StopReason: "end_turn"})
		synctest.Wait()
		if got := m.turns("T1"); len(got) != 1 || !got[0].Done {
			t.Fatalf("the ended turn, at once: %+v", got)
		}
		// The next turn's changes are saved without the ended one's.
		next := obs.Turn("T1", thread.TurnStart{Prompt: "the next one"})
		next.Update(acp.Update{Kind: acp.UpdateMessageChunk, Content: &acp.ContentBlock{Type: "text", Text: "again"}})
		time.Sleep(saveEvery)
		synctest.Wait()
		if got := m.turns("T1"); len(got) != 1 || got[0].Prompt != "the next one" || got[0].Done {
			t.Fatalf("the second turn's save: %+v", got)
		}
	})
}

// A permission request and a question open while the broker runs keep
// their controls as the page is loaded again; after a restart, their
// turn gone, the page shows them ended with its cause and offers no
// answer to them. One ended with its turn (a shutdown) shows as ended
// with the turn's end, before and after a restart.
func TestState_OpenRequestsShowEndedAfterARestart(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	x := newSite(t, Config{State: st})
	for _, th := range []string{"T1", "T2"} {
		x.chat.see[th] = []string{"alice"}
		x.chat.act[th] = []string{"alice"}
	}
	asking := x.web.Observer.Turn("T1", thread.TurnStart{Prompt: "build it"})
	asking.Status(adapter.Status{Phase: adapter.PhaseWorking})
	asking.Ask(&acp.PermissionRequest{ToolCall: acp.PermissionToolCall{ToolCallID: "c1", Title: "Run make deploy"},
		Options: []acp.PermissionOption{{OptionID: "yes", Name: "Allow", Kind: "allow_once"}}})
	asking.Elicit(&acp.ElicitationRequest{Mode: acp.ElicitForm, Message: "Which branch?"})
	shut := x.web.Observer.Turn("T2", thread.TurnStart{Prompt: "ship it"})
	shut.Ask(&acp.PermissionRequest{ToolCall: acp.PermissionToolCall{ToolCallID: "c2", Title: "Push to main"},
		Options: []acp.PermissionOption{{OptionID: "yes", Name: "Allow", Kind: "allow_once"}}})
	shut.Done(adapter.Outcome{Err: fmt.Errorf("%w: the broker shut down", adapter.ErrCancelled)})
	c := x.browser()
	x.signIn(c, x.link("alice", ""))
	for i := range 2 {
		_, page := x.get(c, "/t/chat/T1")
		if n := strings.Count(page, `data-ask=`); n != 2 || !strings.Contains(page, "Run make deploy") || !strings.Contains(page, "Which branch?") {
			t.Fatalf("load %d of the page: %d open requests, want the permission request and the question:\n%s", i+1, n, page)
		}
		if strings.Contains(page, "Not answered") {
			t.Fatalf("load %d of the page: an open request shows as ended", i+1)
		}
	}
	_, page := x.get(c, "/t/chat/T2")
	shutdown := `<strong>Permission needed</strong>: Push to main<br><span class="ask-cause">Ended without an answer, with the turn: `
	if !strings.Contains(page, shutdown) || strings.Contains(page, `data-ask=`) {
		t.Fatalf("a request its turn's end ended is not shown ended:\n%s", page)
	}
	x.s.Close(context.Background()) // as when the broker is killed
	st.Close()

	y := newSite(t, Config{State: openStore(t, dir)})
	for _, th := range []string{"T1", "T2"} {
		y.chat.see[th] = []string{"alice"}
		y.chat.act[th] = []string{"alice"}
	}
	c = y.browser()
	y.signIn(c, y.link("alice", ""))
	_, page = y.get(c, "/t/chat/T1")
	cause := `<br><span class="ask-cause">Ended without an answer, with the turn: ` + html.EscapeString(interruptedText) + `</span>`
	for _, want := range []string{
		`<strong>Permission needed</strong>: Run make deploy` + cause,
		`<strong>The agent asked</strong>: Which branch?` + cause,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("after a restart the page has no %s:\n%s", want, page)
		}
	}
	if strings.Contains(page, `data-ask=`) || strings.Contains(page, `action="/t/chat/T1/permit"`) || strings.Contains(page, `action="/t/chat/T1/answer"`) {
		t.Errorf("after a restart the page offers an answer to a request no one can answer:\n%s", page)
	}
	if _, page = y.get(c, "/t/chat/T2"); !strings.Contains(page, shutdown) {
		t.Errorf("after a restart, the request its turn's end ended is not shown:\n%s", page)
	}
}
