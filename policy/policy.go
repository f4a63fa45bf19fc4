// Package policy decides an agent's permission requests by ordered rules
// before anyone is asked.
//
// In the configuration, an agent profile's rules are an array of tables
// ([[agent.permissions]], or [[agents.NAME.permissions]] for a named
// profile), tried in order; the first that matches decides, and a request no rule
// matches is put to a person (or answered as turn.permission_mode says):
//
//	[[agent.permissions]]
//	kind = "read"                # one kind, or a list: ["read", "search"]
//	action = "allow"
//
//	[[agent.permissions]]
//	kind = "execute"
//	title = '^Run (git|go) '      # a Go regular expression
//	action = "ask"
//
//	[[agent.permissions]]
//	title = 'rm -rf'
//	action = "deny"
//
// Each table has these keys, and no others:
//
//   - kind: the tool call's kind, one of read, edit, delete, move, search,
//     execute, think, fetch, other; or a list of them. The tool call
//     matches if its kind is one of them.
//   - title: a Go regular expression (RE2 syntax), matched anywhere in the
//     tool call's title unless anchored with ^ and $.
//   - action: allow, deny or ask. Required.
//
// A rule with both kind and title matches only a tool call that fits both;
// a rule with neither matches every tool call, so it ends the list.
//
// Rules are numbered from 1 for people ("rule 2"): rule N is the table
// agent.permissions[N-1].
//
// The kind and title are the agent's own account of the tool call. A
// rule that allows is as trustworthy as the agent's account: prefer allow
// rules by kind for harmless kinds (read, search, think), and deny or ask
// rules by title for what must not run unseen. A tool call whose kind the
// agent did not give, or gave as something not listed above, matches only
// rules without kind.
package policy

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Action is what a rule does with a request it matches.
type Action string

// Actions.
const (
	Allow Action = "allow"
	Deny  Action = "deny"
	Ask   Action = "ask"
)

// Kinds are the tool call kinds of the Agent Client Protocol, the values
// a rule's kind may take.
var Kinds = []string{"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "other"}

// Rule is one entry of the ordered list. The zero Rule matches nothing
// useful: it has no Action; Parse never returns one.
type Rule struct {
	// Kinds the tool call's kind must be one of; empty: any kind.
	Kinds []string
	// Title must match the tool call's title; nil: any title.
	Title *regexp.Regexp
	// Action is what a match does.
	Action Action
}

// Matches reports whether the rule applies to a tool call of kind and
// title. A kind not in Kinds (including "") matches only rules without
// kinds.
func (r Rule) Matches(kind, title string) bool {
	if len(r.Kinds) > 0 && !slices.Contains(r.Kinds, kind) {
		return false
	}
	return r.Title == nil || r.Title.MatchString(title)
}

// String says what the rule matches, e.g. `kind read`, `kind read or
// search, title "^Read "`, or `any tool call`.
func (r Rule) String() string {
	var parts []string
	if len(r.Kinds) > 0 {
		parts = append(parts, "kind "+strings.Join(r.Kinds, " or "))
	}
	if r.Title != nil {
		parts = append(parts, fmt.Sprintf("title %q", r.Title.String()))
	}
	if len(parts) == 0 {
		return "any tool call"
	}
	return strings.Join(parts, ", ")
}

// Match returns the first of rules that matches a tool call of kind and
// title, and its number counted from 1; with no match, a Rule whose
// Action is Ask and number 0.
func Match(rules []Rule, kind, title string) (Rule, int) {
	for i, r := range rules {
		if r.Matches(kind, title) {
			return r, i + 1
		}
	}
	return Rule{Action: Ask}, 0
}

// Parse reads rules as viper gives a TOML array of tables: a list of
// maps with the keys kind, title and action. key names the array in
// errors (e.g. "agent.permissions"), each error naming the table's index
// and key: `agent.permissions[2].title = "(" is not a regular expression:
// …`. Nil raw is no rules. Rules come back only when there is no error:
// a list with a mistake in it is not half applied.
func Parse(raw any, key string) ([]Rule, []error) {
	var tables []any
	switch v := raw.(type) {
	case nil:
		return nil, nil
	case []any:
		tables = v
	case []map[string]any:
		for _, m := range v {
			tables = append(tables, m)
		}
	default:
		return nil, []error{fmt.Errorf("%s must be an array of tables ([[%s]] with kind, title and action), not %T", key, key, raw)}
	}
	var rules []Rule
	var errs []error
	for i, t := range tables {
		at := fmt.Sprintf("%s[%d]", key, i)
		m, ok := t.(map[string]any)
		if !ok {
			errs = append(errs, fmt.Errorf("%s must be a table with kind, title and action, not %T", at, t))
			continue
		}
		r, rerrs := parseRule(m, at)
		errs = append(errs, rerrs...)
		rules = append(rules, r)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return rules, nil
}

func parseRule(m map[string]any, at string) (Rule, []error) {
	var r Rule
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s"+format, append([]any{at}, args...)...))
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := m[k]
		switch k {
		case "kind":
			kinds, err := stringList(v)
			if err != nil {
				fail(".kind %v", err)
				continue
			}
			if len(kinds) == 0 {
				fail(".kind = [] names no kind: leave kind out to match every kind, or name some of %s", strings.Join(Kinds, ", "))
			}
			for _, kind := range kinds {
				if !slices.Contains(Kinds, kind) {
					fail(".kind = %q is not a tool kind (want %s)", kind, strings.Join(Kinds, ", "))
				} else if !slices.Contains(r.Kinds, kind) {
					r.Kinds = append(r.Kinds, kind)
				}
			}
		case "title":
			s, ok := v.(string)
			if !ok {
				fail(".title must be a string (a regular expression), not %T", v)
				continue
			}
			re, err := regexp.Compile(s)
			if err != nil {
				fail(".title = %q is not a regular expression: %v", s, err)
				continue
			}
			r.Title = re
		case "action":
			s, _ := v.(string)
			switch a := Action(s); a {
			case Allow, Deny, Ask:
				r.Action = a
			default:
				fail(".action = %v is not allow, deny or ask", quote(v))
			}
		default:
			fail(".%s is not a rule key (want kind, title and action)", k)
		}
	}
	if _, ok := m["action"]; !ok {
		fail(".action is required: allow, deny or ask")
	}
	return r, errs
}

// stringList takes one string or a list of strings.
func stringList(v any) ([]string, error) {
	switch v := v.(type) {
	case string:
		return []string{v}, nil
	case []string:
		return v, nil
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("= %v: each kind must be a string, not %T", quote(v), e)
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("must be a kind or a list of kinds, not %T", v)
}

func quote(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%v", v)
}
