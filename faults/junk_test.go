package faults

import (
	"slices"
	"strings"
	"testing"
)

// Garbage on the agent's stdout does not break a turn: lines that are not
// JSON-RPC are skipped and counted (acp_broker_acp_junk_lines_total), and
// the turn's answer arrives.
func TestJunk_NonJSONLinesAreSkippedAndCounted(t *testing.T) {
	w := newWorld(t, setup{conf: settings{"agent.args": []string{"--junk-at-start"}}})
	b := w.start()
	thread := w.mention(alice, "junk")
	got := w.awaitAnswers(thread, 1)[0]
	if !strings.HasPrefix(got.Text, "after junk") || !strings.HasPrefix(got.Footer, "-# ✅ done") {
		t.Fatalf("the turn after junk lines got %q", got.Text)
	}
	// Two lines at start, three in the turn: a plain text line, a JSON
	// object and a JSON array, none of them JSON-RPC. The array reads as
	// a batch and is answered -32600; the rest are junk.
	b.awaitMetric("acp_broker_acp_junk_lines_total", func(v float64) bool { return v == 4 })
	b.awaitMetric("acp_broker_acp_invalid_requests_total", func(v float64) bool { return v == 1 })

	w.Discord.Post(thread, alice, "still there?")
	got = w.awaitAnswers(thread, 2)[1]
	if !strings.Contains(got.Text, "You said: still there?") {
		t.Fatalf("the next message got %q", got.Text)
	}
}

// A line longer than agent.max_line_bytes (here a 33 MiB answer chunk
// over the 32 MiB default) is skipped and counted
// (acp_broker_acp_oversize_lines_total), and the rest of the turn is read
// and answered as usual.
func TestJunk_LineOverTheCapIsSkippedAndCounted(t *testing.T) {
	w := newWorld(t, setup{})
	b := w.start()
	thread := w.mention(alice, "big 33")
	got := w.awaitAnswers(thread, 1)[0]
	if !strings.HasPrefix(got.Text, "after big") || !strings.HasPrefix(got.Footer, "-# ✅ done") {
		t.Fatalf("the turn with an oversize line got %.200q", got.Text)
	}
	b.awaitMetric("acp_broker_acp_oversize_lines_total", func(v float64) bool { return v == 1 })
	w.Discord.Post(thread, alice, "and now?")
	got = w.awaitAnswers(thread, 2)[1]
	if !strings.Contains(got.Text, "You said: and now?") {
		t.Fatalf("the message after the oversize line got %q", got.Text)
	}
}

// A 12 MiB line on the agent's stdout (one answer chunk that long) is
// read and shown: the turn completes, the whole answer reaches the user
// (past discord.max_answer_messages it is attached, here in two parts
// since one message carries at most 10 MiB), and the agent's next words
// arrive too.
func TestJunk_TwelveMiBLineIsDelivered(t *testing.T) {
	const size = 12 << 20
	w := newWorld(t, setup{})
	w.start()
	thread := w.mention(alice, "big 12")
	got := w.awaitAnswers(thread, 1)[0]
	if !strings.HasPrefix(got.Footer, "-# ✅ done") {
		t.Fatalf("the big turn ended with %q", got.Footer)
	}
	// 12 MiB is more than one message may carry (10 MiB): the answer
	// comes in parts, in order, one per message.
	var file []byte
	var names []string
	for _, m := range got.Msgs {
		for _, a := range m.Attachments {
			names = append(names, a.Filename)
			file = append(file, a.Data...)
		}
	}
	if !slices.Equal(names, []string{"answer-1.md", "answer-2.md"}) {
		t.Fatalf("an answer of %d messages has the attachments %v, want answer-1.md and answer-2.md", len(got.Msgs), names)
	}
	if n := strings.Count(string(file), "x"); n != size {
		t.Errorf("the attachments hold %d of the %d characters", n, size)
	}
	if end := strings.TrimSpace(string(file)); !strings.HasSuffix(end, "after big") {
		t.Errorf("the attachments do not end with the agent's last words: …%q", end[max(0, len(end)-40):])
	}
	if last := got.Msgs[len(got.Msgs)-1]; !strings.Contains(last.Content, "attached in 2 parts; this is answer-2.md") {
		t.Errorf("the last message does not point at the attachments: %q", last.Content)
	}
	w.Discord.Post(thread, alice, "and now?")
	got = w.awaitAnswers(thread, 2)[1]
	if !strings.Contains(got.Text, "You said: and now?") {
		t.Fatalf("the message after the big answer got %q", got.Text)
	}
}
