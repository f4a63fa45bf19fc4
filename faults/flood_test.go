package faults

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// An agent that asks for line 2 of a 40 GiB sparse file (whose first
// line never ends) is answered with an error that says the line is past
// what a read looks through, not after reading the file; 64 such reads
// at once are each answered; and the thread goes on.
func TestFlood_HugeSparseFileReadsAreEachAnsweredWithAnError(t *testing.T) {
	w := newWorld(t, setup{})
	w.start()
	for i, n := range []int{1, 64} {
		thread := w.mention(alice, fmt.Sprintf("fs-sparse 40 2 %d", n))
		got := w.awaitAnswers(thread, 1)[0]
		want := fmt.Sprintf("%d of %d answered, %d errors, in ", n, n, n)
		if !strings.Contains(got.Text, want) || !strings.Contains(got.Text, "-32602: ") ||
			!strings.Contains(got.Text, "line 2 is not within the first 268435456 bytes of the file") {
			t.Fatalf("reads %d (%d at once): %q, want %q and the reason", i, n, got.Text, want)
		}
		t.Logf("%d at once: %s", n, strings.SplitN(got.Text, ";", 2)[0])
		w.Discord.Post(thread, alice, "still there?")
		if got := w.awaitAnswers(thread, 2)[1]; !strings.Contains(got.Text, "You said: still there?") {
			t.Fatalf("the message after the reads got %q", got.Text)
		}
	}
}

// A request whose params are nested 100,000 deep is answered -32602 with
// its id, which the agent waits for, and the turn ends as usual.
func TestFlood_ARequestNestedTooDeepIsAnswered(t *testing.T) {
	w := newWorld(t, setup{})
	b := w.start()
	thread := w.mention(alice, "deep-request 100000")
	got := w.awaitAnswers(thread, 1)[0]
	if !strings.Contains(got.Text, "answered: error -32602: invalid params: fs/read_text_file: ") || !strings.Contains(got.Text, "exceeded max depth") {
		t.Fatalf("the deep request got %q", got.Text)
	}
	b.awaitMetric("acp_broker_acp_invalid_requests_total", func(v float64) bool { return v == 1 })
}

// An agent that floods a turn with answer and with updates for sessions
// that do not exist: the turn ends with the start and the end of the
// answer and a line saying how much is left out, the updates are dropped
// and counted, and the next prompt is answered.
func TestFlood_ATurnFloodedEndsWithANoteAndTheThreadGoesOn(t *testing.T) {
	w := newWorld(t, setup{})
	b := w.start()
	thread := w.mention(alice, "flood-answer 48 256")
	got := w.awaitAnswers(thread, 1)[0]
	if !strings.HasPrefix(got.Footer, "-# ✅ done") || !strings.Contains(got.Text, "the answer is 48.0 MiB: its start and its end are attached as answer.md.") {
		t.Fatalf("the flooded turn ended %q, …%q", got.Footer, got.Text[max(0, len(got.Text)-300):])
	}
	var file string
	for _, m := range got.Msgs {
		for _, a := range m.Attachments {
			file += string(a.Data)
		}
	}
	if !strings.HasPrefix(file, "BEGIN\n") || !strings.HasSuffix(file, "\nEND") || !strings.Contains(file, "MiB of the answer left out here") || len(file) > 3<<20 {
		t.Fatalf("the answer attached is %d bytes, from %q to %q", len(file), file[:min(40, len(file))], file[max(0, len(file)-40):])
	}
	w.Discord.Post(thread, alice, "flood-unknown 16 1024 12")
	if got := w.awaitAnswers(thread, 2)[1]; !strings.Contains(got.Text, "flooded") {
		t.Fatalf("the turn flooding unknown sessions got %q", got.Text)
	}
	b.awaitMetric("acp_broker_acp_early_updates_dropped_total", func(v float64) bool { return v == 16*12 })
	begin := time.Now()
	w.Discord.Post(thread, alice, "and now?")
	if got := w.awaitAnswers(thread, 3)[2]; !strings.Contains(got.Text, "You said: and now?") {
		t.Fatalf("the message after the floods got %q", got.Text)
	}
	t.Logf("the prompt after the floods was answered in %s", time.Since(begin).Round(time.Millisecond))
}
