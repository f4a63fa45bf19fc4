package render

import (
	"strings"
	"testing"
)

// Whatever a person or an agent writes, wherever a turn shows it, the
// page gets no script, no on… attribute, no link or source but http(s),
// and HTML whose every element is closed.
func FuzzTurnHTML(f *testing.F) {
	for _, s := range []string{
		"<script>alert(1)</script>",
		"<img src=x onerror=alert(1)>",
		"[x](javascript:alert(1))",
		"[x](data:text/html,<script>alert(1)</script>)",
		`<a href="javascript:alert(1)">x</a>`,
		"<iframe src=//evil.example>",
		"```html\n</code></pre><script>alert(1)</script>\n```",
		"![i](https://example.com/i.png \"t\") <https://example.com> www.example.com a@b.example",
		"| a | b |\n|---|---|\n| <b> | [x](vbscript:y) |\n\n- [x] done\n- [ ] <u>",
		"> quote\n>> `code` <svg/onload=alert(1)>\n\n***\n\n    indented </pre>",
		"[x]: javascript:alert(1)\n[x] [y](<javascript:alert(1)>) [z](java&#x73;cript:x)",
		"\x1b[31m<b>\r\n\x00\xff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if err := safeHTML(string(Markdown(s))); err != nil {
			t.Fatalf("Markdown(%q): %v", s, err)
		}
		out := string(TurnHTML(hostileTurn(s)))
		if err := safeHTML(out); err != nil {
			t.Fatalf("TurnHTML with %q: %v\n%s", s, err, out)
		}
		if strings.Contains(strings.ToLower(out), "<script") {
			t.Fatalf("a script with %q", s)
		}
	})
}
