package store

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"
)

// The web's threads and failures are on disk after a restart, as they
// were saved, the least recently changed thread first.
func TestStore_WebStateSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s.SaveWebThread(WebThread{Platform: "discord", Thread: "b", Changed: at.Add(time.Minute), Turns: []WebTurn{{Seq: 2, Data: json.RawMessage(`{"p":"two"}`)}}})
	s.SaveWebThread(WebThread{Platform: "discord", Thread: "a", Changed: at, Turns: []WebTurn{{Seq: 1, Data: json.RawMessage(`{"p":"one"}`)}}})
	s.SaveWebFailures([]WebFailure{{Platform: "discord", Thread: "a", Prompt: "one", At: at, Cause: "agent exited"}})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, dir, Options{})
	threads, failures, err := s.WebState()
	if err != nil {
		t.Fatal(err)
	}
	if len(threads) != 2 || threads[0].Thread != "a" || threads[1].Thread != "b" || !threads[0].Changed.Equal(at) ||
		len(threads[1].Turns) != 1 || string(threads[1].Turns[0].Data) != `{"p":"two"}` {
		t.Fatalf("threads after a restart: %+v", threads)
	}
	if len(failures) != 1 || failures[0].Cause != "agent exited" || !failures[0].At.Equal(at) {
		t.Fatalf("failures after a restart: %+v", failures)
	}
}

// A thread keeps its last MaxWebTurns turns, the store its
// MaxWebThreads most recently changed threads and the last
// MaxWebFailures failures: the oldest go, on disk too.
func TestStore_WebStateIsBoundedTheOldestGoFirst(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var turns []WebTurn
	for i := range MaxWebTurns + 5 {
		turns = append(turns, WebTurn{Seq: uint64(i), Data: json.RawMessage(strconv.Itoa(i))})
	}
	s.SaveWebThread(WebThread{Platform: "p", Thread: "first", Changed: at, Turns: turns})
	for i := range MaxWebThreads + 2 {
		s.SaveWebThread(WebThread{Platform: "p", Thread: fmt.Sprint("t", i), Changed: at.Add(time.Duration(i+1) * time.Second)})
		if i == MaxWebThreads/2 {
			if err := s.Flush(); err != nil { // half on disk before the bound acts
				t.Fatal(err)
			}
		}
	}
	var failures []WebFailure
	for i := range MaxWebFailures + 3 {
		failures = append(failures, WebFailure{Prompt: strconv.Itoa(i)})
	}
	s.SaveWebFailures(failures)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, dir, Options{})
	threads, kept, err := s.WebState()
	if err != nil {
		t.Fatal(err)
	}
	if len(threads) != MaxWebThreads || threads[0].Thread != "t2" || threads[len(threads)-1].Thread != fmt.Sprint("t", MaxWebThreads+1) {
		t.Fatalf("%d threads kept, from %s to %s", len(threads), threads[0].Thread, threads[len(threads)-1].Thread)
	}
	if len(kept) != MaxWebFailures || kept[0].Prompt != "3" {
		t.Fatalf("%d failures kept, the first %+v", len(kept), kept[0])
	}

	// The bound holds against what is on disk: one more drops the oldest
	// there.
	s.SaveWebThread(WebThread{Platform: "p", Thread: "first", Changed: at.Add(time.Hour), Turns: turns})
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	threads, _, _ = s.WebState()
	last := threads[len(threads)-1]
	if len(threads) != MaxWebThreads || threads[0].Thread != "t3" || last.Thread != "first" || len(last.Turns) != MaxWebTurns || string(last.Turns[0].Data) != "5" {
		t.Fatalf("%d threads kept, from %s to %s with %d turns", len(threads), threads[0].Thread, last.Thread, len(last.Turns))
	}
}

// A thread's turns are saved one at a time, each as it changes: a turn
// saved again replaces the one kept, the others stay as written, and
// past MaxWebTurns on disk the lowest Seq goes.
func TestStore_WebTurnsAreSavedEachOnItsOwn(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range MaxWebTurns + 3 {
		s.SaveWebThread(WebThread{Platform: "p", Thread: "a", Changed: at, Turns: []WebTurn{{Seq: uint64(i), Data: json.RawMessage(`"running"`)}}})
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	s.SaveWebThread(WebThread{Platform: "p", Thread: "a", Changed: at.Add(time.Second), Turns: []WebTurn{{Seq: MaxWebTurns + 2, Data: json.RawMessage(`"done"`)}}})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, dir, Options{})
	threads, _, err := s.WebState()
	if err != nil {
		t.Fatal(err)
	}
	if len(threads) != 1 || !threads[0].Changed.Equal(at.Add(time.Second)) {
		t.Fatalf("threads: %+v", threads)
	}
	turns := threads[0].Turns
	if len(turns) != MaxWebTurns || turns[0].Seq != 3 || string(turns[0].Data) != `"running"` ||
		turns[MaxWebTurns-1].Seq != MaxWebTurns+2 || string(turns[MaxWebTurns-1].Data) != `"done"` {
		t.Fatalf("%d turns kept: %+v ... %+v", len(turns), turns[0], turns[len(turns)-1])
	}
}
