package faults

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"acpbroker/internal/fakediscord"
)

// An attachment over the limits is refused, not choked on: a 100 MB text
// file (discord.max_text_bytes = 1 MiB) or a 9 MiB image (the 8 MiB
// default) gets a reply naming the file, its size and the limit, and ❌;
// neither is downloaded, no thread is opened and nothing reaches an
// agent; the broker keeps running and answers the next messages, in the
// channel and in a thread, where a small file is read as usual.
func TestAttachment_OversizeFilesAreRefusedWithTheReason(t *testing.T) {
	w := newWorld(t, setup{conf: settings{"discord.max_text_bytes": 1 << 20}})
	b := w.start()
	text := bytes.Repeat([]byte("0123456789abcdef\n"), 100_000_000/17+1)
	image := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 9<<20)...)
	refusals := map[string]string{
		w.Srv.SendMessage(w.Channel, alice, w.Srv.Bot().Mention()+" summarise this log",
			fakediscord.WithAttachment("dump.txt", "text/plain", text)): `"dump.txt" is 95.4 MiB; the limit for text files is 1.0 MiB.`,
		w.Srv.SendMessage(w.Channel, alice, w.Srv.Bot().Mention()+" what is in this picture",
			fakediscord.WithAttachment("screen.png", "image/png", image)): `"screen.png" is 9.0 MiB; the limit for images is 8.0 MiB.`,
	}
	for id, reason := range refusals {
		awaitRefusal(t, w, w.Channel, id, reason)
		if ch, ok := w.Srv.Channel(id); ok && ch.IsThread() {
			t.Errorf("a thread was opened for a refused message")
		}
	}
	if b.Exited() {
		t.Fatalf("the broker exited with status %d after the oversize attachments; log:\n%s", b.ExitCode(), b.Log.Tail(16<<10))
	}

	thread := w.mention(alice, "hello")
	if got := w.awaitAnswers(thread, 1)[0]; !strings.Contains(got.Text, "You said: hello") {
		t.Fatalf("the next mention got %q", got.Text)
	}
	inThread := w.Srv.SendMessage(thread, alice, "and this one", fakediscord.WithAttachment("dump.txt", "text/plain", text))
	awaitRefusal(t, w, thread, inThread, `"dump.txt" is 95.4 MiB; the limit for text files is 1.0 MiB.`)
	w.Srv.SendMessage(thread, alice, "never mind, this one", fakediscord.WithAttachment("notes.txt", "text/plain", []byte("a small note\n")))
	got := w.awaitAnswers(thread, 2)
	if !strings.Contains(got[1].Text, "You said: never mind, this one") || !strings.Contains(got[1].Text, "a small note") {
		t.Fatalf("the message after the refusal got %q", got[1].Text)
	}
	if d := w.Srv.Downloads(); !slices.Equal(d, []string{"notes.txt"}) {
		t.Errorf("the broker downloaded %v, want only the small file", d)
	}
	if n := len(w.Srv.Threads()); n != 1 {
		t.Errorf("%d threads, want 1", n)
	}
	b.awaitMetric(`acp_broker_chat_refused_attachments_total{platform="discord"}`, func(v float64) bool { return v == 3 })
	b.awaitMetric(`acp_broker_turns_total{outcome="done"}`, func(v float64) bool { return v == 2 })
}

// awaitRefusal waits for the bot's reply to a message that says reason,
// and for ❌ on the message.
func awaitRefusal(t *testing.T, w *world, channel, messageID, reason string) {
	t.Helper()
	w.Srv.Await("the refusal of "+messageID, func() bool {
		for _, m := range w.Srv.Messages(channel) {
			if m.Author.ID == w.Srv.Bot().ID && m.ReferenceID == messageID && strings.Contains(m.Content, reason) {
				return true
			}
		}
		return false
	})
	w.awaitReaction(channel, messageID, "❌")
}
