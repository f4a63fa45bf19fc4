package acp

import (
	"encoding/json"
	"strings"
	"testing"
)

// A tool call's rawInput is kept for a page to show, on the call and on
// its updates, and is left out of the update written back out, so an API
// stream carries what it did before.
func TestUpdate_AToolCallsRawInputIsKeptAndNotWrittenBack(t *testing.T) {
	for _, kind := range []string{UpdateToolCall, UpdateToolCallUpdate} {
		var u Update
		in := `{"sessionUpdate":"` + kind + `","toolCallId":"c1","rawInput":{"command":"ls -la"}}`
		if err := json.Unmarshal([]byte(in), &u); err != nil {
			t.Fatal(err)
		}
		if got := string(u.RawInput); got != `{"command":"ls -la"}` {
			t.Fatalf("%s: RawInput = %q", kind, got)
		}
		out, err := json.Marshal(u)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(out), "rawInput") {
			t.Fatalf("%s: written back with its input: %s", kind, out)
		}
	}
	var chunk Update
	if err := json.Unmarshal([]byte(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"},"rawInput":{"x":1}}`), &chunk); err != nil {
		t.Fatal(err)
	}
	if chunk.RawInput != nil {
		t.Fatalf("a chunk kept a rawInput: %s", chunk.RawInput)
	}
}
