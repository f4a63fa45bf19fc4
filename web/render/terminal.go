package render

import (
	"regexp"
	"strings"
)

// ansiSequence matches a terminal's colour and cursor sequences (CSI) and
// its title and link sequences (OSC).
var ansiSequence = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)`)

// terminalText is a terminal's output as a page shows it: each line as it
// was last drawn (a carriage return starts it again), without the
// terminal's sequences or control characters but tabs.
func terminalText(out string) string {
	out = ansiSequence.ReplaceAllString(out, "")
	var b strings.Builder
	b.Grow(len(out))
	for l := range strings.Lines(out) {
		nl := strings.HasSuffix(l, "\n")
		l = strings.TrimRight(l, "\r\n")
		if i := strings.LastIndexByte(l, '\r'); i >= 0 {
			l = l[i+1:]
		}
		for _, r := range l {
			if r == '\t' || (r >= 0x20 && r != 0x7f && (r < 0x80 || r >= 0xa0)) {
				b.WriteRune(r)
			}
		}
		if nl {
			b.WriteByte('\n')
		}
	}
	return b.String()
}
