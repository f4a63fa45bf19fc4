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
// read and shown as the start and the end of the answer: the turn
// completes, the thread gets its first and its last MiB (past
// discord.max_answer_messages, attached as answer.md) with a line saying
// how much is left out between them, and the agent's next words arrive
// too.
func TestJunk_TwelveMiBLineIsShownByItsStartAndEnd(t *testing.T) {
	const size = 12 << 20
	w := newWorld(t, setup{})
	w.start()
	thread := w.mention(alice, "big 12")
	got := w.awaitAnswers(thread, 1)[0]
	if !strings.HasPrefix(got.Footer, "-# ✅ done") {
		t.Fatalf("the big turn ended with %q", got.Footer)
	}
	var file []byte
	var names []string
	for _, m := range got.Msgs {
		for _, a := range m.Attachments {
			names = append(names, a.Filename)
			file = append(file, a.Data...)
		}
	}
	if !slices.Equal(names, []string{"answer.md"}) {
		t.Fatalf("an answer of %d messages has the attachments %v, want answer.md", len(got.Msgs), names)
	}
	if n := strings.Count(string(file), "x"); n < 2<<20-16 || n > 2<<20 {
		t.Errorf("the attachment holds %d of the %d characters, want the first and the last MiB", n, size)
	}
	if !strings.Contains(string(file), "10.0 MiB of the answer left out here") {
		t.Errorf("the attachment does not say what is left out")
	}
	if end := strings.TrimSpace(string(file)); !strings.HasSuffix(end, "after big") {
		t.Errorf("the attachment does not end with the agent's last words: …%q", end[max(0, len(end)-40):])
	}
	if last := got.Msgs[len(got.Msgs)-1]; !strings.Contains(last.Content, "the answer is 12.0 MiB: its start and its end are attached as answer.md.") {
		t.Errorf("the last message does not say what is attached: %q", last.Content)
	}
	w.Discord.Post(thread, alice, "and now?")
	got = w.awaitAnswers(thread, 2)[1]
	if !strings.Contains(got.Text, "You said: and now?") {
		t.Fatalf("the message after the big answer got %q", got.Text)
	}
}
