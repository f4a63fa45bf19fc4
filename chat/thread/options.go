package thread

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

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
			s.tell(c.Reply, noOptions(o, "This thread's agent offers no choice of model."))
			return true
		}
		if args["value"] == "" {
			c.Reply.Private(s.ctx, View{Text: s.describeOption(opt, s.p.Usage("model", Arg{Name: "value"})),
				Actions: s.choiceMenu(opt.ID, "Choose the model", adapter.Choices(opt), opt.Value)})
			return true
		}
		what = opt.Name
		change = func(ctx context.Context) (adapter.ThreadOptions, error) {
			return s.engine.SetOption(ctx, conv.thread, opt.ID, args["value"])
		}
	case "mode":
		choices := o.ModeChoices()
		if len(choices) == 0 {
			s.tell(c.Reply, noOptions(o, "This thread's agent offers no modes."))
			return true
		}
		if args["value"] == "" {
			c.Reply.Private(s.ctx, View{Text: fmt.Sprintf("**Mode**: %s\n%s\nChoose one with `%s`.", o.CurrentMode(), listChoices(choices), s.p.Usage("mode", Arg{Name: "value"})),
				Actions: s.choiceMenu("", "Choose the mode", choices, currentMode(o))})
			return true
		}
		what = "Mode"
		change = func(ctx context.Context) (adapter.ThreadOptions, error) {
			return s.engine.SetMode(ctx, conv.thread, args["value"])
		}
	case "config":
		if len(o.Options) == 0 {
			s.tell(c.Reply, noOptions(o, "This thread's agent offers no options."))
			return true
		}
		if args["option"] == "" {
			s.tell(c.Reply, s.describeOptions(o))
			return true
		}
		opt, ok := o.Option(args["option"])
		if !ok {
			s.tell(c.Reply, fmt.Sprintf("The agent has no option `%s`.\n%s", args["option"], s.describeOptions(o)))
			return true
		}
		if args["value"] == "" {
			c.Reply.Private(s.ctx, View{Text: s.describeOption(opt, s.p.Usage("config", Arg{Name: "option", Value: opt.ID}, Arg{Name: "value"})),
				Actions: s.choiceMenu(opt.ID, "Choose "+opt.Name, adapter.Choices(opt), currentValue(opt))})
			return true
		}
		what = opt.Name
		change = func(ctx context.Context) (adapter.ThreadOptions, error) {
			return s.engine.SetOption(ctx, conv.thread, opt.ID, args["value"])
		}
	}
	if !s.acl().mayAct(conv.channel, s.starterOf(conv), c.From) {
		s.log.Info().Str("thread", conv.thread).Str("user", c.From.ID).Str("command", name).Msg("command refused: not the thread's starter or an approver")
		s.tell(c.Reply, fmt.Sprintf("%s can change this thread's agent; you can't.", whoMayAct(s.starterOf(conv))))
		return true
	}
	s.changeOption(c.Reply, c.From, conv, what, change)
	return true
}

// changeOption answers at once that the change is under way, and then
// what the agent made of it.
func (s *Server) changeOption(r Reply, from User, conv *conversation, what string, change func(context.Context) (adapter.ThreadOptions, error)) {
	r.Defer(s.ctx)
	ctx, cancel := context.WithTimeoutCause(s.ctx, optionSetWait, fmt.Errorf("the agent did not answer within %s", optionSetWait))
	o, err := change(ctx)
	cancel()
	var text string
	switch {
	case err != nil:
		text = fmt.Sprintf("⚠️ %s was not changed: %v", what, err)
	default:
		now := currentOf(o, what)
		text = fmt.Sprintf("⚙️ <@%s> set **%s** to **%s**.", from.ID, what, now)
		if !o.Live {
			text = fmt.Sprintf("⚙️ <@%s> chose **%s** for **%s**: the agent gets it when it next starts.", from.ID, now, what)
		}
	}
	s.log.Info().Str("thread", conv.thread).Str("user", from.ID).Str("option", what).AnErr("err", err).Msg("option change answered")
	r.Public(s.ctx, text)
}

// optPrefix starts the action id of a menu of an option's choices; the
// nonce keeps menus of an earlier run of the broker from matching.
var optPrefix = "opt:" + nonce() + ":"

// Bounds of a menu of choices: an action id and a choice's value as
// every platform takes them (Discord's are the least, 100 characters).
const (
	maxActionID    = 100
	maxChoiceValue = 100
)

// choiceMenu is a menu of choices for the option named id ("": the
// mode), current chosen, on a platform that offers them so
// (Config.ChoiceMenus); none when nothing of them fits a menu.
func (s *Server) choiceMenu(id, placeholder string, choices []adapter.Choice, current string) []Action {
	action := optPrefix + "m"
	if id != "" {
		action = optPrefix + "o:" + id
	}
	if !s.cfg.ChoiceMenus || utf8.RuneCountInString(action) > maxActionID {
		return nil
	}
	menu := &Menu{Placeholder: placeholder, Min: 1, Max: 1}
	for _, ch := range choices {
		if len(menu.Options) == s.lim.MenuOptions {
			break
		}
		if ch.Value == "" || utf8.RuneCountInString(ch.Value) > maxChoiceValue {
			continue
		}
		menu.Options = append(menu.Options, Option{Label: excerpt(cmp.Or(ch.Name, ch.Value), 100), Value: ch.Value, Default: ch.Value == current})
	}
	if len(menu.Options) == 0 {
		return nil
	}
	return []Action{{ID: action, Menu: menu}}
}

// currentMode is the value of the mode in force.
func currentMode(o adapter.ThreadOptions) string {
	if opt, ok := o.ModeOption(); ok {
		return opt.Value
	}
	if o.Modes != nil {
		return o.Modes.Current
	}
	return ""
}

// currentValue is an option's value as its choices name it.
func currentValue(opt acp.ConfigOption) string {
	if opt.Type == acp.ConfigBoolean {
		return fmt.Sprint(opt.On)
	}
	return opt.Value
}

// onOptionClick changes the option whose menu of choices was used, as
// the command would, when the user may act on the thread.
func (s *Server) onOptionClick(c Click) {
	rest, ok := strings.CutPrefix(c.Action, optPrefix)
	if !ok || len(c.Values) == 0 {
		s.tell(c.Reply, "This menu is no longer in use.")
		return
	}
	conv := s.conversation(c.Where)
	if conv == nil {
		s.tell(c.Reply, "Use this menu inside one of my conversation threads.")
		return
	}
	access := s.acl()
	switch {
	case !access.channel(conv.channel):
		s.tell(c.Reply, "This channel is no longer served by the bot.")
		return
	case !access.mayAct(conv.channel, s.starterOf(conv), c.From):
		s.tell(c.Reply, fmt.Sprintf("%s can change this thread's agent; you can't.", whoMayAct(s.starterOf(conv))))
		return
	}
	value := c.Values[0]
	if rest == "m" {
		s.changeOption(c.Reply, c.From, conv, "Mode", func(ctx context.Context) (adapter.ThreadOptions, error) {
			return s.engine.SetMode(ctx, conv.thread, value)
		})
		return
	}
	opt, ok := s.engine.Options(conv.thread).Option(strings.TrimPrefix(rest, "o:"))
	if !ok || !strings.HasPrefix(rest, "o:") {
		s.tell(c.Reply, "The agent no longer offers this option.")
		return
	}
	s.changeOption(c.Reply, c.From, conv, opt.Name, func(ctx context.Context) (adapter.ThreadOptions, error) {
		return s.engine.SetOption(ctx, conv.thread, opt.ID, value)
	})
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
		s.tell(c.Reply, s.describeCommands(o))
		return
	}
	if len(o.Commands) > 0 && !hasCommand(o.Commands, name) {
		s.tell(c.Reply, fmt.Sprintf("The agent has no command `/%s`.\n%s", name, s.describeCommands(o)))
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
	s.submit(conv, at, c.From, text, conv.agent, []acp.ContentBlock{acp.TextBlock(text)}, nil)
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
		return current(o.ModeChoices(), currentMode(o))
	case "config option":
		out := make([]adapter.Choice, 0, len(o.Options))
		for _, opt := range o.Options {
			out = append(out, adapter.Choice{Value: opt.ID, Name: opt.Name + ": " + opt.Current()})
		}
		return out
	case "config value":
		if opt, ok := o.Option(args["option"]); ok {
			return current(adapter.Choices(opt), currentValue(opt))
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
