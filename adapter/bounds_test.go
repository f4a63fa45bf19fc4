package adapter

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/pool"
)

// toolJournal is a Journal that remembers the tool calls it was told of.
type toolJournal struct {
	mu      sync.Mutex
	ids     map[string]bool
	longest int
}

func (j *toolJournal) TurnQueued(thread, ref, title, author string) uint64 { return 1 }
func (j *toolJournal) TurnStarted(uint64)                                  {}
func (j *toolJournal) TurnEnded(uint64, string, string)                    {}
func (j *toolJournal) TurnShown(uint64, string)                            {}
func (j *toolJournal) ToolCall(_ uint64, id, title, status string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.ids == nil {
		j.ids = map[string]bool{}
	}
	j.ids[id] = true
	j.longest = max(j.longest, len(title), len(status))
}

// countingSink counts what a turn gives it and keeps only its outcome.
type countingSink struct {
	updates int
	done    chan Outcome
}

func (s *countingSink) Status(Status)       {}
func (s *countingSink) Update(u acp.Update) { s.updates++ }
func (s *countingSink) Ask(ctx context.Context, _ *acp.PermissionRequest) Answer {
	<-ctx.Done()
	return Answer{}
}
func (s *countingSink) Notice(Notice)  {}
func (s *countingSink) Done(o Outcome) { s.done <- o }

// A turn keeps the start and the end of an answer past its bound and
// says how much is left out; the whole still reaches the Sink as it
// streams.
func TestTurn_ALongAnswerKeepsItsStartAndEnd(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{})
	sink := &countingSink{done: make(chan Outcome, 1)}
	if err := r.engine.Submit("t", &Prompt{Blocks: []acp.ContentBlock{acp.TextBlock("flood-answer 12 64")}, Sink: sink}); err != nil {
		t.Fatal(err)
	}
	var o Outcome
	select {
	case o = <-sink.done:
	case <-time.After(time.Minute):
		t.Fatal("no outcome within a minute")
	}
	if o.Err != nil || o.TextBytes != 12<<20 || sink.updates != 12<<4 {
		t.Fatalf("outcome %v, %d bytes, %d updates; want 12 MiB in %d", o.Err, o.TextBytes, sink.updates, 12<<4)
	}
	if len(o.Text) > 2*answerKeep+100 || !strings.HasPrefix(o.Text, "BEGIN\n") || !strings.HasSuffix(o.Text, "\nEND") {
		t.Fatalf("the answer kept is %d bytes, from %q to %q", len(o.Text), o.Text[:10], o.Text[len(o.Text)-10:])
	}
	var omitted int64
	i := strings.Index(o.Text, "\n[… ")
	if i < 0 {
		t.Fatal("the answer kept does not say what is left out")
	}
	if _, err := fmt.Sscanf(o.Text[i:], "\n[… %d bytes left out …]\n", &omitted); err != nil {
		t.Fatalf("the line saying what is left out: %v", err)
	}
	note := fmt.Sprintf("\n[… %d bytes left out …]\n", omitted)
	if int64(len(o.Text)-len(note))+omitted != o.TextBytes || omitted < 12<<20-2*answerKeep {
		t.Fatalf("%d bytes kept and %d left out of %d", len(o.Text)-len(note), omitted, o.TextBytes)
	}
	if o.Summary() != "done" {
		t.Fatalf("summary %q", o.Summary())
	}
}

// A turn keeps, and journals, the first maxToolCalls tool calls with
// titles cut to maxTitleBytes, and counts the rest; a plan keeps its
// first maxPlanEntries entries and counts the rest.
func TestTurn_ToolCallsAndPlanAreBounded(t *testing.T) {
	j := &toolJournal{}
	r := newRig(t, nil, pool.Config{}, Config{Journal: j})
	o := r.prompt("t", "flood-tools 600 2").wait(t, time.Minute)
	if o.Err != nil || len(o.ToolCalls) != maxToolCalls || o.MoreToolCalls != 600-maxToolCalls {
		t.Fatalf("outcome %v: %d tool calls kept, %d more; want %d and %d", o.Err, len(o.ToolCalls), o.MoreToolCalls, maxToolCalls, 600-maxToolCalls)
	}
	for _, tc := range o.ToolCalls {
		if len(tc.Title) > maxTitleBytes || tc.Status != "completed" {
			t.Fatalf("tool call %s: title of %d bytes, status %q", tc.ID, len(tc.Title), tc.Status)
		}
	}
	j.mu.Lock()
	ids, longest := len(j.ids), j.longest
	j.mu.Unlock()
	if ids != maxToolCalls || longest > maxTitleBytes {
		t.Fatalf("journaled %d tool calls, the longest title %d bytes; want %d, at most %d", ids, longest, maxToolCalls, maxTitleBytes)
	}

	o = r.prompt("t", "flood-plan 300 2").wait(t, time.Minute)
	if o.Err != nil || len(o.Plan) != maxPlanEntries || o.MorePlan != 300-maxPlanEntries || len(o.Plan[0].Content) > maxTitleBytes {
		t.Fatalf("outcome %v: plan of %d entries (the first %d bytes), %d more", o.Err, len(o.Plan), len(o.Plan[0].Content), o.MorePlan)
	}
}
