package render

import (
	"encoding/json"
	"html"
	"strings"
	"testing"
	"time"

	"acpbroker/acp"
)

func text(kind, s string) acp.Update {
	return acp.Update{Kind: kind, Content: &acp.ContentBlock{Type: "text", Text: s}}
}

func ptr[T any](v T) *T { return &v }

func turn(t *testing.T, tt *Turn) string {
	t.Helper()
	out := string(TurnHTML(tt))
	checkSafe(t, out)
	return out
}

func contains(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("missing %s in:\n%s", w, out)
		}
	}
}

// A whole turn: the prompt and the answer from Markdown, thoughts folded,
// the plan, files shown, notices, status and usage.
func TestTurnHTML_ShowsEveryPartOfATurn(t *testing.T) {
	out := turn(t, &Turn{
		Prompt:  "fix **the** bug",
		Author:  "ada <admin>",
		Started: time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC),
		Updates: []acp.Update{
			text(acp.UpdateThoughtChunk, "let me *think*"),
			text(acp.UpdateMessageChunk, "Done: "),
			text(acp.UpdateMessageChunk, "see `main.go`.\n"),
			{Kind: acp.UpdatePlan, Entries: []acp.PlanEntry{{Content: "read", Status: "completed", Priority: "high"}, {Content: "<b>fix</b>", Status: "in_progress", Priority: "bogus\" onclick=\"x"}}},
			{Kind: acp.UpdateMessageChunk, Content: &acp.ContentBlock{Type: "resource_link", Name: "report<1>.txt", URI: "file:///w/report.txt"}},
			{Kind: acp.UpdateMessageChunk, Content: &acp.ContentBlock{Type: "image", MimeType: "image/png", Data: "AAAA"}},
			{Kind: "current_mode_update", Switched: []acp.Switch{{What: "mode", To: "Plan"}}},
		},
		Notices: []string{"Allowed <edit> automatically"},
		Status:  "working",
		Usage:   "45k/200k tokens",
	})
	contains(t, out,
		`<article class="turn turn-running">`,
		`<span class="author">ada &lt;admin&gt;</span>`,
		`<time datetime="2026-03-01T09:30:00Z">1 Mar 2026 09:30:00 UTC</time>`,
		`<div class="prompt md"><p>fix <strong>the</strong> bug</p>`,
		`<details class="thoughts"><summary>Thoughts</summary><div class="md"><p>let me <em>think</em></p>`,
		`<div class="answer md"><p>Done: see <code>main.go</code>.</p>`,
		`<li class="plan-completed prio-high"><span class="plan-status">done</span> <span class="plan-priority">high</span> <span class="plan-content">read</span></li>`,
		`<li class="plan-in-progress"><span class="plan-status">doing</span> <span class="plan-priority">bogus&#34; onclick=&#34;x</span> <span class="plan-content">&lt;b&gt;fix&lt;/b&gt;</span></li>`,
		`<span class="file-name">report&lt;1&gt;.txt</span> <code class="file-uri">file:///w/report.txt</code>`,
		`<span class="file-name">image (image/png)</span> <span class="file-size">3 B</span>, not shown`,
		`<li>The agent switched mode to Plan</li><li>Allowed &lt;edit&gt; automatically</li>`,
		`<span class="status">working</span> <span class="usage">45k/200k tokens</span>`,
	)
	out = turn(t, &Turn{Done: true, Outcome: "Done in 3s", Status: "working"})
	contains(t, out, `<article class="turn turn-done">`, `<span class="outcome">Done in 3s</span>`)
	if strings.Contains(out, "working") {
		t.Errorf("a done turn shows its status: %s", out)
	}
}

// A tool call and its updates are one call, shown with its title, kind,
// status, input, output and locations, all as text.
func TestTurnHTML_MergesAToolCallsUpdatesByID(t *testing.T) {
	out := turn(t, &Turn{Updates: []acp.Update{
		{Kind: acp.UpdateToolCall, ToolCallID: "c1", Title: ptr(`<img src=x onerror=alert(1)>Run`), ToolKind: "execute", Status: "pending",
			RawInput: json.RawMessage(`{"command":"echo </pre><script>alert(1)</script>"}`)},
		{Kind: acp.UpdateToolCall, ToolCallID: "c2", Title: ptr("Read"), ToolKind: "no such kind"},
		{Kind: acp.UpdateToolCallUpdate, ToolCallID: "c1", Status: "completed", Title: ptr(""),
			ToolOutput: []acp.ToolCallContent{{Type: "content", Content: &acp.ContentBlock{Type: "text", Text: "<script>alert(2)</script>"}}},
			Locations:  []acp.ToolCallLocation{{Path: "/w/a.go", Line: ptr(3)}}},
		{Kind: acp.UpdateToolCallUpdate, ToolCallID: "c2", Status: "failed"},
	}})
	if n := strings.Count(out, `<details class="tool `); n != 2 {
		t.Errorf("%d tool calls shown, want 2", n)
	}
	contains(t, out,
		`<details class="tool tool-done tool-kind-execute"><summary><span class="tool-status">done</span> <span class="tool-kind">execute</span> <span class="tool-title">&lt;img src=x onerror=alert(1)&gt;Run</span></summary>`,
		"<h4>Input</h4><pre>{\n  &#34;command&#34;: &#34;echo &lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;&#34;\n}</pre>",
		`<pre class="tool-output">&lt;script&gt;alert(2)&lt;/script&gt;</pre>`,
		`<li><code>/w/a.go:3</code></li>`,
		`<details class="tool tool-failed"><summary><span class="tool-status">failed</span> <span class="tool-kind">no such kind</span> <span class="tool-title">Read</span>`,
	)
}

// A diff is a unified diff, each line classed, whatever it holds.
func TestTurnHTML_ShowsDiffsAsDiffs(t *testing.T) {
	out := turn(t, &Turn{Updates: []acp.Update{
		{Kind: acp.UpdateToolCall, ToolCallID: "e", Title: ptr("Edit"), ToolKind: "edit", ToolOutput: []acp.ToolCallContent{
			{Type: "diff", Path: "/w/page.html", OldText: ptr("a\nb\nc\n"), NewText: "a\n</pre><script>alert(1)</script>\nc\n"},
			{Type: "diff", Path: "new.txt", NewText: "hello\n"},
			{Type: "diff", Path: "same.txt", OldText: ptr("x"), NewText: "x"},
		}},
	}})
	contains(t, out,
		`<span class="diff-path">/w/page.html</span> <span class="diff-added">+1</span> <span class="diff-removed">−1</span>`,
		`<span class="diff-file">--- /w/page.html</span>`,
		`<span class="diff-hunk">@@ -1,3 +1,3 @@</span>`,
		`<span class="diff-ctx"> a</span>`,
		`<span class="diff-del">-b</span>`,
		`<span class="diff-add">+&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;</span>`,
		`<span class="diff-file">--- /dev/null</span>`,
		`<span class="diff-add">+hello</span>`,
		`<span class="diff-path">same.txt</span> no change`,
	)
}

// A terminal's output is shown as last drawn, without its sequences, with
// how its command ended.
func TestTurnHTML_ShowsATerminalsOutput(t *testing.T) {
	out := turn(t, &Turn{Updates: []acp.Update{
		{Kind: acp.UpdateToolCall, ToolCallID: "t", Title: ptr("make"), ToolOutput: []acp.ToolCallContent{{Type: "terminal", TerminalID: "term-1"}}},
		{Kind: acp.UpdateToolCallUpdate, ToolCallID: "t", Terminal: &acp.TerminalOutput{ID: "term-1", Output: "\x1b[31mred\x1b[0m <b>\n10%\r50%\r100%\nbell\x07\n", Exit: &acp.TerminalExitStatus{ExitCode: ptr(2)}}},
		{Kind: acp.UpdateToolCallUpdate, ToolCallID: "unknown", Terminal: &acp.TerminalOutput{ID: "x", Output: "lost"}},
	}})
	contains(t, out, "<pre class=\"terminal-output\">red &lt;b&gt;\n100%\nbell\n</pre>", `<p class="terminal-exit">exited with 2</p>`)
	if strings.Contains(out, "lost") || strings.Count(out, `<details class="tool`) != 1 {
		t.Errorf("a terminal of no shown call made one: %s", out)
	}
}

// Hostile text in every place a turn shows comes out as text.
func TestTurnHTML_HostileTextStaysText(t *testing.T) {
	hostile := []string{
		"<script>alert(1)</script>",
		"<img src=x onerror=alert(1)>",
		"[x](javascript:alert(1))",
		"[x](data:text/html,<script>alert(1)</script>)",
		`<a href="javascript:alert(1)">x</a>`,
		`<iframe src="https://evil.example/"></iframe>`,
		"</pre></details></article><script>alert(1)</script>",
		"```\n</code></pre><script>alert(1)</script>\n```",
	}
	for _, h := range hostile {
		out := turn(t, hostileTurn(h))
		// Where it is words, it is shown whole.
		contains(t, out, `<span class="author">`+html.EscapeString(strings.Join(strings.Fields(h), " "))+`</span>`)
	}
}

// hostileTurn puts s everywhere a turn shows what someone wrote.
func hostileTurn(s string) *Turn {
	in, _ := json.Marshal(map[string]string{"x": s})
	return &Turn{
		Prompt: s, Author: s, Status: s, Usage: s, Notices: []string{s},
		Updates: []acp.Update{
			text(acp.UpdateThoughtChunk, s),
			text(acp.UpdateMessageChunk, s),
			{Kind: acp.UpdateMessageChunk, Content: &acp.ContentBlock{Type: "resource_link", Name: s, URI: s}},
			{Kind: acp.UpdateMessageChunk, Content: &acp.ContentBlock{Type: "image", MimeType: s, URI: s}},
			{Kind: acp.UpdateMessageChunk, Content: &acp.ContentBlock{Type: "resource", Resource: &acp.Resource{URI: s, Text: s}}},
			{Kind: acp.UpdatePlan, Entries: []acp.PlanEntry{{Content: s, Status: s, Priority: s}}},
			{Kind: acp.UpdateToolCall, ToolCallID: s, Title: ptr(s), ToolKind: s, Status: s, RawInput: in,
				Locations: []acp.ToolCallLocation{{Path: s}},
				ToolOutput: []acp.ToolCallContent{
					{Type: "content", Content: &acp.ContentBlock{Type: "text", Text: s}},
					{Type: "content", Content: &acp.ContentBlock{Type: "resource_link", Name: s, URI: s}},
					{Type: "diff", Path: s, OldText: ptr(s + "\nold\n"), NewText: s + "\nnew\n"},
					{Type: "terminal", TerminalID: s},
				}},
			{Kind: acp.UpdateToolCallUpdate, ToolCallID: s, Terminal: &acp.TerminalOutput{ID: s, Output: s, Exit: &acp.TerminalExitStatus{Signal: &s}}},
			{Kind: acp.UpdateToolCall, ToolCallID: "raw", RawInput: json.RawMessage(s)},
			{Kind: "current_mode_update", Switched: []acp.Switch{{What: s, To: s}}},
		},
	}
}

// Paths inside the turn's working directory are shown relative to it,
// as the chat shows them: in tool calls' titles and locations and in
// diffs; a path outside it is shown whole.
func TestTurnHTML_ShowsPathsInTheWorkingDirectoryRelativeToIt(t *testing.T) {
	out := turn(t, &Turn{Dir: "/tmp/ws-123/work", Updates: []acp.Update{
		{Kind: acp.UpdateToolCall, ToolCallID: "e", Title: ptr("Edit /tmp/ws-123/work/src/main.go"), ToolKind: "edit",
			Locations:  []acp.ToolCallLocation{{Path: "/tmp/ws-123/work/src/main.go", Line: ptr(7)}, {Path: "/etc/hosts"}},
			ToolOutput: []acp.ToolCallContent{{Type: "diff", Path: "/tmp/ws-123/work/src/main.go", OldText: ptr("a\n"), NewText: "b\n"}}},
	}})
	contains(t, out,
		`<span class="tool-title">Edit src/main.go</span>`,
		`<li><code>src/main.go:7</code></li>`,
		`<li><code>/etc/hosts</code></li>`,
		`<span class="diff-path">src/main.go</span>`,
		`--- a/src/main.go`)
	if strings.Contains(out, "/tmp/ws-123") {
		t.Errorf("the working directory's path is shown:\n%s", out)
	}
	for dir, cases := range map[string]map[string]string{
		"/tmp/ws": {
			"Read /tmp/ws/a.go and `/tmp/ws/b.go`": "Read a.go and `b.go`",
			"/tmp/ws/x":                            "x",
			"Read /x/tmp/ws/a and /tmp/ws2/b":      "Read /x/tmp/ws/a and /tmp/ws2/b",
			"Read /tmp/ws":                         "Read /tmp/ws",
		},
		"/":   {"Read /etc/hosts": "Read /etc/hosts"},
		"":    {"Read /etc/hosts": "Read /etc/hosts"},
		"/w/": {"Read /w/a": "Read a"},
	} {
		for in, want := range cases {
			if got := inDirWords(dir, in); got != want {
				t.Errorf("inDirWords(%q, %q) = %q, want %q", dir, in, got, want)
			}
		}
	}
}

// A tool call's raw input and its terminal's output show the paths inside
// the turn's directory relative to it, as its title does; a path outside
// it, or one that merely starts with the same letters, stays whole.
func TestTurnHTML_ShowsInputAndTerminalPathsInTheTurnsDirectory(t *testing.T) {
	out := turn(t, &Turn{Dir: "/tmp/ws-7/w", Updates: []acp.Update{
		{Kind: acp.UpdateToolCall, ToolCallID: "t", Title: ptr("build"),
			RawInput:   json.RawMessage(`{"path":"/tmp/ws-7/w/cmd/main.go","command":"cat /tmp/ws-7/w/go.mod /etc/hosts /tmp/ws-7/wx/y"}`),
			ToolOutput: []acp.ToolCallContent{{Type: "terminal", TerminalID: "term-1"}}},
		{Kind: acp.UpdateToolCallUpdate, ToolCallID: "t", Terminal: &acp.TerminalOutput{ID: "term-1", Output: "compiling /tmp/ws-7/w/cmd/main.go\nok\t/tmp/ws-7/w/pkg 0.1s\n"}},
	}})
	contains(t, out,
		`&#34;path&#34;: &#34;cmd/main.go&#34;`,
		`&#34;command&#34;: &#34;cat go.mod /etc/hosts /tmp/ws-7/wx/y&#34;`,
		"<pre class=\"terminal-output\">compiling cmd/main.go\nok\tpkg 0.1s\n</pre>",
	)
	if strings.Contains(out, "/tmp/ws-7/w/") {
		t.Errorf("a path inside the turn's directory is shown whole: %s", out)
	}
}
