package main

import (
	"strings"
	"testing"
	"time"
)

// The console prints what the agent shows besides text: diffs as diff
// blocks, images by size, files by path, its usage with the outcome and
// in /status, and its title; an update of an unknown kind is passed over.
func TestRun_ConsoleShowsDiffsFilesUsageAndTitles(t *testing.T) {
	b := startBroker(t, writeConfig(t, ""))
	steps := []struct{ say, want string }{
		{"diff", "[tool] Edit files: done\n```diff\n--- a/main.go\n+++ b/main.go\n"},
		{"", "+\tfmt.Println(\"hello, world\")\n"},
		{"", "--- /dev/null\n+++ b/NOTES.md\n"},
		{"image", "agent> Here is a picture:\n[image, 70 bytes]\nagent> That was it."},
		{"resource-link /etc/passwd", "[file] file:///etc/passwd\n"},
		{"resource", "[file] file:///project/config.toml (21 bytes)\n"},
		{"usage", "[done in "},
		{"", " · 45k/200k tokens · 3.2k this turn · $0.12]\n"},
		{"/status", ", context 45k/200k tokens · $0.12]\n"},
		{"title Fix the build", "[title] Fix the build\n"},
		{"unknown-update", "agent> before after\n[done in "},
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
