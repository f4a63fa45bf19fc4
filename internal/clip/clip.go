// Package clip keeps the start and the end of a text too long to keep
// whole, and counts what it leaves out between them: what an agent
// writes in a turn is kept in bounded memory however much it writes.
package clip

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Text keeps the first head bytes written to it and the last tail, and
// counts the rest. Writing costs the length written, and memory stays
// within head + 2×tail bytes. The zero value keeps nothing but the count;
// use New. It is not safe for concurrent use.
type Text struct {
	headMax, tailMax int
	head             []byte
	tail             []byte // its last tailMax bytes are the tail
	total            int64
}

// New returns a Text that keeps head bytes of the start and tail of the
// end.
func New(head, tail int) Text {
	return Text{headMax: max(head, 0), tailMax: max(tail, 0)}
}

// WriteString adds s.
func (t *Text) WriteString(s string) {
	t.total += int64(len(s))
	if room := t.headMax - len(t.head); room > 0 {
		n := min(room, len(s))
		t.head = append(t.head, s[:n]...)
		s = s[n:]
	}
	if len(s) == 0 || t.tailMax == 0 {
		return
	}
	if len(s) >= t.tailMax {
		t.tail = append(t.tail[:0], s[len(s)-t.tailMax:]...)
		return
	}
	if len(t.tail)+len(s) > 2*t.tailMax {
		// Slide what is still the tail to the front: each byte is moved
		// at most once per tailMax bytes written.
		n := copy(t.tail, t.tail[len(t.tail)-(t.tailMax-len(s)):])
		t.tail = t.tail[:n]
	}
	t.tail = append(t.tail, s...)
}

// Len is the number of bytes written in all.
func (t *Text) Len() int64 { return t.total }

// Clipped reports whether some of what was written is left out.
func (t *Text) Clipped() bool { return t.total > int64(len(t.head)+len(t.keptTail())) }

func (t *Text) keptTail() []byte {
	if len(t.tail) > t.tailMax {
		return t.tail[len(t.tail)-t.tailMax:]
	}
	return t.tail
}

// lineSlack is how far a cut moves to fall between lines.
const lineSlack = 4 << 10

// Parts returns what is kept: the text whole as head when nothing was
// left out; else its start and its end, each cut at a line break when
// one is near (else at a character), and the number of bytes between
// them.
func (t *Text) Parts() (head string, omitted int64, tail string) {
	kept := t.keptTail()
	if !t.Clipped() {
		return string(t.head) + string(kept), 0, ""
	}
	h := t.head
	if i := strings.LastIndexByte(string(h[max(len(h)-lineSlack, 0):]), '\n'); i >= 0 {
		h = h[:max(len(h)-lineSlack, 0)+i+1]
	} else {
		h = h[:runeEnd(h)]
	}
	tl := kept
	if i := strings.IndexByte(string(tl[:min(len(tl), lineSlack)]), '\n'); i >= 0 {
		tl = tl[i+1:]
	} else {
		for i := 0; i < utf8.UTFMax-1 && len(tl) > 0 && !utf8.RuneStart(tl[0]); i++ {
			tl = tl[1:]
		}
	}
	return string(h), t.total - int64(len(h)+len(tl)), string(tl)
}

// runeEnd is the length of b without a character cut short at its end.
func runeEnd(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}

// String is what is kept, with a line in place of what is left out.
func (t *Text) String() string {
	head, omitted, tail := t.Parts()
	if omitted == 0 {
		return head
	}
	return head + fmt.Sprintf("\n[… %d bytes left out …]\n", omitted) + tail
}

// Reset empties t, keeping its bounds.
func (t *Text) Reset() {
	t.head, t.tail, t.total = t.head[:0], t.tail[:0], 0
}

// Cut is s cut to at most n bytes, at a character, with "…" when it was
// longer.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n = max(n-len("…"), 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Prefix is the first n bytes written, at most, cut at a character; at
// most the head's worth.
func (t *Text) Prefix(n int) string {
	h := t.head[:min(max(n, 0), len(t.head))]
	return string(h[:runeEnd(h)])
}

// Head is the first n bytes of s at most, cut at a character.
func Head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n = max(n, 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
