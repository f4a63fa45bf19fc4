package discord

import (
	"strings"

	"acpbroker/chat"
	"acpbroker/chat/thread"

	"github.com/bwmarrin/discordgo"
)

// Discord's bounds on a command option's choices.
const (
	maxChoices    = 25
	maxChoiceName = 100
)

// commandList is every slash command, as thread.Commands says: an agent
// parameter's choices are the profiles now configured, and a parameter
// whose values are suggested is autocompleted.
func (c *Client) commandList() []*discordgo.ApplicationCommand {
	var list []*discordgo.ApplicationCommand
	for _, spec := range thread.Commands {
		cmd := &discordgo.ApplicationCommand{Name: spec.Name, Description: spec.Description}
		for _, p := range spec.Params {
			o := &discordgo.ApplicationCommandOption{Type: discordgo.ApplicationCommandOptionString, Name: p.Name,
				Description: p.Description, Autocomplete: p.Suggest}
			if p.Agent {
				o.Choices = agentChoices(c.srv.Agents())
			}
			cmd.Options = append(cmd.Options, o)
		}
		list = append(list, cmd)
	}
	return list
}

// agentChoices are the agents as a command option's choices, as many as
// Discord takes.
func agentChoices(agents []chat.AgentInfo) []*discordgo.ApplicationCommandOptionChoice {
	var out []*discordgo.ApplicationCommandOptionChoice
	for _, a := range agents {
		if len(out) == maxChoices {
			break
		}
		label := a.Name
		if a.Description != "" {
			label += ": " + a.Description
		}
		out = append(out, &discordgo.ApplicationCommandOptionChoice{Name: excerpt(label, maxChoiceName), Value: a.Name})
	}
	return out
}

func (c *Client) registerCommands(appID string) {
	c.mu.Lock()
	c.appID = appID
	c.mu.Unlock()
	list := c.commandList()
	err := c.do(c.ctx, 5, func(opts ...discordgo.RequestOption) error {
		_, err := c.s.ApplicationCommandBulkOverwrite(appID, "", list, opts...)
		return err
	})
	if err != nil {
		c.log.Error().Err(err).Msg("slash commands not registered")
		return
	}
	c.log.Info().Int("commands", len(list)).Msg("slash commands registered")
}

// RefreshCommands registers the slash commands again, for the agent
// profiles now configured (after a reload); before the Client is
// connected it does nothing, the connection registers them.
func (c *Client) RefreshCommands() {
	c.mu.Lock()
	appID := c.appID
	c.mu.Unlock()
	if appID != "" {
		c.spawn(func() { c.registerCommands(appID) })
	}
}

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

// onAutocomplete suggests values for the option being typed, as the
// Server says, within Discord's bounds on choices.
func (c *Client) onAutocomplete(i *discordgo.Interaction, from thread.User) {
	args, focused := commandArgs(i)
	choices, ok := c.srv.Suggest(i.ChannelID, from, i.ApplicationCommandData().Name, focused, args)
	if !ok {
		return
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
	c.respond(c.ctx, i, &discordgo.InteractionResponse{Type: discordgo.InteractionApplicationCommandAutocompleteResult,
		Data: &discordgo.InteractionResponseData{Choices: out}})
}

// excerpt collapses whitespace and cuts s to at most n runes.
func excerpt(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	return s
}
