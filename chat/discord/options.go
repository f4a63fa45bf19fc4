package discord

import (
	"context"
	"fmt"
	"strings"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"

	"github.com/bwmarrin/discordgo"
)

// optionCommands choose the thread's agent's model, mode and other
// options, and run its own commands; their values are suggested as the
// user types, from what the thread's agent offers.
var optionCommands = []*discordgo.ApplicationCommand{
	{Name: "model", Description: "Show or choose the model of this thread's agent", Options: []*discordgo.ApplicationCommandOption{
		{Type: discordgo.ApplicationCommandOptionString, Name: "value", Description: "The model to use (suggested as you type)", Autocomplete: true},
	}},
	{Name: "mode", Description: "Show or choose the mode of this thread's agent", Options: []*discordgo.ApplicationCommandOption{
		{Type: discordgo.ApplicationCommandOptionString, Name: "value", Description: "The mode to use (suggested as you type)", Autocomplete: true},
	}},
	{Name: "config", Description: "Show or set one of the options of this thread's agent", Options: []*discordgo.ApplicationCommandOption{
		{Type: discordgo.ApplicationCommandOptionString, Name: "option", Description: "The option (suggested as you type)", Autocomplete: true},
		{Type: discordgo.ApplicationCommandOptionString, Name: "value", Description: "Its new value (suggested as you type)", Autocomplete: true},
	}},
	{Name: "agent", Description: "List the commands of this thread's agent, or run one", Options: []*discordgo.ApplicationCommandOption{
		{Type: discordgo.ApplicationCommandOptionString, Name: "name", Description: "The command to run (suggested as you type)", Autocomplete: true},
		{Type: discordgo.ApplicationCommandOptionString, Name: "input", Description: "What to give the command"},
	}},
}

// optionSetWait bounds the wait for the agent's answer to a change.
const optionSetWait = 30 * time.Second

// commandArgs are a command interaction's string options by name, and
// the one being typed, for an autocomplete. An option that says it is a
// string but carries something else (or nothing) counts as empty.
func commandArgs(i *discordgo.Interaction) (args map[string]string, focused string) {
	args = map[string]string{}
	for _, o := range i.ApplicationCommandData().Options {
		if o.Type != discordgo.ApplicationCommandOptionString {
			continue
		}
		v, _ := o.Value.(string) // StringValue panics on anything else
		args[o.Name] = strings.TrimSpace(v)
		if o.Focused {
			focused = o.Name
		}
	}
	return args, focused
}

// onOptionCommand serves /model, /mode, /config and /agent in a thread;
// it reports whether name was one of them. Anyone allowed may look and
// run the agent's commands (as any message would); only the thread's
// starter or an approver may change an option.
func (c *Client) onOptionCommand(i *discordgo.Interaction, conv *conversation, user *discordgo.User, roles []string, name string) bool {
	if name != "model" && name != "mode" && name != "config" && name != "agent" {
		return false
	}
	args, _ := commandArgs(i)
	o := c.engine.Options(conv.thread)
	if name == "agent" {
		c.onAgentCommand(i, conv, user, o, args)
		return true
	}
	var change func(ctx context.Context) (adapter.ThreadOptions, error)
	var what string // the option being changed, in words
	switch name {
	case "model":
		opt, ok := o.Model()
		if !ok {
			c.ephemeral(i, noOptions(o, "This thread's agent offers no choice of model."))
			return true
		}
		if args["value"] == "" {
			c.ephemeral(i, describeOption(opt, "/model value:"))
			return true
		}
		what = opt.Name
		change = func(ctx context.Context) (adapter.ThreadOptions, error) {
			return c.engine.SetOption(ctx, conv.thread, opt.ID, args["value"])
		}
	case "mode":
		choices := o.ModeChoices()
		if len(choices) == 0 {
			c.ephemeral(i, noOptions(o, "This thread's agent offers no modes."))
			return true
		}
		if args["value"] == "" {
			c.ephemeral(i, fmt.Sprintf("**Mode**: %s\n%s\nChoose one with `/mode value:`.", o.CurrentMode(), listChoices(choices)))
			return true
		}
		what = "Mode"
		change = func(ctx context.Context) (adapter.ThreadOptions, error) {
			return c.engine.SetMode(ctx, conv.thread, args["value"])
		}
	case "config":
		if len(o.Options) == 0 {
			c.ephemeral(i, noOptions(o, "This thread's agent offers no options."))
			return true
		}
		if args["option"] == "" {
			c.ephemeral(i, describeOptions(o))
			return true
		}
		opt, ok := o.Option(args["option"])
		if !ok {
			c.ephemeral(i, fmt.Sprintf("The agent has no option `%s`.\n%s", args["option"], describeOptions(o)))
			return true
		}
		if args["value"] == "" {
			c.ephemeral(i, describeOption(opt, "/config option:"+opt.ID+" value:"))
			return true
		}
		what = opt.Name
		change = func(ctx context.Context) (adapter.ThreadOptions, error) {
			return c.engine.SetOption(ctx, conv.thread, opt.ID, args["value"])
		}
	}
	if !c.acl().mayAct(conv.parent, c.starterOf(conv), user.ID, roles) {
		c.log.Info().Str("thread", conv.thread).Str("user", user.ID).Str("command", name).Msg("slash command refused: not the thread's starter or an approver")
		c.ephemeral(i, fmt.Sprintf("%s can change this thread's agent; you can't.", whoMayAct(c.starterOf(conv))))
		return true
	}
	c.changeOption(i, conv, user, what, change)
	return true
}

// changeOption answers at once that the change is under way, and then
// what the agent made of it.
func (c *Client) changeOption(i *discordgo.Interaction, conv *conversation, user *discordgo.User, what string, change func(context.Context) (adapter.ThreadOptions, error)) {
	c.respond(i, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredChannelMessageWithSource})
	ctx, cancel := context.WithTimeoutCause(c.ctx, optionSetWait, fmt.Errorf("the agent did not answer within %s", optionSetWait))
	o, err := change(ctx)
	cancel()
	var text string
	switch {
	case err != nil:
		text = fmt.Sprintf("⚠️ %s was not changed: %v", what, err)
	default:
		now := currentOf(o, what)
		text = fmt.Sprintf("⚙️ <@%s> set **%s** to **%s**.", user.ID, what, now)
		if !o.Live {
			text = fmt.Sprintf("⚙️ <@%s> chose **%s** for **%s**: the agent gets it when it next starts.", user.ID, now, what)
		}
	}
	c.log.Info().Str("thread", conv.thread).Str("user", user.ID).Str("option", what).AnErr("err", err).Msg("option change answered")
	err = c.do(c.ctx, 3, func(opts ...discordgo.RequestOption) error {
		_, err := c.s.InteractionResponseEdit(i, &discordgo.WebhookEdit{Content: &text, AllowedMentions: noMentions}, opts...)
		return err
	})
	if err != nil {
		c.log.Warn().Err(err).Str("interaction", i.ID).Msg("the answer to an option change was not shown")
	}
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
// thread's next prompt, "/name input", as a message saying it would.
func (c *Client) onAgentCommand(i *discordgo.Interaction, conv *conversation, user *discordgo.User, o adapter.ThreadOptions, args map[string]string) {
	name := strings.TrimPrefix(args["name"], "/")
	if name == "" {
		c.ephemeral(i, describeCommands(o))
		return
	}
	if len(o.Commands) > 0 && !hasCommand(o.Commands, name) {
		c.ephemeral(i, fmt.Sprintf("The agent has no command `/%s`.\n%s", name, describeCommands(o)))
		return
	}
	text := "/" + name
	if args["input"] != "" {
		text += " " + args["input"]
	}
	c.public(i, fmt.Sprintf("▶️ <@%s> ran `%s`", user.ID, excerpt(text, 300)))
	var answer *discordgo.Message
	err := c.do(c.ctx, 5, func(opts ...discordgo.RequestOption) (err error) {
		answer, err = c.s.InteractionResponse(i, opts...)
		return err
	})
	if err != nil {
		c.log.Warn().Err(err).Str("thread", conv.thread).Msg("/agent: the command's answer could not be read; nothing sent to the agent")
		return
	}
	answer.GuildID = i.GuildID
	sink := newTurnSink(c, conv, answer)
	p := &adapter.Prompt{Ref: ref(answer), Title: excerpt(text, 80), Author: user.ID, Agent: conv.agent,
		Blocks: []acp.ContentBlock{acp.TextBlock(text)}, Sink: sink}
	if err := c.engine.Submit(conv.thread, p); err != nil {
		sink.refused(err)
	}
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

func describeOption(opt acp.ConfigOption, how string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "**%s**: %s\n", opt.Name, opt.Current())
	if opt.Description != "" {
		b.WriteString(excerpt(opt.Description, 200) + "\n")
	}
	b.WriteString(listChoices(adapter.Choices(opt)))
	fmt.Fprintf(&b, "\nChoose with `%s`.", how)
	return excerptLines(b.String(), 1900)
}

func describeOptions(o adapter.ThreadOptions) string {
	var b strings.Builder
	b.WriteString("**Options** (set one with `/config option: value:`)\n")
	for _, opt := range o.Options {
		fmt.Fprintf(&b, "• `%s` %s: **%s**\n", opt.ID, opt.Name, opt.Current())
	}
	if o.Modes != nil && len(o.Modes.Available) > 0 {
		if _, ok := o.ModeOption(); !ok {
			fmt.Fprintf(&b, "• mode: **%s** (`/mode`)\n", o.CurrentMode())
		}
	}
	return excerptLines(b.String(), 1900)
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

func describeCommands(o adapter.ThreadOptions) string {
	if len(o.Commands) == 0 {
		if o.Empty() {
			return adapter.ErrNoOptionsYet.Error() + "."
		}
		return "This thread's agent has no commands."
	}
	var b strings.Builder
	b.WriteString("**Agent commands** (run one with `/agent name: input:`, or send `/name …` here)\n")
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
	return excerptLines(b.String(), 1900)
}

// onAutocomplete suggests values for the option being typed, from what
// the thread's agent offers, matching what has been typed so far.
func (c *Client) onAutocomplete(i *discordgo.Interaction) {
	var choices []adapter.Choice
	user, roles := interactionUser(i)
	if c.allowedUser(user.ID, roles) {
		if conv := c.conversation(i.ChannelID); conv != nil && c.acl().channel(conv.parent) {
			args, focused := commandArgs(i)
			choices = suggestions(c.engine.Options(conv.thread), i.ApplicationCommandData().Name, focused, args)
			choices = matching(choices, args[focused])
		}
	}
	out := []*discordgo.ApplicationCommandOptionChoice{}
	for _, ch := range choices {
		if len(out) == maxChoices {
			break
		}
		if ch.Value == "" || len([]rune(ch.Value)) > maxChoiceName {
			continue
		}
		label := ch.Name
		if label == "" {
			label = ch.Value
		}
		if ch.Description != "" {
			label += " — " + ch.Description
		}
		out = append(out, &discordgo.ApplicationCommandOptionChoice{Name: excerpt(label, maxChoiceName), Value: ch.Value})
	}
	c.respond(i, &discordgo.InteractionResponse{Type: discordgo.InteractionApplicationCommandAutocompleteResult,
		Data: &discordgo.InteractionResponseData{Choices: out}})
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
