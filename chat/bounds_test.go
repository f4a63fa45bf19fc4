package chat

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"acpbroker/acp"
)

// text is an answer chunk of s.
func text(s string) acp.Update { return chunk(acp.TextBlock(s)) }

// However much answer and thought an agent writes, the transcript keeps
// and renders their start and their end, says how much is left out, and
// a code block cut there is closed and opened again.
func TestTranscript_AnswerAndThoughtsKeepTheirStartAndEnd(t *testing.T) {
	tr := Transcript{ShowThoughts: true}
	tr.Add(acp.Update{Kind: acp.UpdateThoughtChunk, Content: &acp.ContentBlock{Type: "text", Text: "first thought\n"}})
	tr.Add(text("BEGIN\n```go\n"))
	line := strings.Repeat("x", 99) + "\n"
	piece := strings.Repeat(line, 640) // 64,000 bytes
	const pieces = 1000                // 64 MB
	for range pieces {
		tr.Add(text(piece))
		tr.Add(acp.Update{Kind: acp.UpdateThoughtChunk, Content: &acp.ContentBlock{Type: "text", Text: strings.Repeat("hmm ", 100) + "\n"}})
	}
	tr.Add(text("```\nEND"))
	got := tr.Render()
	if len(got) > 2*answerKeep+2*thoughtsKeep*3+4<<10 {
		t.Fatalf("rendered %d bytes", len(got))
	}
	if !strings.HasPrefix(got, "> 💭 first thought\n") || !strings.Contains(got, "\nBEGIN\n```go\n") || !strings.HasSuffix(got, "```\nEND") {
		t.Fatalf("rendered from %q to %q", got[:40], got[len(got)-20:])
	}
	if !strings.Contains(got, "MiB of the answer left out here …\n") || !strings.Contains(got, "KiB of the thoughts left out here …\n") {
		t.Fatal("the rendered text does not say what is left out")
	}
	if n := strings.Count(got, "```"); n%2 != 0 {
		t.Fatalf("%d code fences: one is left open", n)
	}
	if head, more := tr.RenderHead(50_000); !more || len(head) > 50_000 || !strings.HasPrefix(got, head) {
		t.Fatalf("RenderHead(50,000): %d bytes, more %v, a prefix of Render: %v", len(head), more, strings.HasPrefix(got, head))
	}
	answer := tr.Answer()
	if !strings.HasPrefix(answer, "BEGIN\n") || !strings.HasSuffix(answer, "END") || len(answer) > 2*answerKeep+1<<10 {
		t.Fatalf("Answer() of %d bytes", len(answer))
	}
	for _, p := range Split(got, 1950) {
		if runeLen(p) > 1950 {
			t.Fatalf("a piece of %d characters", runeLen(p))
		}
	}
}

// What fits in RenderHead's limit is what Render gives.
func TestTranscript_RenderHeadOfAShortTranscriptIsAll(t *testing.T) {
	var tr Transcript
	tr.Add(acp.Update{Kind: acp.UpdateToolCall, ToolCallID: "1", Title: title("Read"), Status: "completed"})
	tr.Add(text("short answer"))
	if head, more := tr.RenderHead(1000); more || head != tr.Render() {
		t.Fatalf("RenderHead = %q, %v; Render = %q", head, more, tr.Render())
	}
	if head, more := tr.RenderHead(10); !more || head != tr.Render()[:10] {
		t.Fatalf("RenderHead(10) = %q, %v", head, more)
	}
}

// Tool calls past maxToolLines, plan entries past maxPlanLines and the
// notices between the first and last maxNotices/2 are counted and said,
// not kept; titles and notices are cut to maxLineBytes.
func TestTranscript_ToolCallsPlanAndNoticesAreBounded(t *testing.T) {
	var tr Transcript
	long := strings.Repeat("t", 64<<10)
	for i := range 1000 {
		id := fmt.Sprint("call-", i)
		title := fmt.Sprint(i, long)
		tr.Add(acp.Update{Kind: acp.UpdateToolCall, ToolCallID: id, Title: &title, Status: "in_progress"})
		tr.Add(acp.Update{Kind: acp.UpdateToolCallUpdate, ToolCallID: id, Status: "completed"})
		tr.Notice(fmt.Sprint("notice ", i, " ", long))
	}
	entries := make([]acp.PlanEntry, 500)
	for i := range entries {
		entries[i] = acp.PlanEntry{Content: fmt.Sprint("step ", i, long)}
	}
	tr.Add(acp.Update{Kind: acp.UpdatePlan, Entries: entries})
	if len(tr.tools) != maxToolLines || tr.moreTools != 1000-maxToolLines || len(tr.plan) != maxPlanLines ||
		len(tr.notices.first)+len(tr.notices.last) != maxNotices || tr.notices.omitted != 1000-maxNotices {
		t.Fatalf("kept %d tool calls (%d more), %d plan entries, %d notices (%d more)", len(tr.tools), tr.moreTools, len(tr.plan), len(tr.notices.first)+len(tr.notices.last), tr.notices.omitted)
	}
	for _, l := range tr.tools {
		if len(l.title) > maxLineBytes {
			t.Fatalf("a title of %d bytes", len(l.title))
		}
	}
	got := tr.Render()
	for _, want := range []string{"… and 744 more tool calls, not shown", "… and 436 more steps", "… 968 more notices …", "notice 15 ", "notice 984 ", "notice 999 "} {
		if !strings.Contains(got, want) {
			t.Errorf("the render does not say %q", want)
		}
	}
	if strings.Contains(got, "notice 16 ") || len(got) > 256<<10 {
		t.Fatalf("rendered %d bytes; notice 16 shown: %v", len(got), strings.Contains(got, "notice 16 "))
	}
}

// A tool call whose content is replaced again and again keeps only what
// its last content attaches: nothing of the earlier ones is held.
func TestTranscript_ReplacedContentHoldsNothing(t *testing.T) {
	tr := Transcript{Dir: "/w", Limits: AttachLimits{FileBytes: 1 << 20, TotalBytes: 2 << 20, Files: 10, InlineDiff: 300}}
	tr.Add(acp.Update{Kind: acp.UpdateToolCall, ToolCallID: "1", Status: "in_progress"})
	var last *Attachment
	for i := range 1000 {
		img := base64.StdEncoding.EncodeToString([]byte(fmt.Sprint(i, strings.Repeat("p", 64<<10))))
		tr.Add(acp.Update{Kind: acp.UpdateToolCallUpdate, ToolCallID: "1", ToolOutput: []acp.ToolCallContent{
			{Type: "content", Content: &acp.ContentBlock{Type: "image", MimeType: "image/png", Data: img}}}})
		if i == 998 {
			last = tr.Attachments()[0]
		}
	}
	if n := len(tr.files); n != 1 || tr.held > 65<<10 || last.Data != nil {
		t.Fatalf("%d files, %d bytes held; a replaced one holds %d bytes", n, tr.held, len(last.Data))
	}
	// A long diff with nothing to attach it to shows its start, and says so.
	var plain Transcript
	plain.Add(acp.Update{Kind: acp.UpdateToolCall, ToolCallID: "d", Status: "completed", ToolOutput: []acp.ToolCallContent{
		{Type: "diff", Path: "/w/big.txt", NewText: strings.Repeat("a new line\n", 100_000)}}})
	if got := plain.Render(); len(got) > 2*maxInlineDiff || !strings.Contains(got, "the diff of `/w/big.txt` goes on (+100000 −0 lines") {
		t.Fatalf("a long diff rendered in %d bytes: %q", len(got), got[len(got)-100:])
	}
}
