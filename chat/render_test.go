package chat

import (
	"runtime"
	"strings"
	"testing"

	"acpbroker/acp"
)

func title(s string) *string { return &s }

// The transcript shows tool calls as one status line each (updated in
// place), the plan as a checklist, notices, then the answer; thoughts only
// when asked for.
func TestTranscript_ToolsPlanThoughtsAnswer(t *testing.T) {
	for _, show := range []bool{false, true} {
		tr := Transcript{ShowThoughts: show}
		tr.Add(acp.Update{Kind: acp.UpdateThoughtChunk, Content: &acp.ContentBlock{Type: "text", Text: "pondering"}})
		tr.Add(acp.Update{Kind: acp.UpdateToolCall, ToolCallID: "1", Title: title("Run `go test`"), Status: "pending"})
		tr.Add(acp.Update{Kind: acp.UpdateToolCall, ToolCallID: "2", Title: title("Read main.go")})
		tr.Add(acp.Update{Kind: acp.UpdateToolCallUpdate, ToolCallID: "1", Status: "completed"})
		tr.Add(acp.Update{Kind: acp.UpdateToolCallUpdate, ToolCallID: "2", Status: "failed"})
		tr.Add(acp.Update{Kind: acp.UpdatePlan, Entries: []acp.PlanEntry{{Content: "write", Status: "completed"}, {Content: "test", Status: "in_progress"}, {Content: "ship"}}})
		tr.Notice("answered automatically")
		tr.Add(acp.Update{Kind: acp.UpdateMessageChunk, Content: &acp.ContentBlock{Type: "text", Text: "All "}})
		tr.Add(acp.Update{Kind: acp.UpdateMessageChunk, Content: &acp.ContentBlock{Type: "text", Text: "good."}})
		want := "✅ `Run 'go test'` done\n❌ `Read main.go` failed\n**Plan**\n☑ write\n▶ test\n☐ ship\nℹ️ answered automatically\n\nAll good."
		if show {
			want = "> 💭 pondering\n" + want
		}
		if got := tr.Render(); got != want {
			t.Fatalf("show thoughts %v:\n%s\nwant:\n%s", show, got, want)
		}
	}
}

// Split never exceeds the limit, cuts at line breaks where it can, cuts a
// line longer than a piece, and closes and reopens a code fence at a cut.
func TestSplit(t *testing.T) {
	long := strings.Repeat("word ", 100)
	code := "intro\n```python\n" + strings.Repeat("print('hello world')\n", 20) + "```\nafter"
	for _, tc := range []struct {
		name string
		text string
		max  int
	}{{"lines", strings.Repeat("a short line\n", 40), 100}, {"one long line", long, 64}, {"fenced", code, 120},
		{"long line of wide runes", strings.Repeat("é日🙂", 300), 50}} {
		t.Run(tc.name, func(t *testing.T) {
			pieces := Split(tc.text, tc.max)
			var rejoined strings.Builder
			for i, p := range pieces {
				if n := len([]rune(p)); n > tc.max {
					t.Fatalf("piece %d has %d runes, over %d", i, n, tc.max)
				}
				if strings.Count(p, "```")%2 != 0 {
					t.Fatalf("piece %d leaves a fence open:\n%s", i, p)
				}
				body := strings.TrimSuffix(strings.TrimPrefix(p, "```python\n"), "\n```")
				rejoined.WriteString(body)
			}
			// Fences aside, the pieces hold the text in order.
			squash := func(s string) string {
				s = strings.ReplaceAll(strings.ReplaceAll(s, "```python", ""), "```", "")
				return strings.Join(strings.Fields(s), "")
			}
			if squash(rejoined.String()) != squash(tc.text) {
				t.Fatalf("the pieces do not hold the text:\n%q", pieces)
			}
		})
	}
}

// A huge line (an agent's 12 MiB chunk) costs Split its length, not its
// length times the number of pieces: the memory it allocates stays a small
// multiple of the text's size.
func TestSplitHugeLineIsLinear(t *testing.T) {
	text := strings.Repeat("xé", 1<<19) // 1.5 MiB, 1 Mi runes, one line
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	pieces := Split(text, 2000)
	runtime.ReadMemStats(&after)
	if want := (1<<20 + 1995) / 1996; len(pieces) != want {
		t.Fatalf("%d pieces, want %d", len(pieces), want)
	}
	if strings.Join(pieces, "") != text {
		t.Fatal("the pieces do not hold the line")
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8*uint64(len(text)) {
		t.Fatalf("Split allocated %d bytes for a %d-byte line", alloc, len(text))
	}
}

func BenchmarkSplitHugeLine(b *testing.B) {
	text := strings.Repeat("x", 12<<20)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		Split(text, 2000)
	}
}

// A tool call that holds a terminal shows its last lines under it, in a
// code block nothing in the output can close, redrawn lines as they last
// were; a terminal of a tool call not shown adds nothing.
func TestTranscript_TerminalTailUnderItsToolCall(t *testing.T) {
	var tr Transcript
	tr.Add(acp.Update{Kind: acp.UpdateToolCall, ToolCallID: "1", Title: title("make"), Status: "in_progress"})
	out := "line 1\nline 2\nline 3\nline 4\nprogress 10%\rprogress 100%\n\x1b[31mred\x1b[0m ``` fence\n" + strings.Repeat("x", 300) + "\nlast\n"
	tr.Add(acp.Update{Kind: acp.UpdateToolCallUpdate, ToolCallID: "1", Terminal: &acp.TerminalOutput{ID: "term-1", Output: out}})
	tr.Add(acp.Update{Kind: acp.UpdateToolCallUpdate, ToolCallID: "ghost", Terminal: &acp.TerminalOutput{ID: "term-2", Output: "boo"}})
	want := "⏳ `make` running\n```\nline 4\nprogress 100%\nred ''' fence\n" + strings.Repeat("x", 119) + "…\nlast\n```\n"
	if got := tr.Render(); got != want {
		t.Fatalf("rendered:\n%s\nwant:\n%s", got, want)
	}
	tr.Add(acp.Update{Kind: acp.UpdateToolCallUpdate, ToolCallID: "1", Status: "completed"})
	if got := tr.Render(); !strings.HasPrefix(got, "✅ `make` done\n```\nline 4\n") {
		t.Fatalf("the tail is not kept once the tool call is done:\n%s", got)
	}
}
