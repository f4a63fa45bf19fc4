package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"acpbroker/adapter"
)

// Ended prompts are kept in memory within keepEndedBytes in all, at most
// keepEnded of them, for keepEndedAt: the oldest go first.
func TestRegistry_EndedPromptsAreBounded(t *testing.T) {
	clk := newClock()
	g := newRegistry(clk.now)
	const n = 100
	for i := range n {
		id := fmt.Sprint("p-", i)
		g.add(id, &prompt{})
		g.ended(id, clk.now(), 1<<20)
	}
	kept, bytes := g.kept()
	if bytes > keepEndedBytes || kept != keepEndedBytes>>20 {
		t.Errorf("%d ended prompts of 1 MiB keep %d bytes: want the newest %d", kept, bytes, keepEndedBytes>>20)
	}
	if g.get("p-0") != nil || g.get(fmt.Sprint("p-", n-keepEndedBytes>>20-1)) != nil {
		t.Error("the oldest were kept past the bytes' bound")
	}
	if g.get(fmt.Sprint("p-", n-1)) == nil || g.get(fmt.Sprint("p-", n-keepEndedBytes>>20)) == nil {
		t.Error("the newest were dropped")
	}
	clk.add(keepEndedAt - time.Second)
	for i := range keepEnded + 10 {
		id := fmt.Sprint("q-", i)
		g.add(id, &prompt{})
		g.ended(id, clk.now(), 1)
	}
	if kept, _ := g.kept(); kept != keepEnded {
		t.Errorf("%d ended prompts kept, want %d", kept, keepEnded)
	}
	if g.get(fmt.Sprint("p-", n-1)) != nil {
		t.Error("a prompt was kept past keepEnded newer ones")
	}
	clk.add(time.Second)
	if g.get("q-9") != nil {
		t.Error("a prompt kept past the bound in number")
	}
	if g.get("q-10") == nil {
		t.Error("the newest thousand were not all kept")
	}
	clk.add(keepEndedAt)
	if g.get(fmt.Sprint("q-", keepEnded+9)) != nil {
		t.Errorf("an ended prompt was kept for more than %s", keepEndedAt)
	}
	if kept, bytes := g.kept(); kept != 0 || bytes != 0 {
		t.Errorf("%d ended prompts (%d bytes) kept after their time", kept, bytes)
	}
}

// A prompt that ends keeps its last endedEventBytes of events (the end
// event at least), and is counted so; its answer is read whole from
// GET while it is kept.
func TestRegistry_AnEndedPromptKeepsItsLastEvents(t *testing.T) {
	a := unit(t, nil)
	w, started := a.post(`{"text": "hello"}`, "")
	wantStatus(t, "POST", w, http.StatusAccepted)
	p := a.submitted()
	p.Sink.Status(adapter.Status{Phase: adapter.PhaseWorking})
	piece := strings.Repeat("x", 64<<10)
	for range 32 { // 2 MiB
		p.Sink.Update(chunk(piece))
	}
	done(p, "the answer")
	kept, bytes := a.prompts.kept()
	mem := a.prompts.get(started.ID)
	if kept != 1 || mem == nil {
		t.Fatalf("%d ended prompts kept, want this one", kept)
	}
	mem.mu.Lock()
	events, last := 0, mem.events[len(mem.events)-1].typ
	for _, e := range mem.events {
		events += len(e.data)
	}
	mem.mu.Unlock()
	if events > endedEventBytes || events < endedEventBytes-(64<<10)-100 || last != "end" {
		t.Errorf("an ended prompt keeps %d bytes of events ending with %s, want its last %d and the end", events, last, endedEventBytes)
	}
	if bytes < events || bytes > events+len("the answer")+promptOverhead+1<<10 {
		t.Errorf("an ended prompt counted as %d bytes, keeping %d of events", bytes, events)
	}
	w = a.do(call{method: "GET", path: "/v1/prompts/" + started.ID, token: testToken})
	wantStatus(t, "GET", w, http.StatusOK)
	if !strings.Contains(w.Body.String(), `"answer":"the answer"`) || !strings.Contains(w.Body.String(), `"state":"done"`) {
		t.Errorf("GET of an ended prompt: %.300s", w.Body)
	}
}
