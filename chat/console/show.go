package console

import (
	"encoding/base64"
	"fmt"
	"path/filepath"
	"strings"

	"acpbroker/acp"
	"acpbroker/chat"
	"acpbroker/internal/clip"
)

// maxDiffLines bounds a diff printed at the terminal.
const maxDiffLines = 400

// block prints a content block that is not text: what it is and where,
// never its bytes.
func (s *sink) block(b *acp.ContentBlock) {
	switch b.Type {
	case "image", "audio":
		s.breakLine()
		if b.Data == "" {
			s.c.printf("[%s] %s\n", b.Type, clip.Cut(b.URI, maxLineBytes))
			return
		}
		s.c.printf("[%s, %d bytes]\n", b.Type, decodedLen(b.Data))
	case "resource_link":
		s.breakLine()
		s.c.printf("[file] %s\n", clip.Cut(b.URI, maxLineBytes))
	case "resource":
		if r := b.Resource; r != nil {
			s.breakLine()
			n := len(r.Text)
			if r.Blob != "" {
				n = decodedLen(r.Blob)
			}
			s.c.printf("[file] %s (%d bytes)\n", clip.Cut(r.URI, maxLineBytes), n)
		}
	}
}

// toolContent prints what a tool call shows, once per change: diffs as
// diff blocks, files as their paths.
func (s *sink) toolContent(seen *toolSeen, content []acp.ToolCallContent) {
	sum := chat.SumContent(content)
	if seen.shown == sum {
		return
	}
	seen.shown = sum
	for _, c := range content {
		switch c.Type {
		case "diff":
			name := c.Path
			if rel := chat.InDir(s.dir, c.Path); rel != "" {
				name = filepath.ToSlash(rel)
			}
			d := chat.UnifiedDiff(name, c.OldText, c.NewText)
			if d.Text == "" {
				continue
			}
			s.breakLine()
			lines := strings.SplitAfter(strings.TrimSuffix(d.Text, "\n"), "\n")
			more := ""
			if len(lines) > maxDiffLines {
				more = fmt.Sprintf("… %d more lines\n", len(lines)-maxDiffLines)
				lines = lines[:maxDiffLines]
			}
			text := strings.TrimSuffix(strings.Join(lines, ""), "\n")
			if len(text) > maxDiffBytes {
				text = clip.Head(text, maxDiffBytes)
				more = fmt.Sprintf("… more, %s of diff in all\n", chat.Bytes(int64(len(d.Text))))
			}
			s.c.printf("```diff\n%s\n%s```\n", text, more)
		case "content":
			if c.Content != nil {
				s.block(c.Content)
			}
		}
	}
}

// decodedLen is the size of base64 data once decoded.
func decodedLen(b64 string) int {
	b64 = strings.TrimRight(b64, "=")
	return base64.RawStdEncoding.DecodedLen(len(b64))
}
