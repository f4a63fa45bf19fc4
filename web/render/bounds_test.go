package render

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"acpbroker/acp"
)

// A turn past every bound renders within them, each part saying what it
// leaves out.
func TestTurnHTML_AHostileTurnIsBounded(t *testing.T) {
	big := strings.Repeat("0123456789abcde\n", 1<<16) // 1 MiB
	tt := &Turn{Prompt: strings.Repeat("p", 1<<20)}
	for range 3 {
		tt.Updates = append(tt.Updates, text(acp.UpdateMessageChunk, big), text(acp.UpdateThoughtChunk, big))
	}
	for i := range 1000 {
		tt.Updates = append(tt.Updates, acp.Update{Kind: acp.UpdateToolCall, ToolCallID: fmt.Sprint(i), Title: ptr(strings.Repeat("t", 1<<20)),
			ToolOutput: []acp.ToolCallContent{
				{Type: "content", Content: &acp.ContentBlock{Type: "text", Text: big}},
				{Type: "diff", Path: "f", NewText: big},
			},
			Locations: make([]acp.ToolCallLocation, 1000),
		})
	}
	entries := make([]acp.PlanEntry, 100_000)
	for i := range entries {
		entries[i] = acp.PlanEntry{Content: "step", Status: "pending"}
	}
	tt.Updates = append(tt.Updates, acp.Update{Kind: acp.UpdatePlan, Entries: entries})
	for range 10_000 {
		tt.Notices = append(tt.Notices, "notice")
		tt.Updates = append(tt.Updates, acp.Update{Kind: acp.UpdateMessageChunk, Content: &acp.ContentBlock{Type: "resource_link", Name: "f"}})
	}
	out := turn(t, tt)
	contains(t, out,
		`<p class="omitted">… 1.8 MiB of the answer left out here …</p>`,
		`<p class="omitted">… 2.9 MiB of the thoughts left out here …</p>`,
		`<p class="omitted">… and 744 more tool calls, not shown …</p>`,
		`more of the output left out`,
		`more of the diff left out`,
		`this tool call&#39;s input and output are left out: the turn shows 4.0 MiB of them in all`,
		`<p class="omitted">… and 99744 more steps …</p>`,
		`<li class="omitted">… 9936 more notices …</li>`,
		`<p class="omitted">… and 9744 more files …</p>`,
		`<li class="omitted">… 984 more …</li>`,
	)
	// What is kept: the prompt, the answer's and thoughts' ends, the tool
	// calls' output, and per call a title and 256 locations, with their
	// markup; far below the 20 MiB sent.
	if len(out) > 8<<20 {
		t.Errorf("rendered %d bytes", len(out))
	}
	t.Logf("rendered %.1f MiB", float64(len(out))/(1<<20))
}

// answerWithCode is about n bytes of an agent's answer: prose, lists,
// links and code in a known language.
func answerWithCode(n int) string {
	part := "## Step\n\nThe *function* below reads [the file](https://example.com/doc) and `returns` it.\n\n" +
		"- one\n- two with **bold**\n\n```go\nfunc read(name string) ([]byte, error) {\n\treturn os.ReadFile(name)\n}\n```\n\n"
	return strings.Repeat(part, n/len(part)+1)[:n]
}

// bigTurn is a 1 MiB answer with 256 tool calls, each with its input,
// output and a diff of a 200-line file.
func bigTurn() *Turn {
	old := strings.Repeat("line of the file, unchanged\n", 200)
	edited := strings.Replace(old, "unchanged", "changed", 5)
	tt := &Turn{Prompt: "do it", Done: true, Outcome: "Done", Updates: []acp.Update{text(acp.UpdateMessageChunk, answerWithCode(1<<20))}}
	for i := range 256 {
		id := fmt.Sprint("call-", i)
		tt.Updates = append(tt.Updates,
			acp.Update{Kind: acp.UpdateToolCall, ToolCallID: id, Title: ptr("Edit main.go"), ToolKind: "edit", Status: "in_progress",
				RawInput: []byte(`{"path":"main.go","old":"a","new":"b"}`)},
			acp.Update{Kind: acp.UpdateToolCallUpdate, ToolCallID: id, Status: "completed", ToolOutput: []acp.ToolCallContent{
				{Type: "content", Content: &acp.ContentBlock{Type: "text", Text: strings.Repeat("output line\n", 100)}},
				{Type: "diff", Path: "main.go", OldText: &old, NewText: edited},
			}})
	}
	return tt
}

// The figure BENCHMARKS.md quotes: a 1 MiB answer with 256 tool calls.
func BenchmarkTurnHTML_1MiBAnswer256ToolCalls(b *testing.B) {
	tt := bigTurn()
	checkSafe(b, string(TurnHTML(tt)))
	b.ReportAllocs()
	for b.Loop() {
		TurnHTML(tt)
	}
}

// Highlighting's speed, which maxHighlight is chosen by.
func BenchmarkHighlight(b *testing.B) {
	code := strings.Repeat("func read(name string) ([]byte, error) {\n\treturn os.ReadFile(name)\n}\n", maxHighlightBlock/70)
	b.SetBytes(int64(len(code)))
	for b.Loop() {
		left := maxHighlight
		highlight(io.Discard, "go", code, &left)
		if left == maxHighlight {
			b.Fatal("not highlighted")
		}
	}
}
