package console

import (
	"io"
	"strings"
	"time"
)

// term is what the console knows of the terminal's last line. The
// output is written whole lines at a time, so that an answer, the
// console's own lines and what the user types do not share one: a
// message's unfinished last line is held until its end comes, or a
// pause of partialWait, or maxHeld bytes of it; any other line ends it
// first. Its methods are called with Console.mu held.
type term struct {
	out   io.Writer
	owner *message // the message the line continues (nil: none)
	mid   bool     // the line written is not ended
	held  string   // the owner's unfinished line, not written yet
	flush *time.Timer
}

// The bounds of a message's unfinished line held back.
const (
	partialWait = 100 * time.Millisecond
	maxHeld     = 4 << 10
)

// write writes text on a line of its own: a message's line is ended
// first.
func (t *term) write(text string) {
	if text == "" {
		return
	}
	t.lineBreak()
	io.WriteString(t.out, text)
	t.mid = !strings.HasSuffix(text, "\n")
}

// entered notes that the user ended the line by typing Enter.
func (t *term) entered() {
	t.flushHeld()
	t.mid, t.owner = false, nil
}

// lineBreak ends the line, writing what is held of it.
func (t *term) lineBreak() {
	t.flushHeld()
	if t.mid {
		io.WriteString(t.out, "\n")
		t.mid = false
	}
	t.owner = nil
}

// flushHeld writes the owner's unfinished line held back.
func (t *term) flushHeld() {
	if t.flush != nil {
		t.flush.Stop()
		t.flush = nil
	}
	if t.held != "" {
		io.WriteString(t.out, t.held)
		t.held, t.mid = "", true
	}
}

// continues reports whether the line written (or held) is m's, so that
// more of m's text goes on it.
func (t *term) continues(m *message) bool { return t.owner == m && (t.mid || t.held != "") }

// stream writes text of m's: its whole lines at once, the rest held
// (see term). Text that does not continue m's line starts a line of its
// own. onPause is called after partialWait without more of it, to write
// what is held.
func (t *term) stream(m *message, text string, onPause func()) {
	if t.owner != m {
		t.lineBreak()
		t.owner = m
	}
	text = t.held + text
	t.held = ""
	if t.flush != nil {
		t.flush.Stop()
		t.flush = nil
	}
	if i := strings.LastIndexByte(text, '\n'); i >= 0 {
		io.WriteString(t.out, text[:i+1])
		t.mid = false
		text = text[i+1:]
	}
	if len(text) >= maxHeld {
		io.WriteString(t.out, text)
		t.mid = true
		return
	}
	if t.held = text; text != "" {
		t.flush = time.AfterFunc(partialWait, onPause)
	}
}
