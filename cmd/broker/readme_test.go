package main

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var updateReadme = flag.Bool("update-readme", false, "rewrite README.md's key tables from the key table")

// README.md's tables of keys are the key table's: each key is defined
// once (keys.go), and the README says what it says. Run with
// -update-readme to rewrite them.
func TestReadme_KeyTablesAreTheKeyTable(t *testing.T) {
	const path = "../../README.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	want := got
	for _, prefix := range []string{"", "agent.", "discord."} {
		open, end := "<!-- keys "+strings.TrimSuffix(prefix, ".")+" -->\n", "<!-- /keys -->\n"
		if prefix == "" {
			open = "<!-- keys -->\n"
		}
		i := strings.Index(want, open)
		j := strings.Index(want[i+len(open):], end)
		if i < 0 || j < 0 {
			t.Fatalf("README.md has no %q … %q markers", open, end)
		}
		want = want[:i+len(open)] + keyTable(prefix) + want[i+len(open)+j:]
	}
	if got == want {
		return
	}
	if *updateReadme {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("README.md's key tables differ from keys.go; run go test ./cmd/broker -run TestReadme -update-readme")
}
