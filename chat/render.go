package chat

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"acpbroker/acp"
)

// Transcript accumulates one turn's updates into chat text: tool calls as
// status lines, the plan as a checklist, thoughts optionally, and the
// answer. It is not safe for concurrent use.
type Transcript struct {
	ShowThoughts bool
	// Dir is the session's directory: files the agent names there may be
	// attached, within Limits.
	Dir    string
	Limits AttachLimits

	answer   strings.Builder
	thoughts strings.Builder
	tools    []toolLine
	plan     []acp.PlanEntry
	notices  []string
	switches []string // changes of model and mode the agent made itself
	files    []*Attachment
	held     int64 // bytes of files the agent sent
	seq      int   // numbers names of files the agent sent unnamed
}

type toolLine struct {
	id, title, status string
	// terminal is the end of the output of a terminal the tool call
	// holds, as last seen.
	terminal string
	content  []acp.ToolCallContent
	shown    []shownItem
}

// Add folds one update into the transcript. It reports whether the visible
// text changed.
func (t *Transcript) Add(u acp.Update) bool {
	switch u.Kind {
	case acp.UpdateMessageChunk:
		if u.Content != nil && u.Content.Type == "text" {
			t.answer.WriteString(u.Content.Text)
			return u.Content.Text != ""
		}
		if u.Content != nil {
			return t.message(u.Content)
		}
	case acp.UpdateThoughtChunk:
		if u.Content != nil && u.Content.Type == "text" {
			t.thoughts.WriteString(u.Content.Text)
			return t.ShowThoughts
		}
	case acp.UpdateToolCall, acp.UpdateToolCallUpdate:
		t.tool(u)
		return true
	case acp.UpdatePlan:
		t.plan = u.Entries
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
func (t *Transcript) Notice(s string) { t.notices = append(t.notices, s) }

// Answer is the answer text so far.
func (t *Transcript) Answer() string { return t.answer.String() }

func (t *Transcript) tool(u acp.Update) {
	for i := range t.tools {
		if t.tools[i].id == u.ToolCallID {
			if u.Terminal != nil {
				t.tools[i].terminal = TerminalTail(u.Terminal.Output, TerminalLines)
			}
			if u.Title != nil && *u.Title != "" {
				t.tools[i].title = *u.Title
			}
			if u.Status != "" {
				t.tools[i].status = u.Status
			}
			if u.ToolOutput != nil {
				t.toolContent(&t.tools[i], u.ToolOutput)
			}
			return
		}
	}
	if u.Terminal != nil {
		return // a terminal of a tool call not shown
	}
	l := toolLine{id: u.ToolCallID, status: u.Status, title: u.ToolCallID}
	if u.Title != nil && *u.Title != "" {
		l.title = *u.Title
	}
	if u.ToolOutput != nil {
		t.toolContent(&l, u.ToolOutput)
	}
	t.tools = append(t.tools, l)
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
	var b strings.Builder
	if t.ShowThoughts && t.thoughts.Len() > 0 {
		for _, line := range strings.Split(strings.TrimSpace(t.thoughts.String()), "\n") {
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
	}
	for _, s := range t.switches {
		b.WriteString("⚙️ " + s + "\n")
	}
	for _, n := range t.notices {
		b.WriteString("ℹ️ " + n + "\n")
	}
	if b.Len() > 0 && t.answer.Len() > 0 {
		b.WriteString("\n")
	}
	b.WriteString(t.answer.String())
	return b.String()
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
