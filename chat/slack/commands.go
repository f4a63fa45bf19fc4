package slack

import (
	"fmt"
	"strings"
	"time"

	"acpbroker/chat/thread"

	slackapi "github.com/slack-go/slack"
)

// onCommand serves the slash command (/acp …). Slack delivers no slash
// command typed in a thread, so it serves what makes sense in a channel:
// new, agents, schedules and web go to the Server; status lists the agents too; help
// (or nothing) says how to use the app; a command of a thread's is told
// to be written to the app in the thread.
func (c *Client) onCommand(cmd *slackapi.SlashCommand, at time.Time) {
	from := c.user(c.ctx, cmd.UserID, false)
	r := &reply{c: c, user: from.ID, channel: cmd.ChannelID, where: cmd.ChannelID, responseURL: cmd.ResponseURL, trigger: cmd.TriggerID, at: at}
	text := strings.TrimSpace(cmd.Text)
	name, _, _ := strings.Cut(text, " ")
	name = strings.ToLower(name)
	switch name {
	case "", "help":
		c.spawn(func() { r.Private(c.ctx, thread.View{Text: c.help()}) })
		return
	case "status":
		text = "agents"
	}
	parsed, ok := c.srv.Parse(text)
	switch {
	case !ok:
		c.spawn(func() {
			r.Private(c.ctx, thread.View{Text: fmt.Sprintf("I don't know `%s %s`.\n\n%s", c.cfg.Command, label(text, 80), c.help())})
		})
	case channelCommand(parsed.Name):
		parsed.Where, parsed.From, parsed.Reply = cmd.ChannelID, from, r
		c.srv.Command(parsed)
	default:
		usage := (*platform)(c).Usage(parsed.Name)
		c.spawn(func() {
			r.Private(c.ctx, thread.View{Text: fmt.Sprintf("Slack sends me no command typed in a thread: write `%s` to me in the thread instead.", usage)})
		})
	}
}

// channelCommand reports whether the slash command serves command: those
// of a channel rather than of a thread (web: of either).
func channelCommand(command string) bool {
	return command == "new" || command == "agents" || command == "schedules" || command == "web"
}

// help says how to use the app in Slack.
func (c *Client) help() string {
	bot := "@" + c.botName()
	var b strings.Builder
	fmt.Fprintf(&b, "**Start**: mention %s in a channel I serve with a question or a task; I answer in a thread of your message, with an agent of its own. Every later message in the thread goes to the same agent (no mention needed).\n", bot)
	fmt.Fprintf(&b, "**In the thread**: the **Cancel** button or a 🛑 reaction stops the running turn; or write to me, the mention first:\n")
	for _, spec := range thread.Commands {
		if channelCommand(spec.Name) {
			continue
		}
		usage := bot + " " + spec.Name
		for _, p := range spec.Params {
			usage += " [" + p.Name + "]"
		}
		fmt.Fprintf(&b, "• `%s`: %s\n", usage, spec.Description)
	}
	fmt.Fprintf(&b, "**Here**: `%s new [agent] [prompt]` starts a thread with an agent, `%s agents` lists them, `%s schedules` lists the schedules (an approver runs, pauses or resumes one: `%s schedules run [name]`), `%s web` gives you a private link to the broker's web pages, `%s help` shows this.\n", c.cfg.Command, c.cfg.Command, c.cfg.Command, c.cfg.Command, c.cfg.Command, c.cfg.Command)
	b.WriteString("-# Only the thread's starter or an approver can answer its questions, cancel it, reset it or change its agent.")
	return b.String()
}
