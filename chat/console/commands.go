package console

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat"
	"acpbroker/chat/thread"
)

// own are the console's commands beside thread.Commands.
var own = []thread.CommandSpec{
	{Name: "help", Description: "List the commands"},
	{Name: "quit", Description: "Cancel the running turn and leave (/exit, or the end of the input, too)"},
}

// unserved are the commands of thread.Commands the console does not
// serve.
var unserved = []string{"schedules"}

// line handles one input line; it reports true for /quit. A command
// comes first, even while a question is open; another line answers an
// open question, or else is the next prompt.
func (c *Console) line(raw string) bool {
	text := strings.TrimSpace(raw)
	if name, ok := strings.CutPrefix(text, "/"); ok {
		word, _, _ := strings.Cut(name, " ")
		if known(word) {
			return c.command(name)
		}
		if c.answer(raw) {
			return false // "/decline", or a path a question asks for
		}
		if c.agentCommand(word) {
			c.submit(c.current(), text)
			return false
		}
		c.printf("[unknown command /%s, see /help; /agent NAME runs one of the agent's own]\n", word)
		return false
	}
	if c.answer(raw) || text == "" {
		return false
	}
	c.submit(c.current(), text)
	return false
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
func (c *Console) command(text string) bool {
	word, _, _ := strings.Cut(text, " ")
	switch strings.ToLower(word) {
	case "quit", "exit":
		c.Engine.Cancel(c.current(), adapter.CancelledBy("console user"))
		return true
	case "help":
		c.help()
		return false
	}
	cmd, ok := thread.ParseCommand(text, c.isAgent)
	if !ok {
		spec, _ := thread.LookupCommand(word)
		c.printf("[usage: /%s]\n", spec.Written())
		return false
	}
	if slices.Contains(unserved, cmd.Name) {
		c.printf("[/%s is not served on the console]\n", cmd.Name)
		return false
	}
	thread := c.current()
	a := cmd.Args
	switch cmd.Name {
	case "new":
		agent, prompt := a["agent"], a["prompt"]
		if agent == "" && !strings.Contains(prompt, " ") {
			// One word is an agent's name, told if it is none: more
			// likely mistyped than a whole first message.
			agent, prompt = prompt, ""
		}
		if c.newConversation(agent) && prompt != "" {
			c.submit(c.current(), prompt)
		}
	case "cancel":
		if !c.Engine.Cancel(thread, adapter.CancelledBy("console user")) {
			c.printf("[nothing to cancel]\n")
		}
	case "reset":
		c.Engine.Reset(thread, adapter.CancelledBy("reset"))
		c.printf("[session reset: the next message starts a fresh agent session]\n")
	case "status":
		c.status(thread)
	case "agents":
		c.listAgents()
	case "model":
		c.optionCommand(thread, cmd.Name, words(a["value"]))
	case "mode":
		c.optionCommand(thread, cmd.Name, words(a["value"]))
	case "config":
		c.optionCommand(thread, cmd.Name, words(a["option"], a["value"]))
	case "agent":
		c.optionCommand(thread, cmd.Name, words(a["name"], a["input"]))
	case "steer":
		c.steerCommand(thread, cmd.Name, a["message"])
	case "queue":
		c.steerCommand(thread, cmd.Name, a["remove"])
	default: // sessions, resume, fork
		c.steerCommand(thread, cmd.Name, a["session"])
	}
	return false
}

// words are the non-empty of args.
func words(args ...string) []string {
	var w []string
	for _, a := range args {
		if a != "" {
			w = append(w, a)
		}
	}
	return w
}

// agentCommand reports whether name is one of the commands the
// conversation's agent offers, which go to it as they are written.
func (c *Console) agentCommand(name string) bool {
	o := c.Engine.Options(c.current())
	return slices.ContainsFunc(o.Commands, func(cmd acp.AvailableCommand) bool { return cmd.Name == name })
}

// isAgent reports whether word names an agent profile; with no list,
// any word may.
func (c *Console) isAgent(word string) bool {
	if c.Agents == nil {
		return true
	}
	return slices.ContainsFunc(c.Agents(), func(a chat.AgentInfo) bool { return a.Name == word && !a.Removed })
}

// help lists the commands: thread.Commands, as every front end has
// them, then the console's own.
func (c *Console) help() {
	var b strings.Builder
	b.WriteString("[commands; any other line is a message for the agent]\n")
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

// status prints the conversation's agent; without one running, which
// profile will start, and the session it keeps.
func (c *Console) status(thread string) {
	s := c.Engine.Status(thread)
	state := "idle"
	if s.Busy {
		state = "busy"
	}
	if s.PID == 0 {
		profile := s.Profile
		if profile == "" {
			profile = c.profile()
		}
		switch {
		case s.Busy:
			c.printf("[busy, %d queued, profile %s: its agent is starting]\n", s.Queued, profile)
		case s.SessionID == "":
			c.printf("[idle, %d queued, no agent running; profile %s (its agent starts with the next message)]\n", s.Queued, profile)
		default:
			c.printf("[idle, %d queued, profile %s, session %q: its agent is not running (it starts again with the next message)]\n", s.Queued, profile, s.SessionID)
		}
		return
	}
	context := ""
	if u := chat.UsageText(s.Usage, nil); u != "" {
		context = ", context " + u
	}
	c.printf("[%s, %d queued, agent %q, model %q, mode %q, session %q, pid %d, agent up %s, in %s%s]\n", state, s.Queued, s.Profile, s.Model, s.Mode, s.SessionID, s.PID, s.AgentUp.Round(time.Second), s.Dir, context)
}

// profile names the profile the conversation's agent starts with.
func (c *Console) profile() string {
	if c.agent != "" {
		return c.agent
	}
	if c.Agents != nil {
		for _, a := range c.Agents() {
			if a.Default {
				return a.Name + " (the default)"
			}
		}
	}
	return "default"
}
