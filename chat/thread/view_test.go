package thread

import (
	"runtime"
	"strings"
	"testing"

	"acpbroker/acp"
	"acpbroker/adapter"
)

// While a turn streams, a view renders only the start of the answer
// that its messages can hold, so each edit costs the same however long
// the answer grows; a view is made again only after a change; the final
// view renders what is kept of the whole, and says how long it was.
func TestView_CostsNoMoreForALongAnswer(t *testing.T) {
	srv := &Server{cfg: Config{MaxMessages: 6, MaxFileBytes: 8 << 20}, lim: Limits{MessageRunes: 2000}}
	s := &turnView{s: srv, sink: &turnSink{s: srv, conv: &conversation{}}}
	s.onStatus(adapter.Status{Phase: adapter.PhaseWorking})
	piece := strings.Repeat(strings.Repeat("y", 99)+"\n", 640)
	chunk := func(text string) acp.Update {
		return acp.Update{Kind: acp.UpdateMessageChunk, Content: &acp.ContentBlock{Type: "text", Text: text}}
	}
	alloc := func() uint64 {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.TotalAlloc
	}
	var costs []uint64
	for i := range 1000 { // 64 MB
		s.update(chunk(piece))
		if i == 10 || i == 999 {
			before := alloc()
			v := s.view()
			costs = append(costs, alloc()-before)
			if len(v.pieces) != 6 || !strings.Contains(v.pieces[5], "the answer continues") {
				t.Fatalf("a streaming view of %d pieces ends %q", len(v.pieces), v.pieces[len(v.pieces)-1])
			}
		}
	}
	if costs[1] > 2*costs[0]+64<<10 {
		t.Fatalf("a view costs %d bytes at 1 MB of answer and %d at 64 MB", costs[0], costs[1])
	}
	before := alloc()
	again := s.view()
	if alloc()-before > 1<<10 {
		t.Fatalf("an unchanged view was made again: %d bytes", alloc()-before)
	}
	if !strings.Contains(again.pieces[5], "the answer continues (61.0 MiB so far); its start and its end will be attached") {
		t.Fatalf("the streaming view ends %q", again.pieces[5])
	}
	s.end(&adapter.Outcome{StopReason: acp.StopEndTurn, Text: "y"}, "")
	v := s.view()
	var file string
	for _, fs := range v.files {
		for _, f := range fs {
			file += f.Data
		}
	}
	if len(file) > 2<<20+4<<10 || !strings.Contains(file, "MiB of the answer left out here") ||
		!strings.Contains(v.pieces[len(v.pieces)-1], "the answer is 61.0 MiB: its start and its end are attached as answer.md.") {
		t.Fatalf("the final view attaches %d bytes and ends %q", len(file), v.pieces[len(v.pieces)-1])
	}
}

// The Cancel button goes with the last message of a running turn: a
// message that is no longer the last is edited to lose it, though its
// text stays (as when the agent's files come in a message of their own).
func TestView_TheCancelButtonMovesToTheLastMessage(t *testing.T) {
	s := &turnView{answer: answerState{posted: []posted{{id: "1", text: "the answer", stop: true}}}}
	if i, edit := s.next(view{pieces: []string{"the answer", "📎 a file"}, stop: true}); i != 0 || !edit {
		t.Fatalf("next = %d, %v; want the first message edited", i, edit)
	}
	s.answer.posted[0].stop = false
	if i, edit := s.next(view{pieces: []string{"the answer", "📎 a file"}, stop: true}); i != 1 || edit {
		t.Fatalf("next = %d, %v; want the second message posted", i, edit)
	}
	s.answer.posted = append(s.answer.posted, posted{id: "2", text: "📎 a file", stop: true})
	if i, edit := s.next(view{pieces: []string{"the answer", "📎 a file"}, final: true}); i != 1 || !edit {
		t.Fatalf("next = %d, %v; want the last message edited to lose the button", i, edit)
	}
}
