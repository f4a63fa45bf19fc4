package render

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"path"
	"strconv"
	"strings"
	"time"

	"acpbroker/acp"
	"acpbroker/chat"
	"acpbroker/internal/clip"
)

// Bounds of what one turn renders: of the prompt its first maxPrompt
// bytes; of the answer its first answerHead and last answerTail bytes, of
// the thoughts thoughtsKeep of each end; the first maxTools tool calls,
// maxPlan entries of the plan, maxFiles files shown, maxLocations
// locations of a tool call; the first and the
// last maxNotices/2 notices; a title, plan entry or notice cut to
// maxLine bytes; of all the tool calls' input and output, toolBytes in
// all, a raw input at most maxInput, a text or a terminal's output at most
// maxOutput (its end, for a terminal), a diff at most maxDiff of HTML.
// Input and output are counted before escaping, which makes each byte at
// most five.
const (
	maxPrompt    = 256 << 10
	answerHead   = 1 << 20
	answerTail   = 256 << 10
	thoughtsKeep = 64 << 10
	maxTools     = 256
	maxPlan      = 256
	maxFiles     = 256
	maxLocations = 16
	maxNotices   = 64
	maxLine      = 1 << 10
	toolBytes    = 4 << 20
	maxInput     = 16 << 10
	maxOutput    = 64 << 10
	maxDiff      = 256 << 10
)

// view is a turn's updates folded: what TurnHTML shows of them.
type view struct {
	answer, thoughts clip.Text
	tools            []*toolCall
	byID             map[string]*toolCall // at most maxTools
	moreTools        int                  // tool calls past maxTools, not shown
	plan             []acp.PlanEntry
	morePlan         int
	files            []string // what the agent showed in its answer, in words
	moreFiles        int
	switches         []string
	dir              string // the turn's working directory (Turn.Dir)
}

// toolCall is a tool call and its updates merged.
type toolCall struct {
	id, title, kind, status string
	input                   json.RawMessage
	content                 []acp.ToolCallContent
	locations               []acp.ToolCallLocation
	terminal                *acp.TerminalOutput
}

// fold merges the updates in order: the answer's and the thoughts' text
// joined, each tool call's updates into it by id, the last plan.
func fold(updates []acp.Update) *view {
	v := &view{answer: clip.New(answerHead, answerTail), thoughts: clip.New(thoughtsKeep, thoughtsKeep), byID: map[string]*toolCall{}}
	for i := range updates {
		u := &updates[i]
		switch u.Kind {
		case acp.UpdateMessageChunk:
			if u.Content == nil {
				continue
			}
			if u.Content.Type == "text" {
				v.answer.WriteString(u.Content.Text)
			} else if s := blockText(u.Content); s != "" {
				if len(v.files) < maxFiles {
					v.files = append(v.files, s)
				} else {
					v.moreFiles++
				}
			}
		case acp.UpdateThoughtChunk:
			if u.Content != nil && u.Content.Type == "text" {
				v.thoughts.WriteString(u.Content.Text)
			}
		case acp.UpdateToolCall, acp.UpdateToolCallUpdate:
			v.tool(u)
		case acp.UpdatePlan:
			n := min(len(u.Entries), maxPlan)
			v.plan, v.morePlan = u.Entries[:n], len(u.Entries)-n
		default:
			for _, s := range u.Switched {
				if len(v.switches) == maxNotices {
					v.switches = v.switches[1:]
				}
				v.switches = append(v.switches, chat.SwitchText(s))
			}
		}
	}
	return v
}

// tool merges a tool call's update into the call it names, or starts a
// call.
func (v *view) tool(u *acp.Update) {
	c := v.byID[u.ToolCallID]
	if c == nil {
		if u.Terminal != nil {
			return // the terminal of a call not shown
		}
		if len(v.tools) == maxTools {
			if u.Kind == acp.UpdateToolCall {
				v.moreTools++
			}
			return
		}
		c = &toolCall{id: u.ToolCallID}
		v.tools = append(v.tools, c)
		v.byID[u.ToolCallID] = c
	}
	if u.Title != nil && *u.Title != "" {
		c.title = *u.Title
	}
	if u.ToolKind != "" {
		c.kind = u.ToolKind
	}
	if u.Status != "" {
		c.status = u.Status
	}
	if u.RawInput != nil {
		c.input = u.RawInput
	}
	if u.ToolOutput != nil {
		c.content = u.ToolOutput
	}
	if u.Locations != nil {
		c.locations = u.Locations
	}
	if u.Terminal != nil {
		c.terminal = u.Terminal
	}
}

// esc is s as HTML text.
func esc(s string) string { return html.EscapeString(s) }

// line is s as one line of text, cut to maxLine bytes.
func line(s string) string { return esc(strings.Join(strings.Fields(clip.Cut(s, maxLine)), " ")) }

// blocks renders the turn as its blocks, in order.
func (v *view) blocks(t *Turn) []Block {
	md := &budget{highlight: maxHighlight}
	var out []Block
	var b strings.Builder
	// done ends the block id with what b holds, if anything.
	done := func(id string) {
		if b.Len() > 0 {
			out = append(out, Block{ID: id, HTML: `<div data-block="` + id + `">` + b.String() + "</div>"})
		}
		b.Reset()
	}
	b.WriteString(`<header class="turn-head">`)
	if t.Author != "" {
		b.WriteString(`<span class="author">` + line(t.Author) + `</span> `)
	}
	if !t.Started.IsZero() {
		b.WriteString(`<time datetime="` + t.Started.UTC().Format(time.RFC3339) + `">` + t.Started.UTC().Format("2 Jan 2006 15:04:05 UTC") + `</time>`)
	}
	b.WriteString("</header>\n")
	done("head")
	if t.Prompt != "" {
		b.WriteString(`<div class="prompt md">`)
		writeMarkdown(&b, md, clip.Cut(t.Prompt, maxPrompt))
		b.WriteString("</div>\n")
	}
	done("prompt")
	if v.thoughts.Len() > 0 {
		b.WriteString(`<details class="thoughts"><summary>Thoughts</summary><div class="md">`)
		v.writeKept(&b, md, &v.thoughts, "of the thoughts")
		b.WriteString("</div></details>\n")
	}
	done("thoughts")
	v.writeTools(&b, done)
	v.writePlan(&b)
	done("plan")
	if v.answer.Len() > 0 {
		b.WriteString(`<div class="answer md">`)
		v.writeKept(&b, md, &v.answer, "of the answer")
		b.WriteString("</div>\n")
	}
	done("answer")
	writeList(&b, "files", "Files shown", v.files, v.moreFiles, "files")
	done("files")
	v.writeUnanswered(&b, t)
	done("unanswered")
	v.writeNotices(&b, t.Notices)
	done("notices")
	b.WriteString(`<footer class="turn-foot">`)
	if t.Done {
		b.WriteString(`<span class="outcome">` + line(t.Outcome) + `</span>`)
	} else if t.Status != "" {
		b.WriteString(`<span class="status">` + line(t.Status) + `</span>`)
	}
	if t.Usage != "" {
		b.WriteString(` <span class="usage">` + line(t.Usage) + `</span>`)
	}
	b.WriteString("</footer>\n")
	done("foot")
	return out
}

// writeKept renders what c keeps from Markdown: its start, and past the
// bound a line saying how much is left out and its end, each a document
// of its own, so that a block open at the cut ends there.
func (v *view) writeKept(b *strings.Builder, md *budget, c *clip.Text, of string) {
	head, left, tail := c.Parts()
	writeMarkdown(b, md, head)
	if left == 0 {
		return
	}
	omitted(b, chat.Bytes(left)+" "+of+" left out here")
	writeMarkdown(b, md, tail)
}

// writeList writes items already in HTML as a titled list, with a line
// for those past its bound.
func writeList(b *strings.Builder, class, title string, items []string, more int, what string) {
	if len(items) == 0 && more == 0 {
		return
	}
	b.WriteString(`<section class="` + class + `"><h3>` + title + `</h3><ul>`)
	for _, it := range items {
		b.WriteString("<li>" + it + "</li>")
	}
	b.WriteString("</ul>")
	if more > 0 {
		omitted(b, fmt.Sprintf("and %d more %s", more, what))
	}
	b.WriteString("</section>\n")
}

// writeUnanswered writes the requests the turn had open when it ended,
// each as ended, and why: the turn's end.
func (v *view) writeUnanswered(b *strings.Builder, t *Turn) {
	if len(t.Unanswered) == 0 {
		return
	}
	cause := t.Outcome
	if cause == "" {
		cause = "the turn ended"
	}
	b.WriteString(`<section class="unanswered"><h3>Not answered</h3><ul>`)
	for _, u := range t.Unanswered {
		what, title := "Permission needed", inDirWords(v.dir, u.Title)
		if u.Question {
			what, title = "The agent asked", u.Title
		}
		b.WriteString(`<li class="ask-ended"><strong>` + what + `</strong>: ` + line(title) +
			`<br><span class="ask-cause">Ended without an answer, with the turn: ` + line(cause) + "</span></li>")
	}
	b.WriteString("</ul></section>\n")
}

// writeNotices writes the agent's own switches and the broker's notices:
// the first and the last maxNotices/2 of these.
func (v *view) writeNotices(b *strings.Builder, notices []string) {
	all := append(v.switches[:len(v.switches):len(v.switches)], notices...)
	if len(all) == 0 {
		return
	}
	b.WriteString(`<ul class="notices">`)
	item := func(s string) { b.WriteString("<li>" + line(s) + "</li>") }
	if len(all) <= maxNotices {
		for _, s := range all {
			item(s)
		}
	} else {
		for _, s := range all[:maxNotices/2] {
			item(s)
		}
		b.WriteString(`<li class="omitted">… ` + strconv.Itoa(len(all)-maxNotices) + ` more notices …</li>`)
		for _, s := range all[len(all)-maxNotices/2:] {
			item(s)
		}
	}
	b.WriteString("</ul>\n")
}

// planStatus and planPriority are the classes of the plan's values; an
// agent's other words get none.
var (
	planStatus   = map[string]string{"pending": "plan-pending", "in_progress": "plan-in-progress", "completed": "plan-completed"}
	planWord     = map[string]string{"pending": "to do", "in_progress": "doing", "completed": "done"}
	planPriority = map[string]string{"high": "prio-high", "medium": "prio-medium", "low": "prio-low"}
)

// writePlan writes the agent's last plan, each entry with its status and
// priority.
func (v *view) writePlan(b *strings.Builder) {
	if len(v.plan) == 0 {
		return
	}
	b.WriteString(`<section class="plan"><h3>Plan</h3><ol>`)
	for _, e := range v.plan {
		class := strings.TrimSpace(planStatus[e.Status] + " " + planPriority[e.Priority])
		word := planWord[e.Status]
		if word == "" {
			word = e.Status
		}
		if class != "" {
			class = ` class="` + class + `"`
		}
		b.WriteString(`<li` + class + `><span class="plan-status">` + line(word) + `</span> `)
		if e.Priority != "" {
			b.WriteString(`<span class="plan-priority">` + line(e.Priority) + `</span> `)
		}
		b.WriteString(`<span class="plan-content">` + line(e.Content) + "</span></li>")
	}
	b.WriteString("</ol>")
	if v.morePlan > 0 {
		omitted(b, fmt.Sprintf("and %d more steps", v.morePlan))
	}
	b.WriteString("</section>\n")
}

// toolKinds are ACP's tool kinds; each has a class, others none.
var toolKinds = map[string]bool{"read": true, "edit": true, "delete": true, "move": true, "search": true, "execute": true, "think": true, "fetch": true, "switch_mode": true, "other": true}

// writeTools writes each tool call, folded, its summary its status, kind
// and title, its body its input, output, diffs and locations, within
// toolBytes for all the bodies; each call is a block of its own
// ("tool-" and its place in the turn), ended by done.
func (v *view) writeTools(b *strings.Builder, done func(id string)) {
	left := toolBytes
	for i, c := range v.tools {
		word := chat.ToolStatusWord(c.status)
		class := "tool tool-" + word
		if toolKinds[c.kind] {
			class += " tool-kind-" + strings.ReplaceAll(c.kind, "_", "-")
		}
		b.WriteString(`<details class="` + class + `"><summary><span class="tool-status">` + word + `</span> `)
		if c.kind != "" {
			b.WriteString(`<span class="tool-kind">` + line(c.kind) + `</span> `)
		}
		title := c.title
		if title == "" {
			title = c.id
		}
		title = inDirWords(v.dir, title)
		b.WriteString(`<span class="tool-title">` + line(title) + "</span></summary>\n")
		if left <= 0 {
			omitted(b, "this tool call's input and output are left out: the turn shows "+chat.Bytes(toolBytes)+" of them in all")
		} else {
			left -= c.writeBody(b, left, v.dir)
		}
		b.WriteString("</details>\n")
		done("tool-" + strconv.Itoa(i))
	}
	if v.moreTools > 0 {
		omitted(b, fmt.Sprintf("and %d more tool calls, not shown", v.moreTools))
	}
	done("tools-more")
}

// writeBody writes the tool call's input, content and locations, using at
// most about left bytes of what the agent sent, and returns how many it
// used.
func (c *toolCall) writeBody(b *strings.Builder, left int, dir string) int {
	used := 0
	take := func(s string, most int, tail bool) (string, int) {
		most = min(most, left-used)
		if most < 0 {
			most = 0
		}
		if len(s) <= most {
			used += len(s)
			return s, 0
		}
		used += most
		if tail {
			cut := len(s) - most
			for cut < len(s) && !isRuneStart(s[cut]) {
				cut++
			}
			return s[cut:], cut
		}
		kept := strings.TrimSuffix(clip.Cut(s, most), "…")
		return kept, len(s) - len(kept)
	}
	if in := inDirWords(dir, prettyJSON(c.input)); in != "" {
		s, more := take(in, maxInput, false)
		b.WriteString(`<div class="tool-input"><h4>Input</h4><pre>` + esc(s) + "</pre>")
		if more > 0 {
			omitted(b, chat.Bytes(int64(more))+" more of the input left out")
		}
		b.WriteString("</div>\n")
	}
	for _, it := range c.content {
		switch it.Type {
		case "content":
			if it.Content == nil {
				continue
			}
			if it.Content.Type == "text" {
				s, more := take(it.Content.Text, maxOutput, false)
				b.WriteString(`<pre class="tool-output">` + esc(s) + "</pre>\n")
				if more > 0 {
					omitted(b, chat.Bytes(int64(more))+" more of the output left out")
				}
			} else if s := blockText(it.Content); s != "" {
				b.WriteString(`<p class="tool-file">` + s + "</p>\n")
			}
		case "diff":
			used += writeDiff(b, it, shownPath(dir, it.Path), min(maxDiff, max(left-used, 0)))
		case "terminal":
			if c.terminal == nil || (it.TerminalID != "" && c.terminal.ID != it.TerminalID) {
				b.WriteString(`<p class="terminal-none">terminal ` + line(it.TerminalID) + ": no output yet</p>\n")
				continue
			}
			out := inDirWords(dir, terminalText(c.terminal.Output))
			s, more := take(out, maxOutput, true)
			b.WriteString(`<div class="terminal">`)
			if more > 0 || c.terminal.Truncated {
				omitted(b, "the start of the output is left out")
			}
			b.WriteString(`<pre class="terminal-output">` + esc(s) + "</pre>")
			if e := c.terminal.Exit; e != nil {
				switch {
				case e.ExitCode != nil:
					b.WriteString(`<p class="terminal-exit">exited with ` + strconv.Itoa(*e.ExitCode) + "</p>")
				case e.Signal != nil:
					b.WriteString(`<p class="terminal-exit">killed by ` + line(*e.Signal) + "</p>")
				}
			}
			b.WriteString("</div>\n")
		}
	}
	if len(c.locations) > 0 {
		b.WriteString(`<ul class="tool-locations">`)
		for i, l := range c.locations {
			if i == maxLocations {
				b.WriteString(`<li class="omitted">… ` + strconv.Itoa(len(c.locations)-i) + " more …</li>")
				break
			}
			s := shownPath(dir, l.Path)
			if l.Line != nil {
				s += ":" + strconv.Itoa(*l.Line)
			}
			b.WriteString("<li><code>" + line(s) + "</code></li>")
		}
		b.WriteString("</ul>\n")
	}
	return used
}

func isRuneStart(c byte) bool { return c&0xC0 != 0x80 }

// prettyJSON is raw indented, "" for nothing to show; raw that is not
// JSON is shown as sent.
func prettyJSON(raw json.RawMessage) string {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" || s == "{}" {
		return ""
	}
	if len(s) > maxInput {
		return s // indenting would only grow what is cut
	}
	var out bytes.Buffer
	if json.Indent(&out, raw, "", "  ") != nil {
		return s
	}
	return out.String()
}

// inDirWords is text with the paths in it that start with dir shown
// relative to it: dir and its slash taken away where a path starts (at
// the start of text, or after a character no path has inside it).
func inDirWords(dir, text string) string {
	prefix := strings.TrimSuffix(path.Clean(dir), "/") + "/"
	if dir == "" || prefix == "/" {
		return text
	}
	var b strings.Builder
	for {
		i := strings.Index(text, prefix)
		if i < 0 {
			b.WriteString(text)
			return b.String()
		}
		if i > 0 && (isWordByte(text[i-1]) || strings.IndexByte(pathChars, text[i-1]) >= 0) {
			b.WriteString(text[:i+len(prefix)])
		} else {
			b.WriteString(text[:i])
		}
		text = text[i+len(prefix):]
	}
}

// InDirWords is text with the paths in it inside dir shown relative to
// dir, as a turn shows its tool calls' titles, input and output.
func InDirWords(dir, text string) string { return inDirWords(dir, text) }

// pathChars are the characters, besides letters and digits, that a path
// has inside it.
const pathChars = "/._-~+"

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// shownPath is p relative to dir when it is inside it (chat.InDir), as
// the chat shows it; p itself otherwise.
func shownPath(dir, p string) string {
	if r := chat.InDir(dir, p); r != "" {
		return r
	}
	return p
}

// writeDiff writes a diff item, of the file name, as a unified diff, each line classed as
// added, removed, a hunk's head or a file's, in at most about most bytes
// of HTML; it returns the bytes written.
func writeDiff(b *strings.Builder, it acp.ToolCallContent, name string, most int) int {
	d := chat.UnifiedDiff(name, it.OldText, it.NewText)
	b.WriteString(`<div class="diff"><h4><span class="diff-path">` + line(name) + `</span>`)
	if d.Text == "" {
		b.WriteString(" no change</h4></div>\n")
		return 0
	}
	b.WriteString(` <span class="diff-added">+` + strconv.Itoa(d.Added) + `</span> <span class="diff-removed">−` + strconv.Itoa(d.Removed) + "</span></h4>\n<pre>")
	used, shown := 0, 0
	for l := range strings.Lines(d.Text) {
		if used+len(l) > most {
			b.WriteString("</pre>")
			omitted(b, chat.Bytes(int64(len(d.Text)-shown))+" more of the diff left out")
			b.WriteString("</div>\n")
			return used
		}
		shown += len(l)
		class := "diff-ctx"
		switch {
		case strings.HasPrefix(l, "+++ "), strings.HasPrefix(l, "--- "):
			class = "diff-file"
		case strings.HasPrefix(l, "@@"):
			class = "diff-hunk"
		case strings.HasPrefix(l, "+"):
			class = "diff-add"
		case strings.HasPrefix(l, "-"):
			class = "diff-del"
		case strings.HasPrefix(l, `\`):
			class = "diff-note"
		}
		span := `<span class="` + class + `">` + esc(strings.TrimSuffix(l, "\n")) + "</span>\n"
		used += len(span)
		b.WriteString(span)
	}
	b.WriteString("</pre></div>\n")
	return used
}

// blockText says in HTML what a content block other than text shows: a
// file's name and where it is, an image's or an embedded file's type and
// size; nothing is fetched, loaded or linked.
func blockText(c *acp.ContentBlock) string {
	switch c.Type {
	case "resource_link":
		name := c.Name
		if name == "" {
			name = path.Base(c.URI)
		}
		s := `<span class="file-name">` + line(name) + `</span>`
		if c.URI != "" && c.URI != name {
			s += ` <code class="file-uri">` + line(c.URI) + `</code>`
		}
		return s
	case "resource":
		if c.Resource == nil {
			return ""
		}
		size := len(c.Resource.Text) + len(c.Resource.Blob)*3/4
		return `<span class="file-name">` + line(path.Base(c.Resource.URI)) + `</span> <span class="file-size">` + esc(chat.Bytes(int64(size))) + `</span>`
	case "image", "audio":
		s := `<span class="file-name">` + c.Type
		if c.MimeType != "" {
			s += " (" + line(c.MimeType) + ")"
		}
		s += "</span>"
		if c.Data != "" {
			s += ` <span class="file-size">` + esc(chat.Bytes(int64(len(c.Data)*3/4))) + "</span>"
		} else if c.URI != "" {
			s += ` <code class="file-uri">` + line(c.URI) + "</code>"
		}
		return s + ", not shown"
	}
	return ""
}
