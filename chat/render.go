package chat

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"acpbroker/acp"
	"acpbroker/internal/clip"
)

// Transcript accumulates one turn's updates into chat text: tool calls as
// status lines, the plan as a checklist, thoughts optionally, and the
// answer. What it keeps is bounded whatever the agent sends (see the
// bounds below): past a bound it keeps the start and the end, or the
// first ones, and says how much it leaves out; rendering costs no more
// than what is kept. It is not safe for concurrent use.
type Transcript struct {
	ShowThoughts bool
	// Dir is the session's directory: files the agent names there may be
	// attached, within Limits.
	Dir    string
	Limits AttachLimits

	ready     bool // the bounded texts below are set up
	answer    clip.Text
	lineEnded bool // the answer so far is empty or ends with a newline
	thoughts  clip.Text
	tools     []toolLine
	moreTools int // tool calls past maxToolLines, not shown
	plan      []acp.PlanEntry
	morePlan  int // entries of the plan past maxPlanLines
	notices   notices
	switches  []string // changes of model and mode the agent made itself
	files     []*Attachment
	held      int64 // bytes of files the agent sent
	seq       int   // numbers names of files the agent sent unnamed
}

// Bounds of what a Transcript keeps: the first and last answerKeep bytes
// of the answer, and of the thoughts thoughtsKeep; the first maxToolLines
// tool calls and maxPlanLines entries of the plan; the first and the
// last maxNotices/2 notices; titles, plan entries and notices cut to
// maxLineBytes; a diff shown inline at most maxInlineDiff characters when
// AttachLimits say no less.
const (
	answerKeep    = 1 << 20
	thoughtsKeep  = 64 << 10
	maxToolLines  = 256
	maxPlanLines  = 64
	maxNotices    = 32
	maxLineBytes  = 1 << 10
	maxInlineDiff = 16 << 10
)

type toolLine struct {
	id, title, status string
	// terminal is the end of the output of a terminal the tool call
	// holds, as last seen.
	terminal string
	// content tells the tool call's content from a new one, without
	// keeping it: its length and a digest.
	content ContentSum
	shown   []shownItem
}

// setup makes the bounded texts, once: the zero Transcript is ready to use.
func (t *Transcript) setup() {
	if !t.ready {
		t.answer, t.thoughts, t.lineEnded, t.ready = clip.New(answerKeep, answerKeep), clip.New(thoughtsKeep, thoughtsKeep), true, true
	}
}

// writeAnswer adds text to the answer.
func (t *Transcript) writeAnswer(text string) {
	if text == "" {
		return
	}
	t.answer.WriteString(text)
	t.lineEnded = strings.HasSuffix(text, "\n")
}

// Add folds one update into the transcript. It reports whether the visible
// text changed.
func (t *Transcript) Add(u acp.Update) bool {
	t.setup()
	switch u.Kind {
	case acp.UpdateMessageChunk:
		if u.Content != nil && u.Content.Type == "text" {
			t.writeAnswer(u.Content.Text)
			return u.Content.Text != ""
		}
		if u.Content != nil {
			return t.message(u.Content)
		}
	case acp.UpdateThoughtChunk:
		if u.Content != nil && u.Content.Type == "text" && t.ShowThoughts {
			t.thoughts.WriteString(u.Content.Text)
			return true
		}
	case acp.UpdateToolCall, acp.UpdateToolCallUpdate:
		return t.tool(u)
	case acp.UpdatePlan:
		n := min(len(u.Entries), maxPlanLines)
		t.plan, t.morePlan = make([]acp.PlanEntry, n), len(u.Entries)-n
		for i, e := range u.Entries[:n] {
			t.plan[i] = acp.PlanEntry{Content: clip.Cut(e.Content, maxLineBytes), Status: clip.Cut(e.Status, 32)}
		}
		return true
	case acp.UpdateConfigOptions, acp.UpdateCurrentMode:
		for _, s := range u.Switched {
			if len(t.switches) == maxSwitchLines {
				t.switches = t.switches[1:]
			}
			t.switches = append(t.switches, SwitchText(s))
		}
		return len(u.Switched) > 0
	}
	return false
}

// maxSwitchLines bounds the agent's own switches a turn shows: the last.
const maxSwitchLines = 8

// SwitchText says a change of model or mode the agent made itself:
// "The agent switched mode to Plan".
func SwitchText(s acp.Switch) string {
	return "The agent switched " + s.What + " to " + oneLine(s.To, 100)
}

// Notice adds a line such as an automatic permission answer.
func (t *Transcript) Notice(s string) { t.notices.add(clip.Cut(s, maxLineBytes)) }

// Answer is the answer text so far: past its bound, its start and its
// end with a line saying how much is left out between them.
func (t *Transcript) Answer() string {
	t.setup()
	var b strings.Builder
	t.writeKept(&b, &t.answer, "of the answer")
	return b.String()
}

// AnswerLen is the length of the whole answer so far, in bytes, and
// whether some of it is left out of what is kept.
func (t *Transcript) AnswerLen() (int64, bool) {
	return t.answer.Len(), t.answer.Clipped()
}

// tool folds a tool call's update in, and reports whether what is shown
// changed.
func (t *Transcript) tool(u acp.Update) bool {
	for i := range t.tools {
		if t.tools[i].id == u.ToolCallID {
			l := &t.tools[i]
			if u.Terminal != nil {
				l.terminal = TerminalTail(u.Terminal.Output, TerminalLines)
			}
			if u.Title != nil && *u.Title != "" {
				l.title = clip.Cut(*u.Title, maxLineBytes)
			}
			if u.Status != "" {
				l.status = clip.Cut(u.Status, 32)
			}
			if u.ToolOutput != nil {
				t.toolContent(l, u.ToolOutput)
			}
			return true
		}
	}
	if u.Terminal != nil {
		return false // a terminal of a tool call not shown
	}
	if len(t.tools) == maxToolLines {
		// Counted once, when the agent makes it; its updates are let go.
		if u.Kind == acp.UpdateToolCall {
			t.moreTools++
			return true
		}
		return false
	}
	l := toolLine{id: u.ToolCallID, status: clip.Cut(u.Status, 32), title: clip.Cut(u.ToolCallID, maxLineBytes)}
	if u.Title != nil && *u.Title != "" {
		l.title = clip.Cut(*u.Title, maxLineBytes)
	}
	if u.ToolOutput != nil {
		t.toolContent(&l, u.ToolOutput)
	}
	t.tools = append(t.tools, l)
	return true
}

// writeKept writes what c keeps to b: whole, or its start and its end
// with a line between them saying how much of what is left out. A code
// block open at the cut is closed before the line, and one the end is
// inside is opened again after it.
func (t *Transcript) writeKept(b *strings.Builder, c *clip.Text, of string) {
	head, omitted, tail := c.Parts()
	b.WriteString(head)
	if omitted == 0 {
		return
	}
	if !strings.HasSuffix(head, "\n") {
		b.WriteString("\n")
	}
	if fences(head)%2 == 1 {
		b.WriteString("```\n")
	}
	fmt.Fprintf(b, "-# … %s %s left out here …\n", Bytes(omitted), of)
	if fences(tail)%2 == 1 {
		b.WriteString("```\n")
	}
	b.WriteString(tail)
}

// fences counts the lines of s that open or close a code block.
func fences(s string) int {
	n := 0
	for line := range strings.Lines(s) {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			n++
		}
	}
	return n
}

// notices keeps the first and the last maxNotices/2 of a turn's notices,
// and counts those between.
type notices struct {
	first, last []string
	omitted     int
}

func (n *notices) add(s string) {
	switch {
	case len(n.first) < maxNotices/2:
		n.first = append(n.first, s)
	case len(n.last) < maxNotices/2:
		n.last = append(n.last, s)
	default:
		n.omitted++
		n.last = append(n.last[1:], s)
	}
}

// ToolStatusWord maps an ACP tool status to the word shown.
func ToolStatusWord(status string) string {
	switch status {
	case "completed":
		return "done"
	case "failed":
		return "failed"
	default:
		return "running"
	}
}

var toolIcon = map[string]string{"running": "⏳", "done": "✅", "failed": "❌"}

// Render returns the transcript as Markdown: thoughts (quoted, if shown),
// tool lines, plan, notices, then the answer.
func (t *Transcript) Render() string {
	b := t.renderTop()
	t.writeKept(b, &t.answer, "of the answer")
	return b.String()
}

// RenderHead returns at most about limit bytes of what Render returns
// (more when what comes before the answer is longer), without rendering
// the rest, and whether Render's is longer: what a view that shows only
// the start needs, at a cost that does not grow with the answer.
func (t *Transcript) RenderHead(limit int) (string, bool) {
	b := t.renderTop()
	if need := limit - b.Len(); need < 0 {
		s := b.String()
		return s[:runeStart(s, limit)], true
	} else if need < answerKeep && t.answer.Len() > int64(need) {
		b.WriteString(t.answer.Prefix(need))
		return b.String(), true
	}
	t.writeKept(b, &t.answer, "of the answer")
	if b.Len() > limit {
		s := b.String()
		return s[:runeStart(s, limit)], true
	}
	return b.String(), false
}

// runeStart is the largest offset at most n that starts a character of s.
func runeStart(s string, n int) int {
	n = min(n, len(s))
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}

// renderTop writes what comes before the answer.
func (t *Transcript) renderTop() *strings.Builder {
	t.setup()
	var b strings.Builder
	if t.ShowThoughts && t.thoughts.Len() > 0 {
		var th strings.Builder
		t.writeKept(&th, &t.thoughts, "of the thoughts")
		for _, line := range strings.Split(strings.TrimSpace(th.String()), "\n") {
			b.WriteString("> 💭 " + line + "\n")
		}
	}
	for _, l := range t.tools {
		w := ToolStatusWord(l.status)
		fmt.Fprintf(&b, "%s `%s` %s\n", toolIcon[w], oneLine(l.title, 120), w)
		for _, it := range l.shown {
			b.WriteString(it.text + "\n")
		}
		if l.terminal != "" {
			b.WriteString("```\n" + l.terminal + "\n```\n")
		}
	}
	if t.moreTools > 0 {
		fmt.Fprintf(&b, "-# … and %d more tool calls, not shown\n", t.moreTools)
	}
	if len(t.plan) > 0 {
		b.WriteString("**Plan**\n")
		for _, e := range t.plan {
			box := "☐"
			switch e.Status {
			case "completed":
				box = "☑"
			case "in_progress":
				box = "▶"
			}
			fmt.Fprintf(&b, "%s %s\n", box, oneLine(e.Content, 200))
		}
		if t.morePlan > 0 {
			fmt.Fprintf(&b, "-# … and %d more steps\n", t.morePlan)
		}
	}
	for _, s := range t.switches {
		b.WriteString("⚙️ " + s + "\n")
	}
	for _, n := range t.notices.first {
		b.WriteString("ℹ️ " + n + "\n")
	}
	if t.notices.omitted > 0 {
		fmt.Fprintf(&b, "-# … %d more notices …\n", t.notices.omitted)
	}
	for _, n := range t.notices.last {
		b.WriteString("ℹ️ " + n + "\n")
	}
	if b.Len() > 0 && t.answer.Len() > 0 {
		b.WriteString("\n")
	}
	return &b
}

// TerminalLines is how many of a terminal's last lines a tool call shows.
const TerminalLines = 5

// terminalLineMax caps one line of terminal output shown, in characters.
const terminalLineMax = 120

// ansiEscape matches a terminal's colour and cursor sequences.
var ansiEscape = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)

// TerminalTail is the last n lines of a terminal's output, fit to show in
// a code block: a line redrawn with carriage returns is shown as it last
// was, colour sequences and control characters are dropped, each line is cut to 120
// characters, and nothing can close the block early.
func TerminalTail(output string, n int) string {
	lines := strings.Split(strings.TrimRight(output, "\r\n"), "\n")
	lines = lines[max(len(lines)-n, 0):]
	for i, l := range lines {
		l = strings.TrimRight(l, "\r")
		if j := strings.LastIndexByte(l, '\r'); j >= 0 {
			l = l[j+1:]
		}
		l = ansiEscape.ReplaceAllString(l, "")
		l = strings.Map(func(r rune) rune {
			if r == '\t' || (r >= 0x20 && r != 0x7f && (r < 0x80 || r >= 0xa0)) {
				return r
			}
			return -1
		}, l)
		l = strings.ReplaceAll(l, "```", "'''")
		if r := []rune(l); len(r) > terminalLineMax {
			l = string(r[:terminalLineMax-1]) + "…"
		}
		lines[i] = l
	}
	return strings.Trim(strings.Join(lines, "\n"), "\n")
}

func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > max {
		s = string(r[:max-1]) + "…"
	}
	return strings.ReplaceAll(s, "`", "'")
}

// Split cuts Markdown into pieces of at most max characters (runes),
// preferring line breaks, and never leaves a code fence open across a cut:
// a fence open at a cut is closed there and reopened, with its language, at
// the start of the next piece.
func Split(text string, max int) []string {
	if max < 32 {
		max = 32
	}
	var pieces []string
	var cur []string // lines of the current piece
	curLen := 0
	fence := "" // the opening fence line while inside a code block
	flush := func() {
		if len(cur) == 0 {
			return
		}
		p := strings.Join(cur, "\n")
		if fence != "" {
			p += "\n```"
		}
		pieces = append(pieces, p)
		cur, curLen = nil, 0
		if fence != "" {
			cur, curLen = []string{fence}, runeLen(fence)
		}
	}
	reserve := 4 // room for a closing "\n```"
	for _, line := range strings.Split(text, "\n") {
		n := runeLen(line)
		for {
			room := max - reserve - curLen
			if len(cur) > 0 {
				room-- // the newline joining this line
			}
			if n <= room {
				break
			}
			if room > 0 && (len(cur) == 0 || (fence != "" && len(cur) == 1)) {
				// A single line longer than a piece: cut it hard. Only
				// the head is walked, so a huge line costs its length
				// once, not once per piece.
				cut := runeOffset(line, room)
				cur = append(cur, line[:cut])
				curLen += room + 1
				line, n = line[cut:], n-room
			}
			flush()
		}
		cur = append(cur, line)
		if len(cur) > 1 {
			curLen++
		}
		curLen += n
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			if fence == "" {
				fence = strings.TrimSpace(line)
			} else {
				fence = ""
			}
		}
	}
	if len(cur) > 0 && !(fence != "" && len(cur) == 1 && len(pieces) > 0 && cur[0] == fence) {
		p := strings.Join(cur, "\n")
		pieces = append(pieces, p)
	}
	return pieces
}

func runeLen(s string) int { return utf8.RuneCountInString(s) }

// runeOffset is the byte offset of the n-th rune of s (len(s) if s is
// shorter).
func runeOffset(s string, n int) int {
	for i := range s {
		if n == 0 {
			return i
		}
		n--
	}
	return len(s)
}
