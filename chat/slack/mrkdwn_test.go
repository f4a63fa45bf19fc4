package slack

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"acpbroker/chat/thread"
)

// The broker's Markdown reads in Slack as it was meant: emphasis, code,
// links, headings, lists and quotes in mrkdwn, Slack's three characters
// escaped everywhere but in its own references, code left as written.
func TestMrkdwn(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"**bold** and *italic* and _also_", "*bold* and _italic_ and _also_"},
		{"~~struck~~ `a < b && c > d`", "~struck~ `a &lt; b &amp;&amp; c &gt; d`"},
		{"x < y & z > w", "x &lt; y &amp; z &gt; w"},
		{"[the docs](https://example.com/a?b=1&c=2)", "<https://example.com/a?b=1&amp;c=2|the docs>"},
		{"[not a link](javascript:alert(1))", "[not a link](javascript:alert(1))"},
		{"<@U012AB> cancelled", "<@U012AB> cancelled"},
		{"<!channel> <!here|here> <!everyone> <!subteam^S012|@ops> wake up", "&lt;!channel&gt; &lt;!here|here&gt; &lt;!everyone&gt; &lt;!subteam^S012|@ops&gt; wake up"},
		{"see <https://example.com>", "see <https://example.com>"},
		{"<script>", "&lt;script&gt;"},
		{"# Title\n## Sub #", "*Title*\n*Sub*"},
		{"- one\n  * two\n+ three", "• one\n  • two\n• three"},
		{"> 💭 a thought\n>", "> 💭 a thought\n> "},
		{"-# ✅ done in 2s", "✅ done in 2s"},
		{"```go\nif a < b && **c** {\n```", "```\nif a &lt; b &amp;&amp; **c** {\n```"},
		{"a ``code with ` inside`` b", "a `code with ' inside` b"},
		{`\*not italic\*`, "*not italic*"},
		{"2 * 3 * 4", "2 * 3 * 4"},
		{"snake_case_name", "snake_case_name"},
		{"---", "---"},
		{"🔐 **Permission needed**: run **rm \\*.o**", "🔐 *Permission needed*: run *rm *.o*"},
	} {
		if got := mrkdwn(tc.in); got != tc.want {
			t.Errorf("mrkdwn(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// What a user writes reaches the agent as written: Slack's escapes
// undone, its links and channels spelled out, mentions of others kept.
func TestPlainText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"a &lt; b &amp;&amp; c &gt; d", "a < b && c > d"},
		{"see <https://example.com/x?a=1&amp;b=2>", "see https://example.com/x?a=1&b=2"},
		{"see <https://example.com|example.com>", "see https://example.com"},
		{"see <https://example.com/docs|the docs>", "see the docs (https://example.com/docs)"},
		{"ask <@U0BOB> in <#C0123|general>", "ask <@U0BOB> in #general"},
		{"<!here> look", "@here look"},
		{"literally &amp;lt;", "literally &lt;"},
	} {
		if got := plainText(tc.in); got != tc.want {
			t.Errorf("plainText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := stripMention("<@U0BOT> cancel <@U0BOTX> and <@U0BOT|bot>", "U0BOT"); got != " cancel <@U0BOTX> and " {
		t.Errorf("stripMention = %q", got)
	}
}

// blockLimits checks blocks against Slack's limits on a message.
func blockLimits(t *testing.T, set []json.RawMessage) {
	t.Helper()
	if len(set) > maxBlocks {
		t.Fatalf("%d blocks", len(set))
	}
	ids := map[string]bool{}
	for _, raw := range set {
		var b struct {
			Type    string `json:"type"`
			BlockID string `json:"block_id"`
			Text    *struct {
				Text string `json:"text"`
			} `json:"text"`
			Elements []struct {
				Type string `json:"type"`
				Text any    `json:"text"`
			} `json:"elements"`
		}
		json.Unmarshal(raw, &b)
		if b.BlockID != "" && (ids[b.BlockID] || utf8.RuneCountInString(b.BlockID) > 255) {
			t.Fatalf("block id %q repeated or too long", b.BlockID)
		}
		ids[b.BlockID] = true
		switch b.Type {
		case "section":
			if n := utf8.RuneCountInString(b.Text.Text); n == 0 || n > sectionRunes || strings.TrimSpace(b.Text.Text) == "" {
				t.Fatalf("a section of %d characters: %.60q", n, b.Text.Text)
			}
			if strings.Count(b.Text.Text, "```")%2 != 0 {
				t.Fatalf("a section leaves a code block open: %.200q", b.Text.Text)
			}
		case "context":
			if len(b.Elements) == 0 || len(b.Elements) > 10 {
				t.Fatalf("a context of %d elements", len(b.Elements))
			}
			for _, e := range b.Elements {
				if s, _ := e.Text.(string); utf8.RuneCountInString(s) > sectionRunes || strings.TrimSpace(s) == "" {
					t.Fatalf("a context element of %d characters", utf8.RuneCountInString(s))
				}
			}
		case "actions":
			if len(b.Elements) == 0 || len(b.Elements) > actionElements {
				t.Fatalf("an actions block of %d elements", len(b.Elements))
			}
		default:
			t.Fatalf("a %s block", b.Type)
		}
	}
}

// Whatever a view holds (a message's worth of Markdown that escapes to
// far more, small print on every other line, code blocks, forty
// buttons, long labels), its blocks are within Slack's limits: sections
// of 3,000 characters with no code block left open, at most 50 blocks,
// 25 elements an actions block, labels cut to Slack's sizes.
func TestBlocks_WithinSlacksLimits(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"&&&&", "<x>", "**b**", "`c`", "word ", "\n", "\n-# small\n", "\n```go\n", "\n```\n", "ü", "> q\n", "- item\n"}
	for range 200 {
		var b strings.Builder
		for utf8.RuneCountInString(b.String()) < limits.MessageRunes-10 {
			b.WriteString(pieces[rnd.IntN(len(pieces))])
		}
		text := string([]rune(b.String())[:limits.MessageRunes-10])
		var actions []thread.Action
		for i := range rnd.IntN(40) {
			actions = append(actions, thread.Action{ID: "a" + strings.Repeat("x", i), Label: strings.Repeat("label ", 20)})
		}
		if rnd.IntN(2) == 0 {
			actions = append(actions, thread.Action{ID: "menu", Menu: &thread.Menu{Placeholder: strings.Repeat("p", 200),
				Options: []thread.Option{{Label: strings.Repeat("o", 100), Value: "v"}}}})
		}
		set, fallback := blocks(text, actions, "slack:C0123/1700000000.000100")
		raw, _ := json.Marshal(set)
		var list []json.RawMessage
		json.Unmarshal(raw, &list)
		blockLimits(t, list)
		if utf8.RuneCountInString(fallback) > fallbackRunes || fallback == "" {
			t.Fatalf("the text for notifications has %d characters", utf8.RuneCountInString(fallback))
		}
		for _, raw := range list {
			var b struct {
				Elements []struct {
					Text        struct{ Text string } `json:"text"`
					Placeholder struct{ Text string } `json:"placeholder"`
					Options     []struct {
						Text struct{ Text string } `json:"text"`
					} `json:"options"`
				} `json:"elements"`
			}
			json.Unmarshal(raw, &b)
			for _, e := range b.Elements {
				if n := utf8.RuneCountInString(e.Text.Text); n > buttonRunes {
					t.Fatalf("a button's text of %d characters", n)
				}
				if n := utf8.RuneCountInString(e.Placeholder.Text); n > placeholderMax {
					t.Fatalf("a placeholder of %d characters", n)
				}
				for _, o := range e.Options {
					if n := utf8.RuneCountInString(o.Text.Text); n > optionRunes {
						t.Fatalf("an option's text of %d characters", n)
					}
				}
			}
		}
	}
}

// Small print is a context block; a view whose small print would take
// more blocks than a message holds shows it in its sections instead.
func TestBlocks_SmallPrint(t *testing.T) {
	set, _ := blocks("the answer\n-# ✅ done in 2s", nil, "C0123")
	raw, _ := json.Marshal(set)
	if !strings.Contains(string(raw), `"type":"context","elements":[{"type":"mrkdwn","text":"✅ done in 2s"}]`) {
		t.Fatalf("blocks %s", raw)
	}
	var b strings.Builder
	for range 40 {
		b.WriteString("line\n-# small\n")
	}
	set, _ = blocks(b.String(), nil, "C0123")
	if len(set) != 1 {
		t.Fatalf("%d blocks for small print on every other line, want one section", len(set))
	}
}

// A modal keeps within Slack's sizes: a title of 24 characters, the
// metadata that says where its answer goes.
func TestModal(t *testing.T) {
	m := modal(thread.Form{ID: "elic:1:modal", Title: "A title much longer than Slack shows",
		Fields: []thread.Field{{ID: "0", Label: "Name", Value: "a\nb", Multiline: true, Required: true, MaxRunes: 5000}}},
		formMeta{Where: "slack:C0123/1.2", Channel: "C0123", ThreadTS: "1.2"})
	if n := utf8.RuneCountInString(m.Title.Text); n != modalTitleRunes || !strings.HasSuffix(m.Title.Text, "…") {
		t.Fatalf("title %q", m.Title.Text)
	}
	raw, _ := json.Marshal(m)
	for _, want := range []string{`"initial_value":"a\nb"`, `"max_length":3000`, `"callback_id":"elic:1:modal"`, `"private_metadata":"{\"w\":\"slack:C0123/1.2\"`} {
		if !strings.Contains(string(raw), want) {
			t.Fatalf("modal %s lacks %s", raw, want)
		}
	}
}

// The budget holds a method to its rate: a burst, then one call per
// share of a minute; an urgent call may spend the reserve the others
// leave; a 429 closes the method until its Retry-After; a channel's
// posts have a budget of their own; full buckets nobody uses go.
func TestBudget(t *testing.T) {
	b := newBudget()
	now := time.Unix(1700000000, 0)
	r := rates["chat.update"]
	n := 0
	for b.take("chat.update", "", false, now) == 0 {
		n++
	}
	if n != int(r.burst-r.reserve) {
		t.Fatalf("%d calls at once, want %v", n, r.burst-r.reserve)
	}
	for range int(r.reserve) {
		if w := b.take("chat.update", "", true, now); w != 0 {
			t.Fatalf("an urgent call waits %s", w)
		}
	}
	if w := b.take("chat.update", "", true, now); w <= 0 || w > 2*time.Second {
		t.Fatalf("past the burst an urgent call waits %s", w)
	}
	later := now.Add(time.Minute)
	calls := 0
	for t := now; t.Before(later); t = t.Add(100 * time.Millisecond) {
		if b.take("chat.update", "", true, t) == 0 {
			calls++
		}
	}
	if calls > int(r.perMinute)+1 {
		t.Fatalf("%d calls in a minute past the burst, over %v", calls, r.perMinute)
	}
	b.block("chat.update", "", later.Add(5*time.Second))
	if w := b.take("chat.update", "", true, later.Add(time.Second)); w != 4*time.Second {
		t.Fatalf("after a 429 a call waits %s, want the 4s left", w)
	}
	if b.take("chat.postMessage", "C1", false, now) != 0 || b.take("chat.postMessage", "C2", false, now) != 0 {
		t.Fatal("a channel's first post waits for another's")
	}
	if b.take("auth.test", "", false, now) != 0 {
		t.Fatal("a method without a budget waits")
	}
	for i := range maxBuckets + 10 {
		b.take("chat.postMessage", "C"+strings.Repeat("x", i), false, now)
	}
	b.take("chat.postMessage", "Cfresh", false, now.Add(time.Hour))
	if n := b.size(); n > maxBuckets {
		t.Fatalf("%d buckets kept", n)
	}
}
