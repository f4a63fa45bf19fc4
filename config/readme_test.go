package config

import (
	"flag"
	"os"
	"strings"
	"testing"

	"acpbroker/policy"
)

var updateReadme = flag.Bool("update-readme", false, "rewrite README.md's key tables from the key table")

// README.md's tables of keys are the key table's: each key is defined
// once (keys.go), and the README says what it says. Run with
// -update-readme to rewrite them.
func TestReadme_KeyTablesAreTheKeyTable(t *testing.T) {
	const path = "../README.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	want := got
	for _, prefix := range []string{"", "agent.", "discord.", "slack."} {
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
	t.Errorf("README.md's key tables differ from keys.go; run go test ./config -run TestReadme -update-readme")
}

// The README's example of permission rules loads, and decides as the
// README says: its rules in order, first match wins, no match asks, and
// the line the thread shows names the rule as written there.
func TestReadme_PermissionRulesExampleDecidesAsDocumented(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(b), "```toml\n[[agents.reviewer.permissions]]\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("README.md has no example of permission rules")
	}
	c, err := loadText(t, "[agents.reviewer]\ncommand = \""+fakeAgent+"\"\n[[agents.reviewer.permissions]]\n"+block)
	if err != nil {
		t.Fatalf("the example: %v\n%s", err, block)
	}
	rules := c.Profiles["reviewer"].Permissions
	for _, tc := range []struct {
		kind, title string
		n           int
		action      policy.Action
	}{
		{"read", "Read main.go", 1, policy.Allow},
		{"execute", "Run git status", 2, policy.Ask},
		{"execute", "Run make", 3, policy.Deny},
		{"edit", "Edit main.go", 3, policy.Deny},
		{"fetch", "Fetch https://example.com", 0, policy.Ask},
		{"", "Run git status", 0, policy.Ask},
	} {
		r, n := policy.Match(rules, tc.kind, tc.title)
		if n != tc.n || r.Action != tc.action {
			t.Errorf("%s %q: rule %d %s, want rule %d %s", tc.kind, tc.title, n, r.Action, tc.n, tc.action)
		}
	}
	line := "`Allowed “Read main.go” by rule 1 (" + rules[0].String() + ").`"
	if !strings.Contains(string(b), line) {
		t.Errorf("README.md does not show the line %s", line)
	}
	if !strings.Contains(strings.Join(strings.Fields(string(b)), " "), `agents.reviewer.permissions[1].title = "(" is not a regular expression`) {
		t.Error("README.md's example of a bad rule is not one")
	}
	_, err = loadText(t, "[agents.reviewer]\ncommand = \""+fakeAgent+"\"\n[[agents.reviewer.permissions]]\nkind = \"read\"\naction = \"allow\"\n[[agents.reviewer.permissions]]\ntitle = \"(\"\naction = \"deny\"\n")
	if err == nil || !strings.Contains(err.Error(), `agents.reviewer.permissions[1].title = "(" is not a regular expression`) {
		t.Errorf("a bad second rule: %v", err)
	}
}
