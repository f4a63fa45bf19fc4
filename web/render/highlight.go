package render

import (
	"bytes"
	_ "embed"
	"html"
	"io"
	"strings"
	"sync"

	"github.com/alecthomas/chroma/v2"
	chromahtml "github.com/alecthomas/chroma/v2/formatters/html"
	"github.com/alecthomas/chroma/v2/lexers"
	"github.com/alecthomas/chroma/v2/styles"
)

// Bounds of highlighting: a code block past maxHighlightBlock bytes, or
// past what is left of the maxHighlight bytes one render highlights, is
// shown plain. Chroma's lexers are backtracking regular expressions,
// some 0.4 MB/s on Go code here (BenchmarkHighlight), where goldmark
// renders ten times that: 64 KiB of highlighting is some 0.15 s, and
// plain text costs only its escaping.
const (
	maxHighlightBlock = 16 << 10
	maxHighlight      = 64 << 10
)

// formatter writes chroma's tokens as spans with CSS classes, never a
// style attribute: the page's Content-Security-Policy allows no inline
// style.
var formatter = chromahtml.New(chromahtml.WithClasses(true))

// Light and dark are the themes the stylesheet holds, chosen by the
// browser's prefers-color-scheme.
const (
	lightTheme = "github"
	darkTheme  = "github-dark"
)

// highlight writes code as a highlighted block when its language is known
// and *left allows, taking its length from *left; else as plain text.
func highlight(w io.Writer, lang, code string, left *int) {
	if lexer := lexerFor(lang); lexer != nil && len(code) <= maxHighlightBlock && len(code) <= *left {
		if it, err := lexer.Tokenise(nil, code); err == nil {
			var b bytes.Buffer
			if formatter.Format(&b, styles.Get(lightTheme), it) == nil {
				*left -= len(code)
				_, _ = w.Write(b.Bytes())
				return
			}
		}
	}
	_, _ = io.WriteString(w, `<pre class="code"><code>`+html.EscapeString(code)+"</code></pre>\n")
}

// lexerFor is the lexer for a fence's language, or nil: a block that
// names none is not guessed at.
func lexerFor(lang string) chroma.Lexer {
	if lang == "" || len(lang) > 64 {
		return nil
	}
	l := lexers.Get(lang)
	if l == nil {
		return nil
	}
	return chroma.Coalesce(l)
}

//go:embed style.css
var ownCSS []byte

var css = sync.OnceValue(func() []byte {
	var b bytes.Buffer
	b.Write(ownCSS)
	b.WriteString("\n/* Highlighting: " + lightTheme + ", and " + darkTheme + " in a dark scheme. */\n")
	_ = formatter.WriteCSS(&b, styles.Get(lightTheme))
	b.WriteString("@media (prefers-color-scheme: dark) {\n")
	var dark bytes.Buffer
	_ = formatter.WriteCSS(&dark, styles.Get(darkTheme))
	for line := range strings.Lines(dark.String()) {
		b.WriteString("  " + line)
	}
	b.WriteString("}\n")
	return b.Bytes()
})

// CSS is the stylesheet the classes TurnHTML and Markdown write need
// (highlighting in a light and a dark scheme, diffs, tool calls, the
// plan, folded parts), to be served as a static file. The caller must
// not change it.
func CSS() []byte { return css() }
