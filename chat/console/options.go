package console

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

// optionCommand serves /model, /mode, /config and /agent (name, without
// its "/"), with args the words given.
func (c *Console) optionCommand(thread, name string, args []string) {
	switch name {
	case "model":
		o := c.Engine.Options(thread)
		opt, ok := o.Model()
		switch {
		case !ok:
			c.printf("[%s]\n", none(o, "the agent offers no choice of model"))
		case len(args) == 0:
			c.printOption(opt)
		default:
			c.set(opt.Name, func(ctx context.Context) (adapter.ThreadOptions, error) {
				return c.Engine.SetOption(ctx, thread, opt.ID, strings.Join(args, " "))
			})
		}
	case "mode":
		o := c.Engine.Options(thread)
		switch {
		case len(o.ModeChoices()) == 0:
			c.printf("[%s]\n", none(o, "the agent offers no modes"))
		case len(args) == 0:
			c.printf("[Mode: %s]\n", o.CurrentMode())
			c.printChoices(o.ModeChoices())
		default:
			c.set("Mode", func(ctx context.Context) (adapter.ThreadOptions, error) {
				return c.Engine.SetMode(ctx, thread, args[0])
			})
		}
	case "config":
		o := c.Engine.Options(thread)
		if len(o.Options) == 0 {
			c.printf("[%s]\n", none(o, "the agent offers no options"))
			return
		}
		if len(args) == 0 {
			for _, opt := range o.Options {
				c.printf("[%s (%s): %s]\n", opt.ID, opt.Name, opt.Current())
			}
			return
		}
		opt, ok := o.Option(args[0])
		switch {
		case !ok:
			c.printf("[the agent has no option %q]\n", args[0])
		case len(args) == 1:
			c.printOption(opt)
		default:
			c.set(opt.Name, func(ctx context.Context) (adapter.ThreadOptions, error) {
				return c.Engine.SetOption(ctx, thread, opt.ID, strings.Join(args[1:], " "))
			})
		}
	case "agent":
		o := c.Engine.Options(thread)
		if len(args) == 0 {
			if len(o.Commands) == 0 {
				c.printf("[%s]\n", none(o, "the agent has no commands"))
			}
			for _, cmd := range o.Commands {
				hint := ""
				if cmd.Hint != "" {
					hint = " <" + cmd.Hint + ">"
				}
				c.printf("[/%s%s: %s]\n", cmd.Name, hint, cmd.Description)
			}
			return
		}
		c.submit(thread, "/"+strings.TrimPrefix(strings.Join(args, " "), "/"))
	}
}

// set makes a change and prints what the agent made of it.
func (c *Console) set(what string, change func(context.Context) (adapter.ThreadOptions, error)) {
	ctx, cancel := context.WithTimeoutCause(context.Background(), optionSetWait, fmt.Errorf("the agent did not answer within %s", optionSetWait))
	defer cancel()
	o, err := change(ctx)
	if err != nil {
		c.printf("[%s was not changed: %v]\n", what, err)
		return
	}
	now := o.CurrentMode()
	for _, opt := range o.Options {
		if opt.Name == what {
			now = opt.Current()
		}
	}
	if !o.Live {
		c.printf("[%s: %s chosen; the agent gets it when it next starts]\n", what, now)
		return
	}
	c.printf("[%s set to %s]\n", what, now)
}

func (c *Console) printOption(opt acp.ConfigOption) {
	c.printf("[%s: %s]\n", opt.Name, opt.Current())
	c.printChoices(adapter.Choices(opt))
}

func (c *Console) printChoices(choices []adapter.Choice) {
	for _, ch := range choices {
		desc := ""
		if ch.Description != "" {
			desc = ": " + ch.Description
		}
		c.printf("  %s (%s)%s\n", ch.Value, ch.Name, desc)
	}
}

// none says why nothing can be chosen.
func none(o adapter.ThreadOptions, what string) string {
	if o.Empty() {
		return adapter.ErrNoOptionsYet.Error()
	}
	return what
}
