package render

import (
	"strings"
	"testing"
)

func md(t *testing.T, in string) string {
	t.Helper()
	out := string(Markdown(in))
	checkSafe(t, out)
	return out
}

// Raw HTML in Markdown is shown as the text it is: not passed through,
// and not dropped either.
func TestMarkdown_RawHTMLIsShownAsText(t *testing.T) {
	for in, want := range map[string]string{
		"<script>alert(1)</script>":                     "&lt;script&gt;alert(1)&lt;/script&gt;",
		"hi <img src=x onerror=alert(1)> there":         "hi &lt;img src=x onerror=alert(1)&gt; there",
		"<img src=x onerror=alert(1)>":                  "&lt;img src=x onerror=alert(1)&gt;",
		`<iframe src="https://evil.example/"></iframe>`: "&lt;iframe src=&#34;https://evil.example/&#34;&gt;&lt;/iframe&gt;",
		`see <a href="javascript:alert(1)">here</a>`:    "see &lt;a href=&#34;javascript:alert(1)&#34;&gt;here&lt;/a&gt;",
		"<div>\n\n*x*\n\n</div>":                        "&lt;div&gt;",
		"<!-- hidden -->":                               "&lt;!-- hidden --&gt;",
		"<style>body{display:none}</style>":             "&lt;style&gt;body{display:none}&lt;/style&gt;",
	} {
		if out := md(t, in); !strings.Contains(out, want) {
			t.Errorf("%q gave %q, want it to show %q", in, out, want)
		}
	}
}

// Only an absolute http or https URL becomes a link, with its rel;
// anything else is shown as text beside the link's words.
func TestMarkdown_OnlyHTTPAndHTTPSBecomeLinks(t *testing.T) {
	for _, in := range []string{
		"[x](javascript:alert(1))",
		"[x](JaVaScRiPt:alert(1))",
		"[x](&#106;avascript:alert(1))",
		"[x](java\tscript:alert(1))",
		"[x](data:text/html,<script>alert(1)</script>)",
		"[x](data:text/html;base64,PHNjcmlwdD4=)",
		"[x](vbscript:msgbox(1))",
		"[x](/etc/passwd)",
		"[x](relative/page)",
		"[x](//evil.example/x)",
		"[x](mailto:a@b.example)",
		"[x][r]\n\n[r]: javascript:alert(1)",
		"<javascript:alert(1)>",
		"<a@b.example>",
		"a@b.example",
		"[x](http:evil)",
	} {
		if out := md(t, in); strings.Contains(out, "<a ") {
			t.Errorf("%q became a link: %s", in, out)
		}
	}
	out := md(t, "[x](javascript:alert(1))")
	if !strings.Contains(out, `<span class="link-text">x</span> <span class="url">(javascript:alert(1))</span>`) {
		t.Errorf("a refused link is not shown as text: %s", out)
	}
	for in, want := range map[string]string{
		"[x](https://example.com/a?b=1&c=2)":              `<a href="https://example.com/a?b=1&amp;c=2" rel="noopener noreferrer nofollow">x</a>`,
		"<http://example.com/p>":                          `<a href="http://example.com/p" rel="noopener noreferrer nofollow">http://example.com/p</a>`,
		"see https://example.com/q now":                   `<a href="https://example.com/q" rel="noopener noreferrer nofollow">https://example.com/q</a>`,
		`[x](https://example.com/"onmouseover="alert(1))`: `rel="noopener noreferrer nofollow">x</a>`,
	} {
		if out := md(t, in); !strings.Contains(out, want) {
			t.Errorf("%q gave %s, want %s", in, out, want)
		}
	}
}

// An image is never loaded: it is a link to its URL, or text.
func TestMarkdown_ImagesAreNeverLoaded(t *testing.T) {
	out := md(t, "![a cat](https://example.com/cat.png)")
	if want := `<a href="https://example.com/cat.png" rel="noopener noreferrer nofollow" class="image">a cat</a>`; !strings.Contains(out, want) {
		t.Errorf("got %s, want %s", out, want)
	}
	out = md(t, "![x](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+)")
	if strings.Contains(out, "<a ") || !strings.Contains(out, `<span class="image">x</span>`) {
		t.Errorf("a data: image: %s", out)
	}
	// Inside a link an image is text, so links never nest.
	out = md(t, "[![i](https://example.com/i.png)](https://example.com/)")
	if strings.Count(out, "<a ") != 1 {
		t.Errorf("nested links: %s", out)
	}
}

// Code is highlighted with classes and never an inline style; a block in
// no known language is plain.
func TestMarkdown_CodeIsHighlightedWithClasses(t *testing.T) {
	out := md(t, "```go\nfunc main() { fmt.Println(\"</pre><script>\") }\n```\n")
	if !strings.Contains(out, `<pre class="chroma">`) || !strings.Contains(out, `<span class="kd">func</span>`) {
		t.Errorf("not highlighted: %s", out)
	}
	if !strings.Contains(out, "&lt;/pre&gt;&lt;script&gt;") {
		t.Errorf("the string is not escaped: %s", out)
	}
	out = md(t, "```nosuchlanguage\n<b>x</b>\n```\n\n    indented <i>\n")
	if strings.Contains(out, "chroma") || strings.Count(out, `<pre class="code"><code>`) != 2 || !strings.Contains(out, "&lt;b&gt;x&lt;/b&gt;") {
		t.Errorf("plain blocks: %s", out)
	}
}

// Past the bound of highlighting, code is shown plain, and past the bound
// of a text, its start is rendered with a line saying what is left out.
func TestMarkdown_BoundsHighlightingAndLength(t *testing.T) {
	block := "```go\n" + strings.Repeat("x := 1\n", (maxHighlightBlock+10)/7) + "```\n"
	if out := md(t, block); strings.Contains(out, "chroma") {
		t.Error("a block past maxHighlightBlock was highlighted")
	}
	small := "```go\n" + strings.Repeat("x := 1\n", 15<<10/7) + "```\n"
	out := md(t, strings.Repeat(small, 10))
	if n := strings.Count(out, `class="chroma"`); n != maxHighlight/(15<<10) {
		t.Errorf("%d blocks highlighted, want %d", n, maxHighlight/(15<<10))
	}
	out = md(t, strings.Repeat("word ", (maxMarkdown+100<<10)/5))
	if !strings.Contains(out, `<p class="omitted">… 100.0 KiB more left out here …</p>`) {
		t.Errorf("no note of what is left out: …%s", out[max(len(out)-200, 0):])
	}
}

func TestSafeURL(t *testing.T) {
	for in, want := range map[string]bool{
		"https://example.com/":   true,
		"HTTP://Example.com/a#b": true,
		"https://":               false,
		"ftp://example.com/":     false,
		"//example.com/":         false,
		"javascript:alert(1)":    false,
		" https://example.com/":  false,
		"https:example.com":      false,
	} {
		if _, ok := SafeURL(in); ok != want {
			t.Errorf("SafeURL(%q) = %v, want %v", in, ok, want)
		}
	}
}
