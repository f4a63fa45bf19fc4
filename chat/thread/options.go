package thread

import (
	"context"
	"fmt"
	"strings"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
)

// optionSetWait bounds the wait for the agent's answer to a change.
const optionSetWait = 30 * time.Second

// onOptionCommand serves model, mode, config and agent in a thread; it
// reports whether the command was one of them. Anyone allowed may look
// and run the agent's commands (as any message would); only the
// thread's starter or an approver may change an option.
func (s *Server) onOptionCommand(c Command, conv *conversation) bool {
	name, args := c.Name, c.Args
	if name != "model" && name != "mode" && name != "config" && name != "agent" {
		return false
	}
	o := s.engine.Options(conv.thread)
	if name == "agent" {
		s.onAgentCommand(c, conv, o)
		return true
	}
	var change func(ctx context.Context) (adapter.ThreadOptions, error)
	var what string // the option being changed, in words
	switch name {
	case "model":
		opt, ok := o.Model()
		if !ok {
			c.Reply.Private(s.ctx, noOptions(o, "This thread's agent offers no choice of model."))
			return true
		}
		if args["value"] == "" {
			c.Reply.Private(s.ctx, s.describeOption(opt, s.p.Usage("model", Arg{Name: "value"})))
			return true
		}
		what = opt.Name
		change = func(ctx context.Context) (adapter.ThreadOptions, error) {
			return s.engine.SetOption(ctx, conv.thread, opt.ID, args["value"])
		}
	case "mode":
		choices := o.ModeChoices()
		if len(choices) == 0 {
			c.Reply.Private(s.ctx, noOptions(o, "This thread's agent offers no modes."))
			return true
		}
		if args["value"] == "" {
			c.Reply.Private(s.ctx, fmt.Sprintf("**Mode**: %s\n%s\nChoose one with `%s`.", o.CurrentMode(), listChoices(choices), s.p.Usage("mode", Arg{Name: "value"})))
			return true
		}
		what = "Mode"
		change = func(ctx context.Context) (adapter.ThreadOptions, error) {
			return s.engine.SetMode(ctx, conv.thread, args["value"])
		}
	case "config":
		if len(o.Options) == 0 {
			c.Reply.Private(s.ctx, noOptions(o, "This thread's agent offers no options."))
			return true
		}
		if args["option"] == "" {
			c.Reply.Private(s.ctx, s.describeOptions(o))
			return true
		}
		opt, ok := o.Option(args["option"])
		if !ok {
			c.Reply.Private(s.ctx, fmt.Sprintf("The agent has no option `%s`.\n%s", args["option"], s.describeOptions(o)))
			return true
		}
		if args["value"] == "" {
			c.Reply.Private(s.ctx, s.describeOption(opt, s.p.Usage("config", Arg{Name: "option", Value: opt.ID}, Arg{Name: "value"})))
			return true
		}
		what = opt.Name
		change = func(ctx context.Context) (adapter.ThreadOptions, error) {
			return s.engine.SetOption(ctx, conv.thread, opt.ID, args["value"])
		}
	}
	if !s.acl().mayAct(conv.channel, s.starterOf(conv), c.From) {
		s.log.Info().Str("thread", conv.thread).Str("user", c.From.ID).Str("command", name).Msg("command refused: not the thread's starter or an approver")
		c.Reply.Private(s.ctx, fmt.Sprintf("%s can change this thread's agent; you can't.", whoMayAct(s.starterOf(conv))))
		return true
	}
	s.changeOption(c, conv, what, change)
	return true
}

// changeOption answers at once that the change is under way, and then
// what the agent made of it.
func (s *Server) changeOption(c Command, conv *conversation, what string, change func(context.Context) (adapter.ThreadOptions, error)) {
	c.Reply.Defer(s.ctx)
	ctx, cancel := context.WithTimeoutCause(s.ctx, optionSetWait, fmt.Errorf("the agent did not answer within %s", optionSetWait))
	o, err := change(ctx)
	cancel()
	var text string
	switch {
	case err != nil:
		text = fmt.Sprintf("⚠️ %s was not changed: %v", what, err)
	default:
		now := currentOf(o, what)
		text = fmt.Sprintf("⚙️ <@%s> set **%s** to **%s**.", c.From.ID, what, now)
		if !o.Live {
			text = fmt.Sprintf("⚙️ <@%s> chose **%s** for **%s**: the agent gets it when it next starts.", c.From.ID, now, what)
		}
	}
	s.log.Info().Str("thread", conv.thread).Str("user", c.From.ID).Str("option", what).AnErr("err", err).Msg("option change answered")
	c.Reply.Public(s.ctx, text)
}

// currentOf is the value of the option named what (or the mode) in o,
// in words.
func currentOf(o adapter.ThreadOptions, what string) string {
	if what == "Mode" {
		if m := o.CurrentMode(); m != "" {
			return m
		}
	}
	for _, opt := range o.Options {
		if opt.Name == what {
			return opt.Current()
		}
	}
	return o.CurrentMode()
}

// onAgentCommand lists the agent's own commands, or runs one as the
// thread's next prompt, "/name input", saying so; the turn shows on
// what the answer posted.
func (s *Server) onAgentCommand(c Command, conv *conversation, o adapter.ThreadOptions) {
	name := strings.TrimPrefix(c.Args["name"], "/")
	if name == "" {
		c.Reply.Private(s.ctx, s.describeCommands(o))
		return
	}
	if len(o.Commands) > 0 && !hasCommand(o.Commands, name) {
		c.Reply.Private(s.ctx, fmt.Sprintf("The agent has no command `/%s`.\n%s", name, s.describeCommands(o)))
		return
	}
	text := "/" + name
	if c.Args["input"] != "" {
		text += " " + c.Args["input"]
	}
	c.Reply.Public(s.ctx, fmt.Sprintf("▶️ <@%s> ran `%s`", c.From.ID, excerpt(text, 300)))
	at, err := c.Reply.Posted(s.ctx)
	if err != nil {
		s.log.Warn().Err(err).Str("thread", conv.thread).Msg("agent command: the command's answer could not be read; nothing sent to the agent")
		return
	}
	s.submit(conv, at, c.From.ID, text, conv.agent, []acp.ContentBlock{acp.TextBlock(text)}, nil)
}

func hasCommand(cmds []acp.AvailableCommand, name string) bool {
	for _, c := range cmds {
		if c.Name == name {
			return true
		}
	}
	return false
}

// noOptions says why nothing can be chosen: the agent offers nothing of
// the kind, or has not said yet.
func noOptions(o adapter.ThreadOptions, none string) string {
	if o.Empty() {
		return adapter.ErrNoOptionsYet.Error() + "."
	}
	return none
}

// listLimit is the most bytes of a list said in one message.
func (s *Server) listLimit() int { return s.lim.MessageRunes - 100 }

func (s *Server) describeOption(opt acp.ConfigOption, how string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "**%s**: %s\n", opt.Name, opt.Current())
	if opt.Description != "" {
		b.WriteString(excerpt(opt.Description, 200) + "\n")
	}
	b.WriteString(listChoices(adapter.Choices(opt)))
	fmt.Fprintf(&b, "\nChoose with `%s`.", how)
	return excerptLines(b.String(), s.listLimit())
}

func (s *Server) describeOptions(o adapter.ThreadOptions) string {
	var b strings.Builder
	fmt.Fprintf(&b, "**Options** (set one with `%s`)\n", s.p.Usage("config", Arg{Name: "option"}, Arg{Name: "value"}))
	for _, opt := range o.Options {
		fmt.Fprintf(&b, "• `%s` %s: **%s**\n", opt.ID, opt.Name, opt.Current())
	}
	if o.Modes != nil && len(o.Modes.Available) > 0 {
		if _, ok := o.ModeOption(); !ok {
			fmt.Fprintf(&b, "• mode: **%s** (`%s`)\n", o.CurrentMode(), s.p.Usage("mode"))
		}
	}
	return excerptLines(b.String(), s.listLimit())
}

func listChoices(choices []adapter.Choice) string {
	var b strings.Builder
	for _, ch := range choices {
		fmt.Fprintf(&b, "• `%s` %s", ch.Value, ch.Name)
		if ch.Description != "" {
			b.WriteString(": " + excerpt(ch.Description, 100))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func (s *Server) describeCommands(o adapter.ThreadOptions) string {
	if len(o.Commands) == 0 {
		if o.Empty() {
			return adapter.ErrNoOptionsYet.Error() + "."
		}
		return "This thread's agent has no commands."
	}
	var b strings.Builder
	fmt.Fprintf(&b, "**Agent commands** (run one with `%s`, or send `/name …` here)\n", s.p.Usage("agent", Arg{Name: "name"}, Arg{Name: "input"}))
	for _, cmd := range o.Commands {
		fmt.Fprintf(&b, "• `/%s`", cmd.Name)
		if cmd.Hint != "" {
			fmt.Fprintf(&b, " _%s_", excerpt(cmd.Hint, 60))
		}
		if cmd.Description != "" {
			b.WriteString(": " + excerpt(cmd.Description, 120))
		}
		b.WriteString("\n")
	}
	return excerptLines(b.String(), s.listLimit())
}

// Suggest is what to suggest for parameter focused of command, given in
// where by from with args so far: from what the thread's agent offers,
// matching what has been typed. ok is false when the Server takes no
// events (nothing is to be answered then); nothing is suggested to
// someone who may not use the bot, or outside the bot's threads. It
// asks the engine, and returns without waiting on anything else.
func (s *Server) Suggest(where string, from User, command, focused string, args map[string]string) (choices []adapter.Choice, ok bool) {
	s.mu.Lock()
	accepting := s.accepting
	s.mu.Unlock()
	if !accepting {
		return nil, false
	}
	if s.acl().user(from) {
		if conv := s.conversation(where); conv != nil && s.acl().channel(conv.channel) {
			choices = suggestions(s.engine.Options(conv.thread), command, focused, args)
			choices = matching(choices, args[focused])
		}
	}
	return choices, true
}

// suggestions are the values offered for option focused of command.
func suggestions(o adapter.ThreadOptions, command, focused string, args map[string]string) []adapter.Choice {
	current := func(choices []adapter.Choice, value string) []adapter.Choice {
		for k := range choices {
			if choices[k].Value == value {
				choices[k].Name += " (current)"
			}
		}
		return choices
	}
	switch command + " " + focused {
	case "model value":
		if opt, ok := o.Model(); ok {
			return current(adapter.Choices(opt), opt.Value)
		}
	case "mode value":
		cur := ""
		if opt, ok := o.ModeOption(); ok {
			cur = opt.Value
		} else if o.Modes != nil {
			cur = o.Modes.Current
		}
		return current(o.ModeChoices(), cur)
	case "config option":
		out := make([]adapter.Choice, 0, len(o.Options))
		for _, opt := range o.Options {
			out = append(out, adapter.Choice{Value: opt.ID, Name: opt.Name + ": " + opt.Current()})
		}
		return out
	case "config value":
		if opt, ok := o.Option(args["option"]); ok {
			cur := opt.Value
			if opt.Type == acp.ConfigBoolean {
				cur = fmt.Sprint(opt.On)
			}
			return current(adapter.Choices(opt), cur)
		}
	case "agent name":
		out := make([]adapter.Choice, 0, len(o.Commands))
		for _, cmd := range o.Commands {
			out = append(out, adapter.Choice{Value: cmd.Name, Name: "/" + cmd.Name, Description: cmd.Description})
		}
		return out
	}
	return nil
}

// matching keeps the choices whose value or name contains typed, in any
// case.
func matching(choices []adapter.Choice, typed string) []adapter.Choice {
	typed = strings.ToLower(strings.TrimPrefix(typed, "/"))
	if typed == "" {
		return choices
	}
	var out []adapter.Choice
	for _, ch := range choices {
		if strings.Contains(strings.ToLower(ch.Value), typed) || strings.Contains(strings.ToLower(ch.Name), typed) {
			out = append(out, ch)
		}
	}
	return out
}

// excerptLines cuts s to at most n bytes at a line end.
func excerptLines(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := strings.LastIndexByte(s[:n], '\n')
	if cut < 0 {
		cut = n
	}
	return s[:cut] + "\n…"
}
