package discord

import (
	"fmt"
	"strings"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat"

	"github.com/bwmarrin/discordgo"
)

// onNew starts a thread with the agent the user chose (/new agent:NAME
// prompt:TEXT), from an allowed channel or one of its threads: the
// command's answer opens the thread, and the prompt, if any, is its first
// turn.
func (c *Client) onNew(i *discordgo.Interaction, user *discordgo.User) {
	channel := i.ChannelID
	if conv := c.conversation(channel); conv != nil {
		channel = conv.parent // from a thread: a new thread beside it
	}
	access := c.acl()
	if !access.channel(channel) {
		c.ephemeral(i, "I don't answer in this channel; use /new in one I serve.")
		return
	}
	args, _ := commandArgs(i)
	agent, text := args["agent"], args["prompt"]
	known := c.agents()
	if agent == "" {
		agent = access.ChannelAgents[channel]
	}
	if agent != "" && len(known) > 0 && !hasAgent(known, agent) {
		c.ephemeral(i, fmt.Sprintf("There is no agent %q. %s", agent, agentNames(known)))
		return
	}
	label := agent
	if label == "" {
		label = "the default agent"
		for _, a := range known {
			if a.Default {
				label = a.Name
			}
		}
	}
	intro := fmt.Sprintf("🧵 <@%s> started a thread with **%s**.", user.ID, label)
	if text != "" {
		intro += "\n> " + excerpt(text, 300)
	}
	c.public(i, intro)
	var answer *discordgo.Message
	err := c.do(c.ctx, 5, func(opts ...discordgo.RequestOption) (err error) {
		answer, err = c.s.InteractionResponse(i, opts...)
		return err
	})
	if err != nil {
		c.log.Warn().Err(err).Str("channel", channel).Msg("/new: the command's answer could not be read; no thread opened")
		return
	}
	answer.GuildID = i.GuildID
	conv, err := c.startThread(c.ctx, channel, answer.ID, threadName(text, user), user.ID, agent)
	if err != nil {
		c.log.Error().Err(err).Str("channel", channel).Msg("/new: could not open a thread")
		c.replyTo(c.ctx, answer, "I could not open a thread for this: "+err.Error())
		return
	}
	if text == "" {
		msg := fmt.Sprintf("**%s** is ready. Send your first message here.", label)
		if _, err := c.send(c.ctx, conv.thread, &discordgo.MessageSend{Content: msg, AllowedMentions: noMentions}); err != nil {
			c.log.Debug().Err(err).Msg("/new: greeting not posted")
		}
		return
	}
	// The command's answer quotes the prompt; its status reaction shows
	// the turn.
	sink := newTurnSink(c, conv, answer)
	p := &adapter.Prompt{Ref: ref(answer), Title: excerpt(text, 80), Author: user.ID, Agent: agent,
		Blocks: []acp.ContentBlock{acp.TextBlock(text)}, Sink: sink}
	if err := c.engine.Submit(conv.thread, p); err != nil {
		sink.refused(err)
	}
}

// onAgents lists the agent profiles with their live and busy agents.
func (c *Client) onAgents(i *discordgo.Interaction) {
	known := c.allAgents()
	if len(known) == 0 {
		c.ephemeral(i, "This bot runs one agent; mention me to start a thread with it.")
		return
	}
	here := ""
	if conv := c.conversation(i.ChannelID); conv != nil {
		here = c.acl().ChannelAgents[conv.parent]
	} else {
		here = c.acl().ChannelAgents[i.ChannelID]
	}
	var b strings.Builder
	b.WriteString("**Agents** (start a thread with one: `/new agent:`)\n")
	for _, a := range known {
		fmt.Fprintf(&b, "• **%s**", a.Name)
		var tags []string
		if a.Default {
			tags = append(tags, "default")
		}
		if a.Name == here {
			tags = append(tags, "this channel's")
		}
		if a.Removed {
			tags = append(tags, "removed")
		}
		if len(tags) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(tags, ", "))
		}
		if a.Description != "" {
			b.WriteString(": " + excerpt(a.Description, 100))
		}
		fmt.Fprintf(&b, " — %d live, %d busy", a.Live, a.Busy)
		if a.Max > 0 {
			fmt.Fprintf(&b, ", at most %d", a.Max)
		}
		b.WriteString("\n")
	}
	c.ephemeral(i, excerptLines(b.String(), 1900))
}

func hasAgent(known []chat.AgentInfo, name string) bool {
	for _, a := range known {
		if a.Name == name {
			return true
		}
	}
	return false
}

func agentNames(known []chat.AgentInfo) string {
	names := make([]string, len(known))
	for i, a := range known {
		names[i] = "`" + a.Name + "`"
	}
	return "The agents are " + strings.Join(names, ", ") + "."
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
