package discord_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"acpbroker/chat/discord"
	"acpbroker/internal/fakediscord"
)

// attachments are the files on the bot's messages, by name.
func attachments(msgs []fakediscord.Message) map[string][]byte {
	out := map[string][]byte{}
	for _, m := range msgs {
		for _, a := range m.Attachments {
			out[a.Filename] = a.Data
		}
	}
	return out
}

// A short diff is shown in the answer as a diff block, a new file as all
// additions; a diff too long for a message is attached as <name>.diff on
// the last message, which keeps the footer.
func TestShow_DiffsInlineAndAttached(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "diff")
	msgs := h.answer(thread, "✅")
	text := joined(msgs)
	for _, want := range []string{"✅ `Edit files` done\n```diff\n--- a/main.go\n+++ b/main.go\n@@ -3,5 +3,5 @@\n",
		"-\tfmt.Println(\"hello\")\n+\tfmt.Println(\"hello, world\")\n", "--- /dev/null\n+++ b/NOTES.md\n@@ -0,0 +1,2 @@\n+# Notes\n+first\n```"} {
		if !strings.Contains(text, want) {
			t.Fatalf("answer lacks %q:\n%s", want, text)
		}
	}
	if a := attachments(msgs); len(a) != 0 {
		t.Fatalf("a short diff was attached: %v", a)
	}

	thread = h.mention(alice, "diff big 400")
	msgs = h.answer(thread, "✅")
	last := msgs[len(msgs)-1]
	if len(last.Attachments) != 1 || last.Attachments[0].Filename != "big.txt.diff" {
		t.Fatalf("last message %q attaches %+v", last.Content, last.Attachments)
	}
	diff := string(last.Attachments[0].Data)
	if !strings.HasPrefix(diff, "--- a/big.txt\n+++ b/big.txt\n@@ -1,400 +1,400 @@\n-line 1 of the old text\n") ||
		strings.Count(diff, "\n+line ") != 400 || strings.Count(diff, "\n-line ") != 400 {
		t.Fatalf("attached diff:\n%.300s", diff)
	}
	if text := joined(msgs); !strings.Contains(text, "📎 `big.txt.diff` (+400 −400 lines)") || strings.Contains(text, "```diff") {
		t.Fatalf("answer:\n%s", text)
	}
	if !strings.Contains(last.Content, "-# 📎 big.txt.diff\n-# ✅ done in") {
		t.Fatalf("last message: %q", last.Content)
	}
}

// Files the agent shows are attached when the turn ends: a file it links
// inside the session's directory, an inline image, an embedded resource
// of a tool call.
func TestShow_FilesInsideTheSessionAreAttached(t *testing.T) {
	h := newHarness(t, setup{})
	for prompt, want := range map[string]struct {
		name string
		data []byte
		line string
	}{
		"resource-link notes.txt": {"notes.txt", []byte("notes from the agent\n"), "📎 `notes.txt`"},
		"image":                   {"image-1.png", []byte("\x89PNG"), "📎 `image-1.png` ("},
		"resource":                {"config.toml", []byte("[server]\nport = 8080\n"), "✅ `Read config.toml` done\n📎 `config.toml` (21 B)"},
	} {
		thread := h.mention(alice, prompt)
		msgs := h.answer(thread, "✅")
		got := attachments(msgs)
		if len(got) != 1 || !bytes.HasPrefix(got[want.name], want.data) {
			t.Fatalf("%s: attachments %v, want %s", prompt, got, want.name)
		}
		if text := joined(msgs); !strings.Contains(text, want.line) {
			t.Fatalf("%s: answer lacks %q:\n%s", prompt, want.line, text)
		}
	}
}

// A file outside the session's directory is shown by its path and never
// read: /etc/passwd by name, and through a symbolic link inside; a named
// pipe inside is refused at once instead of being waited on.
func TestShow_FilesOutsideOrSpecialAreNotRead(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "resource-link /etc/passwd")
	msgs := h.answer(thread, "✅")
	if a := attachments(msgs); len(a) != 0 {
		t.Fatalf("attached %v", a)
	}
	if text := joined(msgs); !strings.Contains(text, "🔗 `/etc/passwd` (outside the session's directory; not attached)") || strings.Contains(text, "root:") {
		t.Fatalf("answer:\n%s", text)
	}

	h.srv.SendMessage(thread, alice, "run /bin/ln -s /etc/passwd link")
	h.srv.SendMessage(thread, alice, "run /usr/bin/mkfifo pipe")
	h.srv.SendMessage(thread, alice, "resource-link link")
	start := time.Now()
	h.srv.SendMessage(thread, alice, "resource-link pipe")
	var answers []string
	h.srv.Await("five answers", func() bool {
		answers = nil
		for _, m := range h.botMessages(thread) {
			if finalFooter(m.Content) {
				answers = append(answers, m.Content)
			}
		}
		return len(answers) == 5
	})
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the named pipe took %s", d)
	}
	if a := attachments(h.botMessages(thread)); len(a) != 0 {
		t.Fatalf("attached %v; answers:\n%s", a, strings.Join(answers, "\n---\n"))
	}
	// Answers of consecutive turns may be posted out of order.
	all := strings.Join(answers, "\n")
	for _, want := range []string{"`link` not attached: outside the session's directory", "`pipe` not attached: not a regular file"} {
		if !strings.Contains(all, want) {
			t.Fatalf("no answer says %q:\n%s", want, all)
		}
	}
}

// The agent's usage is in the footer, after how the turn ended, and in
// /status.
func TestShow_UsageInTheFooterAndStatus(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "usage")
	msgs := h.answer(thread, "✅")
	last := msgs[len(msgs)-1].Content
	if footer := last[strings.LastIndex(last, "\n")+1:]; !strings.HasPrefix(footer, "-# ✅ done in ") ||
		!strings.HasSuffix(footer, " · 45k/200k tokens · 3.2k this turn · $0.12") {
		t.Fatalf("footer %q", footer)
	}
	r := h.response(h.srv.SlashCommand(thread, alice.ID, "status", nil))
	if !strings.Contains(r.Content, "**Context**: 45k/200k tokens · $0.12") {
		t.Fatalf("/status answered %q", r.Content)
	}
}

// The agent's title renames the thread at once, then at most once per
// interval: titles given meanwhile wait, and the newest wins.
func TestShow_TitleRenamesTheThreadAtMostOncePerInterval(t *testing.T) {
	const interval = 3 * time.Second
	h := newHarness(t, setup{discord: discord.Config{RetitleInterval: interval}})
	thread := h.mention(alice, "title Fix the\tbuild\nnow")
	h.srv.Await("renamed", func() bool { ch, _ := h.srv.Channel(thread); return ch.Name == "Fix the build now" })
	h.answer(thread, "✅")
	h.srv.SendMessage(thread, alice, "title Second")
	h.srv.SendMessage(thread, alice, "title Third "+strings.Repeat("long ", 30))
	h.srv.Await("renamed again", func() bool { ch, _ := h.srv.Channel(thread); return strings.HasPrefix(ch.Name, "Third long") })
	ch, _ := h.srv.Channel(thread)
	if n := len([]rune(ch.Name)); n != 100 || !strings.HasSuffix(ch.Name, "…") {
		t.Fatalf("name %q has %d characters", ch.Name, n)
	}
	reqs := h.srv.RequestsTo(fakediscord.RouteModifyChannel)
	if len(reqs) != 2 || reqs[1].At.Sub(reqs[0].At) < interval-50*time.Millisecond {
		t.Fatalf("%d renames, %v apart; want 2, at least %s apart", len(reqs), reqs[len(reqs)-1].At.Sub(reqs[0].At), interval)
	}
	for deadline := time.Now().Add(2*interval + 5*time.Second); h.client.Stats().Retitling != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the thread's rename state was kept after the interval")
		}
	}
}

// An update of a kind nobody knows, and a content block of an unknown
// type, are counted and ignored: the turn finishes with the text around
// them.
func TestShow_UnknownUpdateIsCountedAndTheTurnFinishes(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "unknown-update")
	msgs := h.answer(thread, "✅ done")
	if !strings.HasPrefix(msgs[0].Content, "before after\n-# ✅ done in") {
		t.Fatalf("answer %q", msgs[0].Content)
	}
	if s := h.pool.Stats().Conn; s.UnknownUpdates != 1 || s.UnknownContent != 1 {
		t.Fatalf("unknown updates %d, content %d; want 1, 1", s.UnknownUpdates, s.UnknownContent)
	}
}

// A file larger than discord.max_file_bytes is not attached, and the
// answer says so with the limit.
func TestShow_FileOverTheLimitIsNotAttached(t *testing.T) {
	h := newHarness(t, setup{discord: discord.Config{MaxFileBytes: 4 << 10}})
	thread := h.mention(alice, "run /usr/bin/truncate -s 5000 big.txt")
	h.answer(thread, "exit: <nil>")
	h.srv.SendMessage(thread, alice, "resource-link big.txt")
	msgs := h.answer(thread, "`big.txt` not attached: larger than 4.0 KiB")
	if a := attachments(msgs); len(a) != 0 {
		t.Fatalf("attached %v", a)
	}
}

// A symbolic link in the session's directory that names a file there by
// its absolute path is followed: the file is attached.
func TestShow_AbsoluteLinkInsideIsFollowed(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "resource-link notes.txt")
	h.answer(thread, "✅")
	h.srv.SendMessage(thread, alice, "run /bin/sh -c ln${IFS}-s${IFS}$PWD/notes.txt${IFS}abs-link")
	h.answer(thread, "exit: <nil>")
	h.srv.SendMessage(thread, alice, "resource-link abs-link")
	var got map[string][]byte
	h.srv.Await("the linked file attached", func() bool {
		got = attachments(h.botMessages(thread))
		return len(got) == 2
	})
	if string(got["abs-link"]) != "notes from the agent\n" {
		t.Fatalf("attachments %q", got)
	}
}
