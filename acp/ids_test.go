package acp

import (
	"encoding/json"
	"strings"
	"testing"
)

// A tool call id past maxIDBytes is kept bounded (an update's here; a
// permission request's and a question's go through the same boundID), and
// two long ids that differ only at their ends stay apart.
func TestUpdate_ALongToolCallIDIsBoundedAndStaysDistinct(t *testing.T) {
	long := strings.Repeat("i", 1<<20)
	var a, b Update
	for _, tc := range []struct {
		u  *Update
		id string
	}{{&a, long + "a"}, {&b, long + "b"}} {
		raw, _ := json.Marshal(map[string]any{"sessionUpdate": "tool_call", "toolCallId": tc.id, "title": "x"})
		if err := json.Unmarshal(raw, tc.u); err != nil {
			t.Fatal(err)
		}
	}
	if len(a.ToolCallID) > maxIDBytes || len(b.ToolCallID) > maxIDBytes || a.ToolCallID == b.ToolCallID {
		t.Fatalf("ids of %d and %d bytes, equal: %v", len(a.ToolCallID), len(b.ToolCallID), a.ToolCallID == b.ToolCallID)
	}
	if short := "call-1"; boundID(short) != short {
		t.Fatalf("a short id changed: %q", boundID(short))
	}
	if boundID(long+"a") != a.ToolCallID {
		t.Fatal("the same id is bounded two ways")
	}
}
