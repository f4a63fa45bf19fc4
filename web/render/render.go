package render

import (
	"html/template"
	"strings"
	"time"

	"acpbroker/acp"
)

// Turn is one turn of a thread as a page shows it.
type Turn struct {
	Prompt  string // what the person wrote (Markdown)
	Author  string // who wrote it, for people
	Started time.Time
	Updates []acp.Update // the agent's updates in order, as acp delivers them
	Notices []string     // the broker's notices in words (chat.NoticeText), in order
	Status  string       // the prompt's status in words while not done (chat.StatusText)
	Done    bool
	Outcome string // the end in words when Done (as the chat footer says it)
	Usage   string // usage in words, "" if none (chat.UsageText)
	// Dir is the turn's working directory ("" if unknown): the paths of
	// its tool calls and diffs inside it are shown relative to it.
	Dir string
	// Unanswered are the permission requests and questions the turn had
	// open when it ended: shown as ended, Outcome their cause.
	Unanswered []Unanswered
}

// Unanswered is a permission request or a question that ended without an
// answer, with its turn.
type Unanswered struct {
	Question bool
	Title    string // the tool call's title, or the question's message
}

// TurnHTML renders t: the answer from Markdown (raw HTML escaped, links
// http/https only with rel="noopener noreferrer nofollow", no
// javascript:/data: URLs), code highlighted with CSS classes (no inline
// style), thoughts folded (<details>), each tool call with its input and
// output, diffs as diffs, the plan, files the agent showed, usage.
//
// What one turn renders is bounded whatever it holds (see the bounds in
// turn.go): past a bound, a line says what is left out.
func TurnHTML(t *Turn) template.HTML {
	if t == nil {
		return ""
	}
	class, blocks := TurnBlocks(t)
	var b strings.Builder
	b.WriteString(`<article class="` + class + `">`)
	for _, bl := range blocks {
		b.WriteString(bl.HTML)
	}
	b.WriteString("</article>\n")
	return template.HTML(b.String())
}

// Block is one part of a turn's rendering, which changes on its own as
// the turn goes on: its header, prompt, thoughts, each tool call, the
// plan, the answer, the files shown, the notices, its footer. Its HTML is
// one element, <div data-block="ID">; TurnHTML is the turn's blocks in
// order, nothing between them, in an <article> of the turn's class. A block's ID is the
// broker's own word (never the agent's) and names the same part in every
// rendering of the turn.
type Block struct {
	ID   string
	HTML string
}

// TurnBlocks renders t as TurnHTML does, as the class of its <article>
// and its blocks in order.
func TurnBlocks(t *Turn) (class string, blocks []Block) {
	v := fold(t.Updates)
	v.dir = t.Dir
	class = "turn turn-running"
	if t.Done {
		class = "turn turn-done"
	}
	return class, v.blocks(t)
}
