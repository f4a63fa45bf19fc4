package render

import (
	"bufio"
	"bytes"
	"fmt"
	"html"
	"html/template"
	"net/url"
	"strings"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/renderer"
	"github.com/yuin/goldmark/util"

	"acpbroker/chat"
	"acpbroker/internal/clip"
)

// maxMarkdown bounds the text one call of Markdown renders: past it, the
// start is rendered and a line says how much is left out.
const maxMarkdown = 2 << 20

// maxURL bounds a URL made a link; a longer one is shown as text.
const maxURL = 4 << 10

// markdown is GitHub's Markdown (tables, strikethrough, bare URLs, task
// lists) with goldmark's HTML renderer, but for what safe renders in its
// place: raw HTML, links, images and code. goldmark's Markdown is safe for
// concurrent use.
var markdown = goldmark.New(
	goldmark.WithExtensions(extension.GFM),
	goldmark.WithRendererOptions(renderer.WithNodeRenderers(
		// Lower is later to register, so these replace goldmark's (1000)
		// and the extensions' (500).
		util.Prioritized(safe{}, 100),
	)),
)

// Markdown renders text written by a person or an agent as safe HTML: raw
// HTML in it is shown as text, only http and https URLs become links
// (rel="noopener noreferrer nofollow"), images are links to their URL and
// never loaded, and code blocks are highlighted with CSS classes. A text
// past 2 MiB is rendered up to there, with a line saying how much is left
// out.
func Markdown(text string) template.HTML {
	var b strings.Builder
	w := &budget{highlight: maxHighlight}
	writeMarkdown(&b, w, text)
	return template.HTML(b.String())
}

// writeMarkdown renders text into b, drawing on w's budget for code.
func writeMarkdown(b *strings.Builder, w *budget, text string) {
	left := 0
	if len(text) > maxMarkdown {
		cut := clip.Cut(text, maxMarkdown)
		cut = strings.TrimSuffix(cut, "…")
		left = len(text) - len(cut)
		text = cut
	}
	w.Writer = bufio.NewWriter(b)
	if err := markdown.Convert([]byte(text), w); err != nil {
		// goldmark fails only when writing fails, which a Builder does
		// not; what was written so far stands, the text after it is
		// shown as text.
		b.WriteString(`<pre class="md-failed">` + html.EscapeString(text) + `</pre>`)
	}
	if left > 0 {
		omitted(b, fmt.Sprintf("%s more left out here", chat.Bytes(int64(left))))
	}
}

// budget is the writer goldmark renders through, carrying what is left of
// one render's budget for highlighting; goldmark hands it to safe's
// functions as their util.BufWriter.
type budget struct {
	*bufio.Writer
	highlight int
}

// omitted writes a line saying what is left out.
func omitted(b *strings.Builder, what string) {
	b.WriteString(`<p class="omitted">… ` + html.EscapeString(what) + ` …</p>`)
}

// SafeURL is u made fit for an href when it is an absolute http or https
// URL with a host, and false for anything else: other schemes
// (javascript:, data:, vbscript:, mailto:…), relative and
// protocol-relative URLs, and URLs past 4 KiB.
func SafeURL(u string) (string, bool) {
	if len(u) > maxURL {
		return "", false
	}
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.Opaque != "" {
		return "", false
	}
	return p.String(), true
}

// linkRel is every link's rel: no window.opener, no Referer, no
// endorsement.
const linkRel = `noopener noreferrer nofollow`

// writeLink opens a link to a URL SafeURL accepted.
func writeLink(w util.BufWriter, href, class string) {
	_, _ = w.WriteString(`<a href="` + html.EscapeString(href) + `" rel="` + linkRel + `"`)
	if class != "" {
		_, _ = w.WriteString(` class="` + class + `"`)
	}
	_ = w.WriteByte('>')
}

// safe renders the nodes where Markdown could carry markup or reach out
// of the page.
type safe struct{}

func (safe) RegisterFuncs(reg renderer.NodeRendererFuncRegisterer) {
	reg.Register(ast.KindHTMLBlock, htmlBlock)
	reg.Register(ast.KindRawHTML, rawHTML)
	reg.Register(ast.KindLink, link)
	reg.Register(ast.KindImage, image)
	reg.Register(ast.KindAutoLink, autoLink)
	reg.Register(ast.KindFencedCodeBlock, codeBlock)
	reg.Register(ast.KindCodeBlock, codeBlock)
}

// htmlBlock shows a block of raw HTML as the text it is.
func htmlBlock(w util.BufWriter, src []byte, n ast.Node, entering bool) (ast.WalkStatus, error) {
	if !entering {
		return ast.WalkContinue, nil
	}
	var t bytes.Buffer
	lines := n.Lines()
	for i := range lines.Len() {
		s := lines.At(i)
		t.Write(s.Value(src))
	}
	if hb, ok := n.(*ast.HTMLBlock); ok && hb.HasClosure() {
		t.Write(hb.ClosureLine.Value(src))
	}
	_, _ = w.WriteString(`<p class="md-raw">` + html.EscapeString(strings.TrimRight(t.String(), "\n")) + "</p>\n")
	return ast.WalkSkipChildren, nil
}

// rawHTML shows an inline tag as the text it is.
func rawHTML(w util.BufWriter, src []byte, n ast.Node, entering bool) (ast.WalkStatus, error) {
	if !entering {
		return ast.WalkSkipChildren, nil
	}
	segs := n.(*ast.RawHTML).Segments
	for i := range segs.Len() {
		s := segs.At(i)
		_, _ = w.WriteString(html.EscapeString(string(s.Value(src))))
	}
	return ast.WalkSkipChildren, nil
}

// link is a link when its destination is a safe URL and not inside
// another link; else its text, then the destination as text.
func link(w util.BufWriter, _ []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	n := node.(*ast.Link)
	href, ok := SafeURL(string(n.Destination))
	ok = ok && !inLink(n)
	switch {
	case entering && ok:
		writeLink(w, href, "")
	case entering:
		_, _ = w.WriteString(`<span class="link-text">`)
	case ok:
		_, _ = w.WriteString("</a>")
	default:
		_, _ = w.WriteString(`</span>`)
		if len(n.Destination) > 0 {
			_, _ = w.WriteString(` <span class="url">(` + html.EscapeString(clip.Cut(string(n.Destination), maxURL)) + `)</span>`)
		}
	}
	return ast.WalkContinue, nil
}

// image is never loaded: it is a link to its URL named by its text, or
// that text and the URL as text.
func image(w util.BufWriter, src []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	if !entering {
		return ast.WalkContinue, nil
	}
	n := node.(*ast.Image)
	alt := html.EscapeString(plainText(n, src))
	if alt == "" {
		alt = "image"
	}
	if href, ok := SafeURL(string(n.Destination)); ok && !inLink(n) {
		writeLink(w, href, "image")
		_, _ = w.WriteString(alt + "</a>")
		return ast.WalkSkipChildren, nil
	}
	_, _ = w.WriteString(`<span class="image">` + alt + `</span>`)
	if len(n.Destination) > 0 {
		_, _ = w.WriteString(` <span class="url">(` + html.EscapeString(clip.Cut(string(n.Destination), maxURL)) + `)</span>`)
	}
	return ast.WalkSkipChildren, nil
}

// autoLink is a link when its URL is safe (an e-mail address is text).
func autoLink(w util.BufWriter, src []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	if !entering {
		return ast.WalkContinue, nil
	}
	n := node.(*ast.AutoLink)
	label := html.EscapeString(string(n.Label(src)))
	if href, ok := SafeURL(string(n.URL(src))); ok && n.AutoLinkType == ast.AutoLinkURL && !inLink(n) {
		writeLink(w, href, "")
		_, _ = w.WriteString(label + "</a>")
		return ast.WalkContinue, nil
	}
	_, _ = w.WriteString(label)
	return ast.WalkContinue, nil
}

// inLink reports whether n is inside a link, where another would nest.
func inLink(n ast.Node) bool {
	for p := n.Parent(); p != nil; p = p.Parent() {
		if p.Kind() == ast.KindLink {
			return true
		}
	}
	return false
}

// plainText is the text of n's descendants, without markup.
func plainText(n ast.Node, src []byte) string {
	var b strings.Builder
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch t := c.(type) {
		case *ast.Text:
			b.Write(t.Segment.Value(src))
		case *ast.String:
			b.Write(t.Value)
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

// codeBlock highlights a code block in the language its fence names.
func codeBlock(w util.BufWriter, src []byte, n ast.Node, entering bool) (ast.WalkStatus, error) {
	if !entering {
		return ast.WalkSkipChildren, nil
	}
	var lang string
	if f, ok := n.(*ast.FencedCodeBlock); ok {
		lang = string(f.Language(src))
	}
	var code strings.Builder
	lines := n.Lines()
	for i := range lines.Len() {
		s := lines.At(i)
		code.Write(s.Value(src))
	}
	none := 0
	left := &none // a writer that carries no budget has none
	if b, ok := w.(*budget); ok {
		left = &b.highlight
	}
	highlight(w, lang, code.String(), left)
	return ast.WalkSkipChildren, nil
}
