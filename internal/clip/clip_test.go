package clip

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// Whatever is written, in whatever pieces, Text keeps the start and the
// end, says exactly how much is left out between them, and holds no more
// than its bounds.
func TestText_KeepsTheStartAndTheEndWithinItsBounds(t *testing.T) {
	const head, tail = 1000, 500
	for _, piece := range []int{1, 7, 499, 500, 501, 4096, 1 << 20} {
		c := New(head, tail)
		var all strings.Builder
		for i := 0; all.Len() < 3<<20; i++ {
			s := strings.Repeat(string(rune('a'+i%26)), piece)
			all.WriteString(s)
			c.WriteString(s)
			if held := cap(c.head) + cap(c.tail); held > 2*(head+2*tail) {
				t.Fatalf("pieces of %d: %d bytes held", piece, held)
			}
		}
		h, omitted, tl := c.Parts()
		whole := all.String()
		if !strings.HasPrefix(whole, h) || !strings.HasSuffix(whole, tl) || int64(len(h))+omitted+int64(len(tl)) != int64(len(whole)) {
			t.Fatalf("pieces of %d: head %d, omitted %d, tail %d of %d", piece, len(h), omitted, len(tl), len(whole))
		}
		if len(h) != head || len(tl) != tail || c.Len() != int64(len(whole)) || !c.Clipped() {
			t.Fatalf("pieces of %d: kept %d and %d bytes of %d", piece, len(h), len(tl), c.Len())
		}
	}
}

// A text within the bounds is kept whole; past them the cuts fall between
// lines when one is near, else between characters, never inside one.
func TestText_CutsBetweenLinesOrCharacters(t *testing.T) {
	c := New(10, 10)
	c.WriteString("short")
	c.WriteString(" and more")
	if h, omitted, tl := c.Parts(); h != "short and more" || omitted != 0 || tl != "" || c.String() != "short and more" {
		t.Fatalf("within bounds: %q %d %q", h, omitted, tl)
	}

	c = New(10, 10)
	c.WriteString("line one\nline two\nthree\nlast one")
	h, omitted, tl := c.Parts()
	if h != "line one\n" || tl != "last one" || omitted != int64(len("line two\nthree\n")) {
		t.Fatalf("by lines: %q %d %q", h, omitted, tl)
	}
	if s := c.String(); !strings.Contains(s, "[… 15 bytes left out …]") {
		t.Fatalf("String: %q", s)
	}

	c = New(10, 10)
	c.WriteString(strings.Repeat("é", 40)) // two bytes each: 10 splits the 6th
	h, _, tl = c.Parts()
	if !utf8.ValidString(h) || !utf8.ValidString(tl) || len(h) != 10 || len(tl) != 10 {
		t.Fatalf("by characters: %q %q", h, tl)
	}
	c = New(9, 9)
	c.WriteString(strings.Repeat("é", 40))
	h, omitted, tl = c.Parts()
	if !utf8.ValidString(h) || !utf8.ValidString(tl) || len(h) != 8 || len(tl) != 8 || omitted != 80-16 {
		t.Fatalf("by characters, an odd bound: %q %d %q", h, omitted, tl)
	}
	// Bytes that are not UTF-8 at all are not cut away.
	c = New(4, 4)
	c.WriteString(strings.Repeat("\xff", 20))
	if h, _, tl := c.Parts(); len(h) != 4 || len(tl) != 4 {
		t.Fatalf("invalid UTF-8: %q %q", h, tl)
	}
}

func BenchmarkText_WriteString(b *testing.B) {
	c := New(1<<20, 1<<20)
	s := strings.Repeat("x", 64<<10)
	b.SetBytes(int64(len(s)))
	for range b.N {
		c.WriteString(s)
	}
}

func TestCut_CutsBetweenCharactersWithinTheBound(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"a bit longer", 10, "a bit l…"},
		{"ééééé", 8, "éé…"},
		{"ééééé", 7, "éé…"},
		{"abc", 2, "…"},
	} {
		if got := Cut(tc.s, tc.n); got != tc.want || (len(tc.s) > tc.n && len(got) > max(tc.n, len("…"))) {
			t.Errorf("Cut(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}
