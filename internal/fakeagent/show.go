package fakeagent

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// tinyPNG is a 1×1 transparent PNG.
var tinyPNG, _ = base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")

// show plays the turns that show things besides text: diffs, images,
// files, usage, a title, and an update of a kind no client knows. It
// reports false for a command that is not one of them.
func (a *agent) show(t *turn, cmd string, args []string, rest string) bool {
	sid := t.sid
	arg := func(i int, def string) string {
		if i < len(args) {
			return args[i]
		}
		return def
	}
	switch cmd {
	case "diff":
		a.diff(t, arg(0, "small"), atoi(arg(1, "400")))
	case "image":
		a.chunk(sid, "Here is a picture:\n")
		a.update(sid, map[string]any{"sessionUpdate": "agent_message_chunk",
			"content": map[string]any{"type": "image", "mimeType": "image/png", "data": base64.StdEncoding.EncodeToString(tinyPNG)}})
		a.chunk(sid, "That was it.")
	case "resource-link":
		// A link to PATH: relative to the session's directory, where it is
		// made (unless something is there already), or absolute as given.
		path := arg(0, "notes.txt")
		if !filepath.IsAbs(path) {
			path = filepath.Join(a.cwd(sid), path)
			if _, err := os.Lstat(path); err != nil {
				os.WriteFile(path, []byte("notes from the agent\n"), 0o644)
			}
		}
		a.chunk(sid, "See the file:\n")
		a.update(sid, map[string]any{"sessionUpdate": "agent_message_chunk",
			"content": map[string]any{"type": "resource_link", "uri": "file://" + path, "name": filepath.Base(path)}})
		a.chunk(sid, "Linked.")
	case "resource":
		// Embedded text, as a read tool's output.
		a.update(sid, map[string]any{"sessionUpdate": "tool_call", "toolCallId": "call-r", "title": "Read config.toml", "kind": "read", "status": "completed",
			"content": []any{map[string]any{"type": "content", "content": map[string]any{"type": "resource",
				"resource": map[string]any{"uri": "file:///project/config.toml", "mimeType": "text/plain", "text": "[server]\nport = 8080\n"}}}}})
		a.chunk(sid, "Read it.")
	case "usage":
		a.chunk(sid, "Counting tokens.")
		a.update(sid, map[string]any{"sessionUpdate": "usage_update", "used": 45000, "size": 200000,
			"cost": map[string]any{"amount": 0.12, "currency": "USD"}})
		t.once.Do(func() {
			a.reply(t.id, map[string]any{"stopReason": "end_turn",
				"usage": map[string]any{"totalTokens": 3200, "inputTokens": 3000, "outputTokens": 200}})
		})
		return true
	case "title":
		a.update(sid, map[string]any{"sessionUpdate": "session_info_update", "title": rest, "updatedAt": "2026-01-02T03:04:05Z"})
		a.saveTitle(sid, rest)
		a.chunk(sid, "Titled.")
	case "unknown-update":
		a.chunk(sid, "before ")
		a.update(sid, map[string]any{"sessionUpdate": "hologram_update", "title": 7, "content": "not a block", "entries": map[string]any{}})
		a.update(sid, map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "hologram", "data": "3d"}})
		a.chunk(sid, "after")
	default:
		return false
	}
	t.stop("end_turn")
	return true
}

func (a *agent) cwd(sid string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cwds[sid]
}

// diff shows an edit as diff content: "small" changes a few lines of a
// Go file and adds a new file; "big" changes n lines.
func (a *agent) diff(t *turn, size string, n int) {
	sid := t.sid
	dir := a.cwd(sid)
	var content []any
	switch size {
	case "big":
		var old, nu strings.Builder
		for i := range n {
			fmt.Fprintf(&old, "line %d of the old text\n", i+1)
			fmt.Fprintf(&nu, "line %d of the new text\n", i+1)
		}
		content = []any{map[string]any{"type": "diff", "path": filepath.Join(dir, "big.txt"), "oldText": old.String(), "newText": nu.String()}}
	default:
		old := "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hello\")\n}\n"
		nu := "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hello, world\")\n}\n"
		content = []any{
			map[string]any{"type": "diff", "path": filepath.Join(dir, "main.go"), "oldText": old, "newText": nu},
			map[string]any{"type": "diff", "path": filepath.Join(dir, "NOTES.md"), "oldText": nil, "newText": "# Notes\nfirst\n"},
		}
	}
	a.update(sid, map[string]any{"sessionUpdate": "tool_call", "toolCallId": "call-d", "title": "Edit files", "kind": "edit", "status": "in_progress"})
	a.update(sid, map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": "call-d", "status": "completed", "content": content})
	a.chunk(sid, "Edited.")
}
