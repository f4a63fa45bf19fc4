package thread

import (
	"fmt"
	"strings"

	"acpbroker/acp"
	"acpbroker/chat"
)

// onNew starts a thread with the agent the user chose (new agent:NAME
// prompt:TEXT), from an allowed channel or one of its threads: the
// command's answer opens the thread, and the prompt, if any, is its
// first turn.
func (s *Server) onNew(c Command) {
	channel := c.Where
	if conv := s.conversation(channel); conv != nil {
		channel = conv.channel // from a thread: a new thread beside it
	}
	access := s.acl()
	if !access.channel(channel) {
		s.tell(c.Reply, fmt.Sprintf("I don't answer in this channel; use %s in one I serve.", s.p.Usage("new")))
		return
	}
	agent, text := c.Args["agent"], c.Args["prompt"]
	known := s.Agents()
	if agent == "" {
		agent = access.ChannelAgents[channel]
	}
	if agent != "" && len(known) > 0 && !hasAgent(known, agent) {
		s.tell(c.Reply, fmt.Sprintf("There is no agent %q. %s", agent, agentNames(known)))
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
	intro := fmt.Sprintf("🧵 <@%s> started a thread with **%s**.", c.From.ID, label)
	if text != "" {
		intro += "\n> " + excerpt(text, 300)
	}
	c.Reply.Public(s.ctx, intro)
	answer, err := c.Reply.Posted(s.ctx)
	if err != nil {
		s.log.Warn().Err(err).Str("channel", channel).Msg("new: the command's answer could not be read; no thread opened")
		return
	}
	conv, err := s.startThread(s.ctx, channel, answer.ID, threadName(text, c.From), c.From.ID, agent)
	if err != nil {
		s.log.Error().Err(err).Str("channel", channel).Msg("new: could not open a thread")
		if _, err := s.post(s.ctx, answer.Where, View{Text: "I could not open a thread for this: " + err.Error(), ReplyTo: answer.ID}); err != nil {
			s.log.Warn().Err(err).Msg("reply not sent")
		}
		return
	}
	if text == "" {
		msg := fmt.Sprintf("**%s** is ready. Send your first message here.", label)
		if _, err := s.post(s.ctx, conv.thread, View{Text: msg}); err != nil {
			s.log.Debug().Err(err).Msg("new: greeting not posted")
		}
		return
	}
	// The command's answer quotes the prompt; its status mark shows the
	// turn.
	s.submit(conv, answer, c.From, text, agent, []acp.ContentBlock{acp.TextBlock(text)}, nil)
}

// onAgents lists the agent profiles with their live and busy agents.
func (s *Server) onAgents(c Command) {
	known := s.allAgents()
	if len(known) == 0 {
		s.tell(c.Reply, "This bot runs one agent; mention me to start a thread with it.")
		return
	}
	here := ""
	if conv := s.conversation(c.Where); conv != nil {
		here = s.acl().ChannelAgents[conv.channel]
	} else {
		here = s.acl().ChannelAgents[c.Where]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "**Agents** (start a thread with one: `%s`)\n", s.p.Usage("new", Arg{Name: "agent"}))
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
	s.tell(c.Reply, excerptLines(b.String(), s.listLimit()))
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
