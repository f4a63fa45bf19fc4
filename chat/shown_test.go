package chat

import (
	"encoding/base64"
	"strings"
	"testing"

	"acpbroker/acp"
)

var limits = AttachLimits{FileBytes: 1 << 10, TotalBytes: 2 << 10, Files: 3, InlineDiff: 300}

func chunk(b acp.ContentBlock) acp.Update {
	return acp.Update{Kind: acp.UpdateMessageChunk, Content: &b}
}

// A short diff shows as a diff block under its tool call; a long one is
// attached as <name>.diff and named there; content sent again is shown
// once; a later content list replaces the earlier one.
func TestTranscript_DiffsInlineOrAttached(t *testing.T) {
	tr := Transcript{Dir: "/work/t1", Limits: limits}
	old := "a\nb\n"
	small := acp.ToolCallContent{Type: "diff", Path: "/work/t1/src/x.go", OldText: &old, NewText: "a\nB\n"}
	tr.Add(acp.Update{Kind: acp.UpdateToolCall, ToolCallID: "1", Title: title("Edit"), Status: "completed", ToolOutput: []acp.ToolCallContent{small}})
	tr.Add(acp.Update{Kind: acp.UpdateToolCallUpdate, ToolCallID: "1", ToolOutput: []acp.ToolCallContent{small}})
	want := "✅ `Edit` done\n```diff\n--- a/src/x.go\n+++ b/src/x.go\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n```\n"
	if got := tr.Render(); got != want {
		t.Fatalf("render:\n%s\nwant:\n%s", got, want)
	}
	big := acp.ToolCallContent{Type: "diff", Path: "/work/t1/big.txt", NewText: strings.Repeat("a new line\n", 40)}
	tr.Add(acp.Update{Kind: acp.UpdateToolCallUpdate, ToolCallID: "1", ToolOutput: []acp.ToolCallContent{big}})
	if got := tr.Render(); got != "✅ `Edit` done\n📎 `big.txt.diff` (+40 −0 lines)\n" {
		t.Fatalf("render:\n%s", got)
	}
	atts := tr.Attachments()
	if len(atts) != 1 || atts[0].Name != "big.txt.diff" || !strings.HasPrefix(string(atts[0].Data), "--- /dev/null\n+++ b/big.txt\n@@ -0,0 +1,40 @@\n+a new line\n") {
		t.Fatalf("attachments = %+v", atts)
	}
	tr.Add(acp.Update{Kind: acp.UpdateToolCallUpdate, ToolCallID: "1", ToolOutput: []acp.ToolCallContent{}})
	if n := len(tr.Attachments()); n != 0 || tr.held != 0 {
		t.Fatalf("%d attachments, %d bytes held after the content was replaced", n, tr.held)
	}
}

// Images and embedded resources the agent sends are kept to attach,
// within the limits; a link to a file in the session's directory is kept
// by path, one outside it or a remote one is only shown.
func TestTranscript_FilesTheAgentShows(t *testing.T) {
	tr := Transcript{Dir: "/work/t1", Limits: limits}
	png := base64.StdEncoding.EncodeToString([]byte("\x89PNG fake"))
	tr.Add(chunk(acp.TextBlock("Look")))
	tr.Add(chunk(acp.ContentBlock{Type: "image", MimeType: "image/png", Data: png}))
	tr.Add(chunk(acp.ContentBlock{Type: "resource_link", URI: "file:///work/t1/out/report.txt", Name: "report.txt"}))
	tr.Add(chunk(acp.ContentBlock{Type: "resource_link", URI: "file:///etc/passwd", Name: "passwd"}))
	tr.Add(chunk(acp.ContentBlock{Type: "resource_link", URI: "/work/t1/../t2/secret", Name: "secret"}))
	tr.Add(chunk(acp.ContentBlock{Type: "resource_link", URI: "https://example.com/x", Name: "docs"}))
	tr.Add(chunk(acp.ContentBlock{Type: "image", URI: "https://example.com/cat.png"}))
	tr.Add(chunk(acp.ContentBlock{Type: "resource", Resource: &acp.Resource{URI: "file:///p/config.toml", Text: "port = 1\n"}}))
	tr.Add(chunk(acp.ContentBlock{Type: "resource", Resource: &acp.Resource{URI: "file:///p/more.toml", Text: "x"}}))
	tr.Add(chunk(acp.ContentBlock{Type: "hologram"}))
	tr.Add(chunk(acp.TextBlock("done")))
	want := "Look\n📎 `image-1.png` (9 B)\n📎 `out/report.txt`\n🔗 `/etc/passwd` (outside the session's directory; not attached)\n" +
		"🔗 `/work/t1/../t2/secret` (outside the session's directory; not attached)\n🔗 docs: `https://example.com/x`\n🖼️ `https://example.com/cat.png`\n" +
		"📎 `config.toml` (9 B)\n📎 `more.toml` (1 B, not attached: more than 3 files)\ndone"
	if got := tr.Render(); got != want {
		t.Fatalf("render:\n%s\nwant:\n%s", got, want)
	}
	atts := tr.Attachments()
	if len(atts) != 3 || string(atts[0].Data) != "\x89PNG fake" || atts[1].Path != "out/report.txt" || atts[1].Data != nil || atts[2].Name != "config.toml" {
		t.Fatalf("attachments = %+v", atts)
	}

	big := Transcript{Dir: "/w", Limits: limits}
	big.Add(chunk(acp.ContentBlock{Type: "resource", Resource: &acp.Resource{URI: "a.txt", Text: strings.Repeat("x", 2000)}}))
	if got := big.Render(); got != "📎 `a.txt` (2.0 KiB, not attached: larger than 1.0 KiB)\n" || len(big.Attachments()) != 0 {
		t.Fatalf("render:\n%s", got)
	}
	off := Transcript{Dir: "/w"}
	off.Add(chunk(acp.ContentBlock{Type: "image", MimeType: "image/png", Data: png}))
	if got := off.Render(); !strings.Contains(got, "not attached: attachments are off") {
		t.Fatalf("render without limits:\n%s", got)
	}
}

func TestUsageText(t *testing.T) {
	for _, tc := range []struct {
		u    *acp.Usage
		turn *acp.TurnUsage
		want string
	}{
		{nil, nil, ""},
		{&acp.Usage{Used: 45_000, Size: 200_000, Cost: &acp.Cost{Amount: 0.12, Currency: "USD"}}, nil, "45k/200k tokens · $0.12"},
		{&acp.Usage{Used: 3200, Size: 1_000_000}, &acp.TurnUsage{TotalTokens: 950}, "3.2k/1M tokens · 950 this turn"},
		{nil, &acp.TurnUsage{TotalTokens: 12_345}, "12k tokens this turn"},
		{&acp.Usage{Used: 10, Size: 100, Cost: &acp.Cost{Amount: 0.004, Currency: "eur"}}, nil, "10/100 tokens · 0.0040 EUR"},
	} {
		if got := UsageText(tc.u, tc.turn); got != tc.want {
			t.Errorf("UsageText(%+v, %+v) = %q, want %q", tc.u, tc.turn, got, tc.want)
		}
	}
}
