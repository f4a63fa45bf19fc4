package slack_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"acpbroker/chat/slack"
	"acpbroker/internal/fakeslack"
)

// filesIn are the files the app shared in the conversation's thread, by
// name.
func (h *harness) filesIn(c conv) map[string][]byte {
	out := map[string][]byte{}
	for _, f := range h.srv.Files() {
		if f.Channel == c.channel && f.ThreadTS == c.ts && f.User == h.srv.Bot().UserID {
			out[f.Name] = f.Data
		}
	}
	return out
}

// A long answer is split into messages of at most 3,900 characters, each
// in sections of at most Slack's 3,000, within its 50 blocks; a code
// block open at a cut is closed there and opened again.
func TestShow_LongAnswersSplitWithoutBreakingCodeBlocks(t *testing.T) {
	h := newHarness(t, setup{})
	c := h.mention(h.alice, "code 200")
	msgs := h.answer(c, "✅")
	if len(msgs) < 3 {
		t.Fatalf("a 10,000-character answer came in %d message(s)", len(msgs))
	}
	lines := 0
	for i, m := range msgs {
		if len(m.Blocks) > 50 {
			t.Fatalf("message %d has %d blocks", i, len(m.Blocks))
		}
		for _, raw := range m.Blocks {
			var b struct {
				Type string `json:"type"`
				Text struct {
					Text string `json:"text"`
				} `json:"text"`
			}
			json.Unmarshal(raw, &b)
			if n := utf8.RuneCountInString(b.Text.Text); n > 3000 {
				t.Fatalf("message %d has a section of %d characters", i, n)
			}
			if fences := strings.Count(b.Text.Text, "```"); fences%2 != 0 {
				t.Fatalf("message %d leaves a code block open in a section:\n%s", i, b.Text.Text)
			}
		}
		if i > 0 && i < len(msgs)-1 && !strings.HasPrefix(text(m), "```") {
			t.Fatalf("message %d does not open the code block again: %.40q", i, text(m))
		}
		lines += strings.Count(text(m), "of the generated program")
	}
	if lines != 200 {
		t.Fatalf("%d of 200 code lines shown", lines)
	}
}

// An answer longer than max_answer_messages is attached in full when the
// turn ends, through files.getUploadURLExternal and
// files.completeUploadExternal into the thread (never the retired
// files.upload); one larger than max_file_bytes goes in parts, in order,
// cut at line breaks, the footer on the last message.
func TestShow_AnswerPastTheMessageLimitIsAttachedInParts(t *testing.T) {
	h := newHarness(t, setup{slack: slack.Config{MaxMessages: 2, MaxFileBytes: 4 << 10}})
	c := h.mention(h.alice, "code 200")
	msgs := h.answer(c, "✅")
	var files map[string][]byte
	// The files follow the message that names them.
	h.srv.Await("the parts shared", func() bool {
		files = h.filesIn(c)
		last := text(msgs[len(msgs)-1])
		return strings.Contains(last, fmt.Sprintf("this is answer-%d.md.", len(files)))
	})
	var all []byte
	for i := 1; ; i++ {
		part, ok := files[fmt.Sprintf("answer-%d.md", i)]
		if !ok {
			if i < 3 {
				t.Fatalf("attachments %v, want answer-1.md … answer-N.md", files)
			}
			if last := text(msgs[len(msgs)-1]); !strings.Contains(last, fmt.Sprintf("attached in %d parts; this is answer-%d.md.", i-1, i-1)) {
				t.Fatalf("the last message reads %q", last)
			}
			break
		}
		if len(part) > 4<<10 {
			t.Errorf("answer-%d.md has %d bytes, over the 4 KiB limit", i, len(part))
		}
		all = append(all, part...)
	}
	if n := bytes.Count(all, []byte("of the generated program")); n != 200 {
		t.Fatalf("the attachments hold %d of the 200 lines", n)
	}
	if n := len(h.srv.CallsTo("files.upload")); n != 0 {
		t.Fatalf("files.upload was called %d times", n)
	}
	if n := len(h.srv.CallsTo("files.completeUploadExternal")); n < 3 {
		t.Fatalf("files.completeUploadExternal was called %d times", n)
	}
}

// Files the agent shows are shared in the thread when the turn ends.
func TestShow_FilesTheAgentShowsAreShared(t *testing.T) {
	h := newHarness(t, setup{})
	c := h.mention(h.alice, "resource-link notes.txt")
	msgs := h.answer(c, "✅")
	h.srv.Await("the file shared", func() bool { return len(h.filesIn(c)) > 0 })
	if got := h.filesIn(c); len(got) != 1 || string(got["notes.txt"]) != "notes from the agent\n" {
		t.Fatalf("files shared: %v", got)
	}
	if !strings.Contains(joined(msgs), "📎 `notes.txt`") {
		t.Fatalf("the answer does not name the file: %q", joined(msgs))
	}
}

// Files shared with a mention (or in the thread) reach the agent: text
// inlined, images as images, downloaded with the bot token; a file over
// max_text_bytes or max_image_bytes, or of another kind, refuses the
// whole message with the reason, answered in a thread of it, and
// nothing reaches the agent.
func TestShow_FilesSharedReachTheAgent(t *testing.T) {
	h := newHarness(t, setup{slack: slack.Config{MaxTextBytes: 100 << 10, MaxImageBytes: 1 << 10}})
	ts, _ := h.srv.ShareFile(h.channel, h.alice.ID, fakeslack.SharedFile{Name: "notes.md", Data: []byte("remember the milk"),
		Comment: h.srv.Bot().Mention() + " look at this"})
	c := conv{channel: h.channel, ts: ts, key: "slack:" + h.channel + "/" + ts}
	got := joined(h.answer(c, "✅"))
	if !strings.Contains(got, "Attached file notes.md") || !strings.Contains(got, "remember the milk") {
		t.Fatalf("answer = %q", got)
	}
	h.srv.ShareFile(h.channel, h.alice.ID, fakeslack.SharedFile{Name: "shot.png", Data: []byte("\x89PNG fake image"),
		Comment: "and this", ThreadTS: ts})
	h.srv.Await("the image answered", func() bool { return strings.Contains(joined(h.botMessages(c)), "(and 1 image(s))") })

	huge, _ := h.srv.ShareFile(h.channel, h.alice.ID, fakeslack.SharedFile{Name: "dump.txt", Data: bytes.Repeat([]byte("x"), 150<<10),
		Comment: h.srv.Bot().Mention() + " read this"})
	photo, _ := h.srv.ShareFile(h.channel, h.alice.ID, fakeslack.SharedFile{Name: "photo.png", Data: bytes.Repeat([]byte("p"), 2<<10),
		Comment: h.srv.Bot().Mention() + " what is this"})
	binary, _ := h.srv.ShareFile(h.channel, h.alice.ID, fakeslack.SharedFile{Name: "tool.exe", Data: []byte("MZ"),
		Comment: h.srv.Bot().Mention() + " run this"})
	for ts, reason := range map[string]string{
		huge:   `"dump.txt" is 150 KiB; the limit for text files is 100 KiB`,
		photo:  `"photo.png" is 2 KiB; the limit for images is 1 KiB`,
		binary: `I can't pass "tool.exe" (application/octet-stream) to the agent`,
	} {
		refused := conv{channel: h.channel, ts: ts}
		h.said(refused, reason)
		if h.engine.Status("slack:"+h.channel+"/"+ts).SessionID != "" {
			t.Fatalf("a refused message reached the agent")
		}
	}
	if n := h.client.Stats().RefusedAttachments; n != 3 {
		t.Fatalf("refused attachments = %d", n)
	}
}

// A shared file whose url_private is not on Slack's file host (a Web API
// method's URL on the same host, the same reached through "..", another
// host) is never fetched with the bot token: its author is told in
// words and the rest of the message reaches the agent. Fetched, the
// first would have had the bot post @channel.
func TestShow_FilesOnlyFromTheFileHost(t *testing.T) {
	h := newHarness(t, setup{})
	post := h.srv.APIURL() + "chat.postMessage?channel=" + h.channel + "&text=%3C%21channel%3E"
	ts, _ := h.srv.ShareFile(h.channel, h.alice.ID, fakeslack.SharedFile{Name: "notes.md", Data: []byte("x"), URL: post,
		Comment: h.srv.Bot().Mention() + " look at this"})
	c := conv{channel: h.channel, ts: ts, key: "slack:" + h.channel + "/" + ts}
	h.answer(c, "You said: look at this")
	noChannelPing := func() {
		t.Helper()
		for _, call := range h.srv.CallsTo("chat.postMessage") {
			if strings.Contains(call.Args["text"], "<!channel>") {
				t.Fatalf("the bot posted %q", call.Args["text"])
			}
		}
	}
	noChannelPing()
	h.said(c, `I did not pass "notes.md" to the agent: it is not on Slack's file host. The rest of your message was sent.`)

	for i, u := range []string{
		h.srv.FilesURL() + "T1-F1/../../api/chat.postMessage?channel=" + h.channel + "&text=%3C%21channel%3E",
		"https://files.example.com/files-pri/T1-F1/notes.md",
		strings.Replace(h.srv.FilesURL(), "http://", "https://", 1) + "T1-F1/notes.md",
	} {
		name := fmt.Sprintf("more-%d.md", i)
		h.srv.ShareFile(h.channel, h.alice.ID, fakeslack.SharedFile{Name: name, Data: []byte("x"), URL: u,
			Comment: fmt.Sprintf("and %d", i), ThreadTS: ts})
		h.said(c, fmt.Sprintf("I did not pass %q to the agent", name))
		h.answer(c, fmt.Sprintf("You said: and %d", i))
	}
	noChannelPing()
	if n := h.client.Stats().RefusedAttachments; n != 4 {
		t.Fatalf("refused attachments = %d, want 4", n)
	}
}
