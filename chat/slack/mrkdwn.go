package slack

import (
	"regexp"
	"strings"
)

// mrkdwn converts the broker's Markdown (CommonMark as Discord reads it)
// to Slack's mrkdwn: **bold** to *bold*, *italic* to _italic_, ~~struck~~
// to ~struck~, [text](url) to <url|text>, headings to bold lines, list
// items to bullets; code spans and blocks are kept (a block's language
// dropped), their text untouched but for Slack's three escapes, and &,
// < and > are escaped everywhere else too, but in <@U…>, <#C…> and the
// links Slack writes so (never in a broadcast such as <!channel>). A "-# " line (small print) loses its marker: the
// blocks show it in a context block (see blocks).
func mrkdwn(md string) string {
	var b strings.Builder
	fence := false
	for i, line := range strings.Split(md, "\n") {
		if i > 0 {
			b.WriteByte('\n')
		}
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") && (fence || strings.Count(trimmed, "```") == 1) {
			// A fence line: Slack takes no language after it.
			fence = !fence
			b.WriteString("```")
			continue
		}
		if fence {
			b.WriteString(escape(line))
			continue
		}
		b.WriteString(mrkdwnLine(line))
	}
	return b.String()
}

var (
	headingLine = regexp.MustCompile(`^#{1,6}[ \t]+(.*?)[ \t#]*$`)
	bulletLine  = regexp.MustCompile(`^[-*+][ \t]+`)
)

// mrkdwnLine converts one line outside a code block.
func mrkdwnLine(line string) string {
	rest := strings.TrimLeft(line, " \t")
	indent := line[:len(line)-len(rest)]
	switch {
	case strings.HasPrefix(rest, "-# "):
		return indent + inline(rest[3:])
	case rest == ">" || strings.HasPrefix(rest, "> "):
		return "> " + mrkdwnLine(strings.TrimPrefix(strings.TrimPrefix(rest, ">"), " "))
	case headingLine.MatchString(rest):
		text := headingLine.FindStringSubmatch(rest)[1]
		if text == "" {
			return indent
		}
		return indent + "*" + inline(text) + "*"
	case bulletLine.MatchString(rest) && !isRule(rest):
		m := bulletLine.FindString(rest)
		return indent + "• " + inline(rest[len(m):])
	}
	return indent + inline(rest)
}

// isRule reports whether a line is a thematic break (---, ***).
func isRule(s string) bool {
	s = strings.ReplaceAll(s, " ", "")
	return len(s) >= 3 && (strings.Trim(s, "-") == "" || strings.Trim(s, "*") == "" || strings.Trim(s, "_") == "")
}

// inline converts the spans of a line.
func inline(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '`':
			n := run(s, i, '`')
			if j := closingRun(s, i+n, '`', n); j >= 0 {
				code := strings.ReplaceAll(s[i+n:j], "`", "'")
				if strings.TrimSpace(code) != "" {
					b.WriteString("`" + escape(code) + "`")
				} else {
					b.WriteString(escape(code))
				}
				i = j + n
				continue
			}
			b.WriteString(s[i : i+n])
			i += n
			continue
		case c == '\\' && i+1 < len(s) && isPunct(s[i+1]):
			b.WriteString(escape(s[i+1 : i+2]))
			i += 2
			continue
		case strings.HasPrefix(s[i:], "**") || strings.HasPrefix(s[i:], "__"):
			if j := closingPair(s, i+2, s[i:i+2]); j >= 0 {
				b.WriteString("*" + inline(s[i+2:j]) + "*")
				i = j + 2
				continue
			}
			b.WriteString(s[i : i+2])
			i += 2
			continue
		case strings.HasPrefix(s[i:], "~~"):
			if j := closingPair(s, i+2, "~~"); j >= 0 {
				b.WriteString("~" + inline(s[i+2:j]) + "~")
				i = j + 2
				continue
			}
		case c == '*':
			if j := closingStar(s, i); j >= 0 {
				b.WriteString("_" + inline(s[i+1:j]) + "_")
				i = j + 1
				continue
			}
		case c == '[':
			if text, url, end, ok := link(s, i); ok {
				b.WriteString("<" + escape(url) + "|" + escape(strings.ReplaceAll(text, "|", "¦")) + ">")
				i = end
				continue
			}
		case c == '<':
			if end := slackRef(s, i); end > 0 && s[i+1] != '!' { // a broadcast is escaped
				b.WriteString(s[i:end])
				i = end
				continue
			}
		}
		b.WriteString(escape(s[i : i+1]))
		i++
	}
	return b.String()
}

// escape escapes Slack's three control characters.
func escape(s string) string {
	if !strings.ContainsAny(s, "&<>") {
		return s
	}
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// run is how many c start s at i.
func run(s string, i int, c byte) int {
	n := 0
	for i+n < len(s) && s[i+n] == c {
		n++
	}
	return n
}

// closingRun finds a run of exactly n c at or after from.
func closingRun(s string, from int, c byte, n int) int {
	for j := from; j < len(s); {
		if s[j] != c {
			j++
			continue
		}
		m := run(s, j, c)
		if m == n {
			return j
		}
		j += m
	}
	return -1
}

// closingPair finds where a delimiter pair (**, __, ~~) opened before
// from closes: the inner text neither empty nor starting or ending with
// a space.
func closingPair(s string, from int, delim string) int {
	if from >= len(s) || s[from] == ' ' {
		return -1
	}
	j := strings.Index(s[from:], delim)
	if j <= 0 || s[from+j-1] == ' ' {
		return -1
	}
	return from + j
}

// closingStar finds the * that closes an emphasis opened by the single *
// at i (not part of a **): the inner text does not start or end with a
// space.
func closingStar(s string, i int) int {
	if i+1 >= len(s) || s[i+1] == ' ' || s[i+1] == '*' || (i > 0 && s[i-1] == '*') {
		return -1
	}
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '`':
			return -1 // a code span in between: leave it as written
		case s[j] == '*' && s[j-1] != ' ' && s[j-1] != '\\' && (j+1 == len(s) || s[j+1] != '*'):
			return j
		}
	}
	return -1
}

// link reads a Markdown link [text](url) at i, with an http(s) or mailto
// URL and no space in it.
func link(s string, i int) (text, url string, end int, ok bool) {
	close := strings.Index(s[i:], "](")
	if close < 0 {
		return "", "", 0, false
	}
	text = s[i+1 : i+close]
	rest := s[i+close+2:]
	paren := strings.IndexByte(rest, ')')
	if paren <= 0 || strings.ContainsAny(text, "[]") {
		return "", "", 0, false
	}
	url = rest[:paren]
	if strings.ContainsAny(url, " \t<>|") || !(strings.HasPrefix(url, "https://") || strings.HasPrefix(url, "http://") || strings.HasPrefix(url, "mailto:")) {
		return "", "", 0, false
	}
	if text == "" {
		text = url
	}
	return text, url, i + close + 2 + paren + 1, true
}

// slackRef is the end of a reference Slack reads at i (<@U…>, <#C…>,
// <!here>, <https://…>), 0 if there is none. mrkdwn escapes a broadcast
// (<!here>, <!channel>, <!everyone>, <!subteam^…>) all the same, so that
// nothing the app posts notifies a channel or a group.
func slackRef(s string, i int) int {
	rest := s[i:]
	gt := strings.IndexByte(rest, '>')
	if gt < 0 {
		return 0
	}
	inner := rest[1:gt]
	switch {
	case strings.HasPrefix(inner, "@") || strings.HasPrefix(inner, "#") || strings.HasPrefix(inner, "!"):
		id := strings.SplitN(inner[1:], "|", 2)[0]
		if id == "" || strings.TrimFunc(id, isIDRune) != "" {
			return 0
		}
	case strings.HasPrefix(inner, "http://") || strings.HasPrefix(inner, "https://") || strings.HasPrefix(inner, "mailto:"):
		if target, _, _ := strings.Cut(inner, "|"); strings.ContainsAny(target, " \t<") || strings.Contains(inner, "<") {
			return 0
		}
	default:
		return 0
	}
	return i + gt + 1
}

func isIDRune(r rune) bool {
	return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '^' || r == '_' || r == '-'
}

func isPunct(c byte) bool { return strings.IndexByte("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", c) >= 0 }

// plainText is what a user wrote, as a prompt: Slack's escapes undone,
// its links written out (<url|label> as "label (url)", or the URL alone
// when the label is the URL as typed), channels by name.
func plainText(s string) string {
	var b strings.Builder
	plain := 0 // where the text not yet written starts
	for i := 0; i < len(s); i++ {
		if s[i] != '<' {
			continue
		}
		end := slackRef(s, i)
		if end == 0 {
			continue
		}
		b.WriteString(unescape(s[plain:i]))
		inner := s[i+1 : end-1]
		target, label, hasLabel := strings.Cut(inner, "|")
		switch {
		case strings.HasPrefix(inner, "@"):
			b.WriteString("<" + inner + ">")
		case strings.HasPrefix(inner, "#"):
			if hasLabel && label != "" {
				b.WriteString("#" + label)
			} else {
				b.WriteString("<" + inner + ">")
			}
		case strings.HasPrefix(inner, "!"):
			name := strings.TrimPrefix(target, "!")
			if hasLabel && label != "" {
				name = strings.TrimPrefix(label, "@")
			}
			b.WriteString("@" + name)
		default:
			target, label = unescape(target), unescape(label)
			bare := strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(target, "https://"), "http://"), "mailto:")
			if !hasLabel || label == target || label == bare {
				b.WriteString(target)
			} else {
				b.WriteString(label + " (" + target + ")")
			}
		}
		plain = end
		i = end - 1
	}
	b.WriteString(unescape(s[plain:]))
	return b.String()
}

// unescape undoes Slack's escapes of &, < and >.
func unescape(s string) string {
	if !strings.Contains(s, "&") {
		return s
	}
	return strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&").Replace(s)
}
