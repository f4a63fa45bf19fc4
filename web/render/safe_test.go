package render

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// forbiddenTags are elements that run, load, embed or submit something,
// or style the page: none may come out of a render.
var forbiddenTags = map[string]bool{
	"script": true, "style": true, "iframe": true, "frame": true, "frameset": true, "img": true,
	"object": true, "embed": true, "link": true, "meta": true, "base": true, "form": true,
	"svg": true, "math": true, "template": true, "textarea": true, "button": true, "select": true,
	"video": true, "audio": true, "source": true, "picture": true,
}

// voidTags are the elements that take no end tag.
var voidTags = map[string]bool{"br": true, "hr": true, "input": true, "wbr": true, "col": true}

// checkSafe fails t unless out is HTML where nothing runs or loads: no
// forbidden element, no on… or style attribute, an href only to http or
// https, no src, no input but a disabled checkbox, and every element
// closed, in order.
func checkSafe(t testing.TB, out string) {
	t.Helper()
	if err := safeHTML(out); err != nil {
		t.Fatalf("%v in:\n%s", err, out)
	}
}

func safeHTML(out string) error {
	z := html.NewTokenizer(strings.NewReader(out))
	var open []string
	for {
		switch z.Next() {
		case html.ErrorToken:
			if z.Err() != io.EOF {
				return z.Err()
			}
			if len(open) > 0 {
				return fmt.Errorf("unclosed %v", open)
			}
			return nil
		case html.StartTagToken, html.SelfClosingTagToken:
			tok := z.Token()
			if forbiddenTags[tok.Data] {
				return fmt.Errorf("a <%s> element", tok.Data)
			}
			for _, a := range tok.Attr {
				v := strings.ToLower(strings.TrimSpace(a.Val))
				switch {
				case strings.HasPrefix(a.Key, "on"), a.Key == "style", a.Key == "src", a.Key == "srcset",
					a.Key == "action", a.Key == "formaction", a.Key == "background", a.Key == "poster":
					return fmt.Errorf("a %s attribute on <%s>", a.Key, tok.Data)
				case a.Key == "href" && !strings.HasPrefix(v, "http://") && !strings.HasPrefix(v, "https://"):
					return fmt.Errorf("an href to %q", a.Val)
				}
			}
			if tok.Data == "input" && (attr(tok, "type") != "checkbox" || !hasAttr(tok, "disabled")) {
				return fmt.Errorf("an input that takes something: %v", tok.Attr)
			}
			if tok.Data == "a" && attr(tok, "rel") != "noopener noreferrer nofollow" {
				return fmt.Errorf("a link with rel %q", attr(tok, "rel"))
			}
			if !voidTags[tok.Data] && z.Token().Type != html.SelfClosingTagToken {
				open = append(open, tok.Data)
			}
		case html.EndTagToken:
			tok := z.Token()
			if len(open) == 0 || open[len(open)-1] != tok.Data {
				return fmt.Errorf("</%s> closes nothing open (open: %v)", tok.Data, open)
			}
			open = open[:len(open)-1]
		}
	}
}

func attr(tok html.Token, key string) string {
	for _, a := range tok.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func hasAttr(tok html.Token, key string) bool {
	for _, a := range tok.Attr {
		if a.Key == key {
			return true
		}
	}
	return false
}

// The checker itself catches what it is there to catch.
func TestCheckSafe_RefusesWhatRunsOrLoads(t *testing.T) {
	for _, bad := range []string{
		`<script>alert(1)</script>`,
		`<p onclick="x()">a</p>`,
		`<a href="javascript:alert(1)" rel="noopener noreferrer nofollow">x</a>`,
		`<a href=" data:text/html,x" rel="noopener noreferrer nofollow">x</a>`,
		`<a href="https://x.example">x</a>`,
		`<img src="https://x.example/i.png">`,
		`<span style="color:red">x</span>`,
		`<div><p>x</div>`,
		`<p>x`,
		`<input type="text">`,
	} {
		if safeHTML(bad) == nil {
			t.Errorf("%s passed", bad)
		}
	}
	if err := safeHTML(`<p>a<br><a href="https://x.example/" rel="noopener noreferrer nofollow">x</a> <input checked="" disabled="" type="checkbox"></p>`); err != nil {
		t.Errorf("safe HTML refused: %v", err)
	}
}
