// Package render turns one turn of a thread into safe HTML for the web
// front end: pure functions, no server, no state.
package render

import (
	"html"
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
}

// TurnHTML renders t. This form shows the agent's text as plain text,
// escaped.
func TurnHTML(t *Turn) template.HTML {
	var b strings.Builder
	b.WriteString("<pre>")
	b.WriteString(html.EscapeString(t.Prompt))
	b.WriteString("</pre><pre>")
	for _, u := range t.Updates {
		if u.Kind == acp.UpdateMessageChunk && u.Content != nil {
			b.WriteString(html.EscapeString(u.Content.Text))
		}
	}
	b.WriteString("</pre>")
	for _, n := range t.Notices {
		b.WriteString("<pre>" + html.EscapeString(n) + "</pre>")
	}
	if t.Done {
		b.WriteString("<pre>" + html.EscapeString(t.Outcome) + "</pre>")
	} else if t.Status != "" {
		b.WriteString("<pre>" + html.EscapeString(t.Status) + "</pre>")
	}
	return template.HTML(b.String())
}

// Markdown renders text written by a person or an agent as safe HTML;
// this form shows it as plain text, escaped.
func Markdown(text string) template.HTML {
	return template.HTML("<pre>" + html.EscapeString(text) + "</pre>")
}

// CSS is the stylesheet the classes of TurnHTML need; this form needs
// none.
func CSS() []byte { return nil }
