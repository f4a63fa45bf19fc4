package console

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat/thread"
)

// own are the console's commands beside thread.Commands.
var own = []thread.CommandSpec{
	{Name: "help", Description: "List the commands"},
	{Name: "quit", Description: "Cancel the running turn and leave (/exit, or the end of the input, too)"},
}

// unserved are the commands of thread.Commands the console does not
// serve: the broker gives the console no schedules.
var unserved = []string{"schedules"}

// line handles one input line; it reports true for /quit. A command
// comes first, even while a question is open; then a form being filled
// in takes the line, a number clicks a button of the newest message
// that shows some, and any other line is the conversation's next
// message.
func (c *Console) line(ctx context.Context, raw string) bool {
	text := strings.TrimSpace(raw)
	if name, ok := strings.CutPrefix(text, "/"); ok {
		word, _, _ := strings.Cut(name, " ")
		if known(word) {
			return c.command(ctx, name)
		}
	}
	if c.fill(raw) {
		return false
	}
	if text == "" {
		return false
	}
	if n, err := strconv.Atoi(text); err == nil && c.click(n) {
		return false
	}
	if name, ok := strings.CutPrefix(text, "/"); ok {
		word, _, _ := strings.Cut(name, " ")
		if !c.agentCommand(word) {
			c.printf("[unknown command /%s, see /help; /agent NAME runs one of the agent's own]\n", word)
			return false
		}
	}
	c.say(text)
	return false
}

// click clicks button n of the newest message that shows buttons; false
// if there is no such button.
func (c *Console) click(n int) bool {
	c.mu.Lock()
	m := c.msgs[c.choices]
	var a thread.Action
	ok := m != nil
	if ok {
		a, ok = button(m.actions, n)
	}
	c.mu.Unlock()
	if !ok {
		return false
	}
	c.srv.Click(thread.Click{Where: m.where, Action: a.ID, From: c.user, Reply: &reply{c: c, where: m.where, clicked: m.id}})
	return true
}

// known reports whether name names one of the console's commands.
func known(name string) bool {
	name = strings.ToLower(name)
	if name == "exit" || slices.ContainsFunc(own, func(s thread.CommandSpec) bool { return s.Name == name }) {
		return true
	}
	_, ok := thread.LookupCommand(name)
	return ok
}

// command serves a command written without its "/"; it reports true for
// /quit.
func (c *Console) command(ctx context.Context, text string) bool {
	word, _, _ := strings.Cut(text, " ")
	c.mu.Lock()
	where := c.current
	c.mu.Unlock()
	switch strings.ToLower(word) {
	case "quit", "exit":
		c.cfg.Engine.Cancel(where, adapter.CancelledBy(c.user.Name))
		return true
	case "help":
		c.help()
		return false
	}
	cmd, ok := c.srv.Parse(text)
	if !ok {
		spec, _ := thread.LookupCommand(word)
		c.printf("[usage: /%s]\n", spec.Written())
		return false
	}
	if a := cmd.Args; cmd.Name == "new" && a["agent"] == "" && a["prompt"] != "" && !strings.Contains(a["prompt"], " ") {
		// One word is an agent's name, told if it is none: more likely
		// mistyped than a whole first message.
		a["agent"], a["prompt"] = a["prompt"], ""
	}
	if slices.Contains(unserved, cmd.Name) {
		c.printf("[/%s is not served on the console]\n", cmd.Name)
		return false
	}
	r := &reply{c: c, where: where, command: cmd.Name, opened: make(chan struct{})}
	cmd.Where, cmd.From, cmd.Reply = where, c.user, r
	// The lines typed after a command wait for its answer, as they
	// would at a shell: a message after /reset goes to the fresh
	// session, not to a turn the reset then cancels. Those after /new or
	// /fork go to the conversation it opens: they wait until it is open,
	// or refused.
	if cmd.Name == "new" || cmd.Name == "fork" {
		c.mu.Lock()
		c.opening = r
		c.mu.Unlock()
	}
	c.srv.Command(cmd)
	t := time.NewTimer(openWait)
	defer t.Stop()
	select {
	case <-r.opened:
	case <-t.C:
	case <-ctx.Done():
	}
	c.mu.Lock()
	if c.opening == r {
		c.opening = nil
	}
	c.mu.Unlock()
	return false
}

// openWait bounds how long the lines typed after a command wait for its
// answer, or after /new or /fork for the conversation it opens.
const openWait = 2 * time.Minute

// agentCommand reports whether name is one of the commands the
// conversation's agent offers, which go to it as they are written.
func (c *Console) agentCommand(name string) bool {
	c.mu.Lock()
	where := c.current
	c.mu.Unlock()
	o := c.cfg.Engine.Options(where)
	return slices.ContainsFunc(o.Commands, func(cmd acp.AvailableCommand) bool { return cmd.Name == name })
}

// help lists the commands: thread.Commands, as every front end has
// them, then the console's own.
func (c *Console) help() {
	var b strings.Builder
	b.WriteString("[commands; any other line is a message for the agent, and a number chooses a button]\n")
	for _, spec := range thread.Commands {
		if !slices.Contains(unserved, spec.Name) {
			fmt.Fprintf(&b, "  /%s — %s\n", spec.Written(), spec.Description)
		}
	}
	for _, spec := range own {
		fmt.Fprintf(&b, "  /%s — %s\n", spec.Written(), spec.Description)
	}
	c.printf("%s", b.String())
}

// reply answers one command, click or form at the terminal: everything
// is printed, to the one user there.
type reply struct {
	c       *Console
	where   string
	command string // the command it answers ("": a click's, a form's)
	// clicked is the message whose button was clicked ("": a command's).
	clicked string

	posted string // the message Public printed
	// opened, for a command, is closed once it is answered; for /new
	// and /fork, once the conversation is open, or the command answered
	// without opening one.
	opened    chan struct{}
	closeOnce sync.Once
}

// settle ends the wait for the command's answer, or for a conversation
// it opens.
func (r *reply) settle() {
	if r.opened != nil {
		r.closeOnce.Do(func() { close(r.opened) })
	}
}

var _ thread.Reply = (*reply)(nil)

// Private is a refusal of /new or /fork, when it answers one.
func (r *reply) Private(ctx context.Context, v thread.View) {
	r.post(v)
	r.settle()
}

// Public answers /fork once it has opened the conversation, or refuses
// it; /new's is said before it opens one.
func (r *reply) Public(ctx context.Context, text string) {
	r.posted = r.post(thread.View{Text: text})
	r.answered()
}

// answered ends the wait for a command's answer: /new's ends when its
// conversation opens instead, its answer being said before.
func (r *reply) answered() {
	if r.command != "new" {
		r.settle()
	}
}

// post prints an answer: whole, its last line ended, since nothing is
// added to it.
func (r *reply) post(v thread.View) string {
	c := r.c
	id, _ := (*platform)(c).Post(context.Background(), r.where, v)
	c.mu.Lock()
	if m := c.msgs[id]; m != nil && c.term.owner == m {
		c.term.lineBreak()
		m.partial = ""
	}
	c.mu.Unlock()
	return id
}

func (r *reply) Posted(ctx context.Context) (thread.Origin, error) {
	if r.posted == "" {
		r.posted = r.post(thread.View{Text: "…"})
	}
	return thread.Origin{Where: r.where, ID: r.posted, Ref: ref(r.where, r.posted)}, nil
}

func (r *reply) Update(ctx context.Context, v thread.View) {
	defer r.answered()
	if r.clicked == "" {
		r.post(v)
		return
	}
	(*platform)(r.c).Edit(ctx, r.where, r.clicked, v)
}

func (r *reply) Ack(ctx context.Context) { r.answered() }

func (r *reply) Defer(ctx context.Context) { r.answered() }

func (r *reply) Form(ctx context.Context, f thread.Form) {
	r.c.openForm(f, r)
	r.answered()
}
