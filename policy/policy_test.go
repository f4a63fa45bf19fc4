package policy_test

import (
	"strings"
	"testing"

	"acpbroker/policy"

	"github.com/spf13/viper"
)

// rulesFrom parses the [[agent.permissions]] tables of a TOML text as the
// broker's configuration reader gives them.
func rulesFrom(t *testing.T, toml string) ([]policy.Rule, []error) {
	t.Helper()
	v := viper.New()
	v.SetConfigType("toml")
	if err := v.ReadConfig(strings.NewReader(toml)); err != nil {
		t.Fatal(err)
	}
	return policy.Parse(v.Get("agent.permissions"), "agent.permissions")
}

func TestMatch_FirstMatchingRuleWinsAndNoMatchAsks(t *testing.T) {
	rules, errs := rulesFrom(t, `
[[agent.permissions]]
title = 'rm -rf'
action = "deny"

[[agent.permissions]]
kind = ["read", "search"]
action = "allow"

[[agent.permissions]]
kind = "execute"
title = '^Run (git|go) '
action = "allow"

[[agent.permissions]]
kind = "execute"
action = "ask"
`)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	cases := []struct {
		kind, title string
		action      policy.Action
		n           int
	}{
		{"read", "Read main.go", policy.Allow, 2},
		{"search", "Find *.go", policy.Allow, 2},
		{"read", "Read x; rm -rf /", policy.Deny, 1}, // an earlier rule wins
		{"execute", "Run git status", policy.Allow, 3},
		{"execute", "Run go test ./...", policy.Allow, 3},
		{"execute", "Run make", policy.Ask, 4},
		{"execute", "Please Run git status", policy.Ask, 4}, // anchored
		{"edit", "Edit main.go", policy.Ask, 0},             // no rule
		{"", "Read main.go", policy.Ask, 0},                 // no kind: only kind-less rules
		{"switch_mode", "Read main.go", policy.Ask, 0},      // an unknown kind likewise
		{"", "rm -rf build", policy.Deny, 1},
	}
	for _, c := range cases {
		r, n := policy.Match(rules, c.kind, c.title)
		if r.Action != c.action || n != c.n {
			t.Errorf("kind %q title %q: %s by rule %d, want %s by rule %d", c.kind, c.title, r.Action, n, c.action, c.n)
		}
	}
}

func TestMatch_ARuleWithNeitherKindNorTitleMatchesEverything(t *testing.T) {
	rules, errs := rulesFrom(t, `
[[agent.permissions]]
kind = "read"
action = "allow"
[[agent.permissions]]
action = "deny"
`)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, kind := range append(policy.Kinds, "", "unheard_of") {
		want := policy.Deny
		if kind == "read" {
			want = policy.Allow
		}
		if r, _ := policy.Match(rules, kind, "anything"); r.Action != want {
			t.Errorf("kind %q: %s, want %s", kind, r.Action, want)
		}
	}
	if s := rules[1].String(); s != "any tool call" {
		t.Errorf("the catch-all says %q", s)
	}
}

func TestRule_StringSaysWhatItMatches(t *testing.T) {
	rules, errs := rulesFrom(t, `
[[agent.permissions]]
kind = ["read", "search"]
title = '^Read '
action = "allow"
[[agent.permissions]]
kind = "read"
action = "allow"
`)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for i, want := range []string{`kind read or search, title "^Read "`, `kind read`} {
		if got := rules[i].String(); got != want {
			t.Errorf("rule %d says %q, want %q", i+1, got, want)
		}
	}
}

func TestParse_ErrorsNameTheIndexAndKey(t *testing.T) {
	_, errs := rulesFrom(t, `
[[agent.permissions]]
kind = "read"
action = "allow"

[[agent.permissions]]
kind = "write"
action = "allow"

[[agent.permissions]]
title = "("
action = "deny"

[[agent.permissions]]
kind = "read"

[[agent.permissions]]
kind = "read"
action = "maybe"
colour = "red"

[[agent.permissions]]
kind = []
action = "allow"

[[agent.permissions]]
kind = ["read", 3]
title = 7
action = "allow"
`)
	want := []string{
		`agent.permissions[1].kind = "write" is not a tool kind (want read, edit, delete, move, search, execute, think, fetch, other)`,
		`agent.permissions[2].title = "(" is not a regular expression: error parsing regexp: missing closing ): ` + "`(`",
		`agent.permissions[3].action is required: allow, deny or ask`,
		`agent.permissions[4].action = "maybe" is not allow, deny or ask`,
		`agent.permissions[4].colour is not a rule key (want kind, title and action)`,
		`agent.permissions[5].kind = [] names no kind`,
		`agent.permissions[6].kind = [read 3]: each kind must be a string, not int64`,
		`agent.permissions[6].title must be a string (a regular expression), not int64`,
	}
	if len(errs) != len(want) {
		t.Fatalf("%d errors, want %d:\n%v", len(errs), len(want), errs)
	}
	for i, w := range want {
		if !strings.HasPrefix(errs[i].Error(), w) {
			t.Errorf("error %d:\n got %s\nwant %s", i, errs[i], w)
		}
	}
}

func TestParse_NothingOrNotAnArray(t *testing.T) {
	if rules, errs := policy.Parse(nil, "agent.permissions"); rules != nil || errs != nil {
		t.Fatalf("no rules configured: %v %v", rules, errs)
	}
	_, errs := rulesFrom(t, "[agent]\npermissions = \"allow\"\n")
	if len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), "agent.permissions must be an array of tables ([[agent.permissions]]") {
		t.Fatalf("errors = %v", errs)
	}
	_, errs = rulesFrom(t, "[agent]\npermissions = [1]\n")
	if len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), "agent.permissions[0] must be a table") {
		t.Fatalf("errors = %v", errs)
	}
	rules, errs := policy.Parse([]map[string]any{{"kind": []string{"edit"}, "action": "deny"}}, "p")
	if len(errs) > 0 || len(rules) != 1 || rules[0].Action != policy.Deny || rules[0].Kinds[0] != "edit" {
		t.Fatalf("rules = %+v, errors = %v", rules, errs)
	}
}
