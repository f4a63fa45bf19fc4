package console

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"acpbroker/chat"
	"acpbroker/chat/thread"
)

// platform is the Console as package thread drives it. A terminal cannot
// change what it printed: a message posted is printed; an edit prints
// the lines of the message that are new or changed, in order (an
// answer's next words continue its line); its buttons are printed
// numbered when they change. A conversation's thread is Thread or
// "console-" and a number, all in Channel; a message's id is its number
// in the order printed or typed, its Ref thread/id.
type platform Console

func (p *platform) console() *Console { return (*Console)(p) }

// message is what the console printed of one message.
type message struct {
	id, where string
	lines     []string // its text's whole lines, as last shown
	partial   string   // and its unfinished last line
	actions   []thread.Action
	marks     []thread.Mark
}

// Post implements thread.Platform: the message is printed.
func (p *platform) Post(ctx context.Context, where string, v thread.View) (string, error) {
	c := p.console()
	c.mu.Lock()
	defer c.mu.Unlock()
	m := &message{id: c.nextIDLocked(), where: where}
	c.keepLocked(m)
	c.showLocked(m, v)
	return m.id, nil
}

// Edit implements thread.Platform: what changed is printed. A message
// the console no longer remembers is printed whole.
func (p *platform) Edit(ctx context.Context, where, id string, v thread.View) error {
	c := p.console()
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.msgs[id]
	if m == nil {
		m = &message{id: id, where: where}
		c.keepLocked(m)
	}
	c.showLocked(m, v)
	return nil
}

// Delete implements thread.Platform: the message's buttons no longer
// take a number; what was printed stays.
func (p *platform) Delete(ctx context.Context, where, id string) error {
	c := p.console()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.choices == id {
		c.choices = ""
	}
	if m := c.msgs[id]; m != nil {
		m.actions = nil
	}
	return nil
}

// Mark implements thread.Platform: the console keeps its marks, to
// tell which turns have ended; it prints none (the answer's last line
// says how its turn ended).
func (p *platform) Mark(ctx context.Context, where, id string, mk thread.Mark, on bool) error {
	c := p.console()
	c.mu.Lock()
	defer c.mu.Unlock()
	switch mk {
	case thread.MarkQueued, thread.MarkWorking:
		if on {
			c.trackLocked(id, true)
		}
	default:
		c.trackLocked(id, false)
	}
	m := c.msgs[id]
	if m == nil {
		return nil
	}
	if i := slices.Index(m.marks, mk); i >= 0 && !on {
		m.marks = slices.Delete(m.marks, i, i+1)
	} else if i < 0 && on {
		m.marks = append(m.marks, mk)
	}
	return nil
}

// Marks implements thread.Platform.
func (p *platform) Marks(ctx context.Context, where, id string) ([]thread.Mark, error) {
	c := p.console()
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.msgs[id]; m != nil {
		return slices.Clone(m.marks), nil
	}
	return nil, nil
}

// OpenThread implements thread.Platform: a new conversation, which the
// lines typed from now on go to.
func (p *platform) OpenThread(ctx context.Context, channel, id, name string) (string, error) {
	c := p.console()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.current = fmt.Sprintf("%s-%d", Thread, time.Now().UnixNano())
	c.term.write(fmt.Sprintf("[new conversation “%s”: the next message goes there]\n", name))
	if c.opening != nil {
		c.opening.settle()
		c.opening = nil
	}
	return c.current, nil
}

// Thread implements thread.Platform: every conversation of the
// console's is in Channel.
func (p *platform) Thread(ctx context.Context, where string) (string, error) {
	if where == Thread || strings.HasPrefix(where, Thread+"-") {
		return Channel, nil
	}
	return "", fmt.Errorf("%w: %q is not a conversation of the console's", thread.ErrNotFound, where)
}

// Starter implements thread.Platform: whoever types at the terminal.
func (p *platform) Starter(ctx context.Context, channel, thread string) (string, error) {
	return p.user.ID, nil
}

// History implements thread.Platform: a terminal keeps nothing to read
// back.
func (p *platform) History(ctx context.Context, thread, after string) ([]thread.Past, error) {
	return nil, nil
}

// Locate implements thread.Platform: a Ref is thread/id.
func (p *platform) Locate(ref string) (where, id, link string, ok bool) {
	where, id, ok = strings.Cut(ref, "/")
	return where, id, "", ok && where != "" && id != ""
}

// Download implements thread.Platform: nothing typed at a terminal is
// attached.
func (p *platform) Download(ctx context.Context, f thread.Attachment, limit int64) ([]byte, error) {
	return nil, fmt.Errorf("%w: the console takes no attachments", thread.ErrNotFound)
}

// Usage implements thread.Platform: "/config mode <value>".
func (p *platform) Usage(command string, args ...thread.Arg) string {
	s := "/" + command
	for _, a := range args {
		if a.Value == "" {
			s += " <" + a.Name + ">"
		} else {
			s += " " + a.Value
		}
	}
	return s
}

// Rename implements thread.Renamer: the agent's title for the
// conversation is printed.
func (p *platform) Rename(ctx context.Context, thread, title string) error {
	p.console().printf("[title] %s\n", title)
	return nil
}

// keepLocked remembers m, forgetting the oldest past maxMessages.
func (c *Console) keepLocked(m *message) {
	c.msgs[m.id] = m
	c.order = append(c.order, m.id)
	if len(c.order) > maxMessages {
		old := c.order[0]
		c.order = c.order[1:]
		delete(c.msgs, old)
		if c.choices == old {
			c.choices = ""
		}
	}
}

// showLocked prints what m shows now that it did not: see platform.
func (c *Console) showLocked(m *message, v thread.View) {
	text := terminalText(v.Text)
	lines := strings.Split(text, "\n")
	whole, partial := lines[:len(lines)-1], lines[len(lines)-1]
	var b strings.Builder
	for _, line := range chat.AddedLines(m.lines, whole) {
		if m.partial != "" && c.term.continues(m) {
			// The first new line: it ends the unfinished one, or that
			// one changed and stays as it was printed.
			if rest, ok := strings.CutPrefix(line, m.partial); ok {
				b.WriteString(rest + "\n")
				m.partial = ""
				continue
			}
			c.term.lineBreak()
		}
		m.partial = ""
		b.WriteString(line + "\n")
	}
	if b.Len() > 0 {
		c.streamLocked(m, b.String())
	}
	switch rest, ok := strings.CutPrefix(partial, m.partial); {
	case partial == m.partial:
	case ok && m.partial != "" && c.term.continues(m):
		c.streamLocked(m, rest)
	default:
		if m.partial != "" {
			c.term.lineBreak()
		}
		c.streamLocked(m, partial)
	}
	m.lines, m.partial = whole, partial
	complete := v.Outcome || len(v.Files) > 0 || !sameActions(m.actions, v.Actions)
	if complete && c.term.owner == m {
		c.term.lineBreak()
		m.partial = "" // what follows is a line of its own
	}
	if !sameActions(m.actions, v.Actions) {
		m.actions = slices.Clone(v.Actions)
		c.term.write(actionsText(v.Actions))
	}
	switch {
	case clickable(v.Actions) > 0:
		c.choices = m.id
	case c.choices == m.id:
		c.choices = ""
	}
	if c.form != nil && c.form.r.clicked == m.id && clickable(v.Actions) == 0 {
		c.form = nil // its question was answered or closed
	}
	for _, f := range v.Files {
		c.term.write(fileText(f))
	}
}

// streamLocked writes text of m's (see term.stream).
func (c *Console) streamLocked(m *message, text string) {
	c.term.stream(m, text, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.term.owner == m {
			c.term.flushHeld()
		}
	})
}

var mention = regexp.MustCompile(`<@([^<>\s]+)>`)

// terminalText is a View's text as the terminal shows it: small print
// ("-# ") as an ordinary line, bold as plain text, a user named by their
// id.
func terminalText(text string) string {
	text = strings.ReplaceAll(mention.ReplaceAllString(text, "$1"), "**", "")
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "-# ")
	}
	return strings.Join(lines, "\n")
}

// clickable counts the buttons a number clicks: those that are neither
// links nor menus.
func clickable(actions []thread.Action) int {
	n := 0
	for _, a := range actions {
		if a.URL == "" && a.Menu == nil {
			n++
		}
	}
	return n
}

// button is the n-th (from 1) of actions a number clicks.
func button(actions []thread.Action, n int) (thread.Action, bool) {
	for _, a := range actions {
		if a.URL != "" || a.Menu != nil {
			continue
		}
		if n--; n == 0 {
			return a, true
		}
	}
	return thread.Action{}, false
}

func sameActions(a, b []thread.Action) bool {
	return slices.EqualFunc(a, b, func(x, y thread.Action) bool {
		return x.ID == y.ID && x.Label == y.Label && x.URL == y.URL && (x.Menu == nil) == (y.Menu == nil)
	})
}

// actionsText lists a message's buttons, numbered, its links and its
// menus' choices.
func actionsText(actions []thread.Action) string {
	if len(actions) == 0 {
		return ""
	}
	var b strings.Builder
	n := 0
	for _, a := range actions {
		switch {
		case a.URL != "":
			fmt.Fprintf(&b, "  link: %s\n", a.URL)
		case a.Menu != nil:
			var opts []string
			for _, o := range a.Menu.Options {
				opts = append(opts, o.Label)
			}
			fmt.Fprintf(&b, "  %s: %s\n", a.Menu.Placeholder, strings.Join(opts, ", "))
		default:
			n++
			fmt.Fprintf(&b, "  %d) %s\n", n, a.Label)
		}
	}
	if n > 0 {
		b.WriteString("Type a number to choose.\n")
	}
	return b.String()
}

// maxFileShown bounds what the console prints of a text file a message
// carries: its end, where an answer too long to stream ends.
const maxFileShown = 64 << 10

// fileText is what the console prints of a file a message carries.
func fileText(f thread.File) string {
	if !strings.HasPrefix(f.Type, "text/") {
		return fmt.Sprintf("[file %s, %s, %s: not shown on the console]\n", f.Name, f.Type, chat.Bytes(int64(len(f.Data))))
	}
	if len(f.Data) <= maxFileShown {
		return fmt.Sprintf("[file %s:]\n%s\n[end of %s]\n", f.Name, strings.TrimSuffix(f.Data, "\n"), f.Name)
	}
	tail := f.Data[len(f.Data)-maxFileShown:]
	if i := strings.IndexByte(tail, '\n'); i >= 0 && i < len(tail)/2 {
		tail = tail[i+1:] // from a line's start
	}
	tail = strings.TrimLeftFunc(tail, func(r rune) bool { return r == utf8.RuneError })
	return fmt.Sprintf("[file %s, %s; its last %s:]\n%s\n[end of %s]\n", f.Name, chat.Bytes(int64(len(f.Data))), chat.Bytes(int64(len(tail))), strings.TrimSuffix(tail, "\n"), f.Name)
}
