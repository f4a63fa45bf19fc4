package main

import (
	"strings"
	"testing"
	"time"
)

// The console prints what the agent shows besides text: diffs as diff
// blocks, images by size, a text file it sends, a file outside its
// directory by path, never read; its usage with the outcome and in
// /status, and its title; an update of an unknown kind is passed over.
func TestRun_ConsoleShowsDiffsFilesUsageAndTitles(t *testing.T) {
	b := startBroker(t, writeConfig(t, ""))
	steps := []struct{ say, want string }{
		{"diff", "✅ `Edit files` done\n```diff\n--- a/main.go\n+++ b/main.go\n"},
		{"", "+\tfmt.Println(\"hello, world\")\n"},
		{"", "--- /dev/null\n+++ b/NOTES.md\n"},
		{"image", "Here is a picture:\n📎 `image-1.png` (70 B)\nThat was it.\n"},
		{"", "[file image-1.png, image/png, 70 B: not shown on the console]\n"},
		{"resource-link /etc/passwd", "🔗 `/etc/passwd` (outside the session's directory; not attached)\n"},
		{"resource", "📎 `config.toml` (21 B)\n"},
		{"", "[file config.toml:]\n[server]\nport = 8080\n[end of config.toml]\n"},
		{"usage", "✅ done in "},
		{"", " · 45k/200k tokens · 3.2k this turn · $0.12\n"},
		{"/status", "Context: 45k/200k tokens · $0.12"},
		{"title Fix the build", "[title] Fix the build\n"},
		{"unknown-update", "before after\n✅ done in "},
	}
	for _, s := range steps {
		from := b.out.mark()
		if s.say != "" {
			b.say(t, s.say)
		} else {
			from = 0
		}
		b.out.waitFrom(t, from, s.want, 20*time.Second)
	}
	if strings.Contains(b.out.String(), "root:") {
		t.Fatal("the console printed /etc/passwd")
	}
}
