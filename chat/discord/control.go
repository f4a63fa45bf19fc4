package discord

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"acpbroker/adapter"
	"acpbroker/chat"

	"github.com/bwmarrin/discordgo"
)

// threadCommands act on the thread they are used in.
var threadCommands = []*discordgo.ApplicationCommand{
	{Name: "cancel", Description: "Stop the agent's current turn in this thread"},
	{Name: "reset", Description: "End this thread's agent session; the next message starts a fresh one"},
	{Name: "status", Description: "Show this thread's agent: profile, model, mode, session, busy or idle, queue, uptime"},
}

// Discord's bounds on a command option's choices.
const (
	maxChoices    = 25
	maxChoiceName = 100
)

// commandList is every slash command, /new's agent choices from the
// profiles now configured.
func (c *Client) commandList() []*discordgo.ApplicationCommand {
	agent := &discordgo.ApplicationCommandOption{Type: discordgo.ApplicationCommandOptionString, Name: "agent",
		Description: "The agent to start (default: this channel's, or the bot's default)"}
	for _, a := range c.agents() {
		if len(agent.Choices) == maxChoices {
			break
		}
		label := a.Name
		if a.Description != "" {
			label += ": " + a.Description
		}
		agent.Choices = append(agent.Choices, &discordgo.ApplicationCommandOptionChoice{Name: excerpt(label, maxChoiceName), Value: a.Name})
	}
	prompt := &discordgo.ApplicationCommandOption{Type: discordgo.ApplicationCommandOptionString, Name: "prompt",
		Description: "The first message for the agent (or send it in the thread)"}
	list := append(slices.Clone(threadCommands),
		&discordgo.ApplicationCommand{Name: "new", Description: "Start a new thread with an agent", Options: []*discordgo.ApplicationCommandOption{agent, prompt}},
		&discordgo.ApplicationCommand{Name: "agents", Description: "List the agents this bot runs, with how many are live and busy"},
	)
	return append(list, optionCommands...)
}

// agents is the configured profiles (none when the broker was given no
// list).
func (c *Client) agents() []chat.AgentInfo {
	var out []chat.AgentInfo
	for _, a := range c.allAgents() {
		if !a.Removed {
			out = append(out, a)
		}
	}
	return out
}

// allAgents is the configured profiles and those removed whose agents
// still run.
func (c *Client) allAgents() []chat.AgentInfo {
	if c.cfg.Agents == nil {
		return nil
	}
	return c.cfg.Agents()
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

func (c *Client) onInteraction(_ *discordgo.Session, ic *discordgo.InteractionCreate) {
	c.mu.Lock()
	accepting := c.accepting
	c.mu.Unlock()
	i := ic.Interaction
	c.spawn(func() {
		if i.Type == discordgo.InteractionApplicationCommandAutocomplete {
			if accepting {
				c.onAutocomplete(i)
			}
			return
		}
		if !accepting {
			c.ephemeral(i, "The broker is shutting down; try again in a moment.")
			return
		}
		switch i.Type {
		case discordgo.InteractionMessageComponent:
			if id := i.MessageComponentData().CustomID; strings.HasPrefix(id, "perm:") {
				c.onPermissionClick(i, id)
			} else if strings.HasPrefix(id, "elic:") {
				c.onQuestionComponent(i, id)
			}
		case discordgo.InteractionModalSubmit:
			c.onQuestionModal(i)
		case discordgo.InteractionApplicationCommand:
			c.onCommand(i)
		}
	})
}

func (c *Client) onCommand(i *discordgo.Interaction) {
	user, roles := interactionUser(i)
	if !c.allowedUser(user.ID, roles) {
		c.ephemeral(i, "You are not allowed to use this bot.")
		return
	}
	switch i.ApplicationCommandData().Name {
	case "new":
		c.onNew(i, user)
		return
	case "agents":
		c.onAgents(i)
		return
	}
	conv := c.conversation(i.ChannelID)
	if conv == nil {
		c.ephemeral(i, "Use this command inside one of my conversation threads.")
		return
	}
	access := c.acl()
	if !access.channel(conv.parent) {
		c.ephemeral(i, "This channel is no longer served by the bot.")
		return
	}
	name := i.ApplicationCommandData().Name
	c.log.Info().Str("thread", conv.thread).Str("user", user.ID).Str("command", name).Msg("slash command")
	if c.onOptionCommand(i, conv, user, roles, name) {
		return
	}
	if (name == "cancel" || name == "reset") && !access.mayAct(conv.parent, c.starterOf(conv), user.ID, roles) {
		c.log.Info().Str("thread", conv.thread).Str("user", user.ID).Str("command", name).Msg("slash command refused: not the thread's starter or an approver")
		c.ephemeral(i, fmt.Sprintf("%s can /%s this thread; you can't. You can start your own thread by mentioning me.", whoMayAct(c.starterOf(conv)), name))
		return
	}
	switch name {
	case "cancel":
		if c.engine.Cancel(conv.thread, adapter.CancelledBy(displayName(user))) {
			c.public(i, fmt.Sprintf("🛑 <@%s> cancelled the current turn.", user.ID))
		} else {
			c.ephemeral(i, "Nothing is running in this thread.")
		}
	case "reset":
		c.engine.Reset(conv.thread, adapter.CancelledBy(displayName(user)+" (session reset)"))
		c.public(i, fmt.Sprintf("🔄 <@%s> reset the session: the next message starts a fresh agent session.", user.ID))
	case "status":
		st := c.engine.Status(conv.thread)
		var b strings.Builder
		state := "idle"
		if st.Busy {
			state = fmt.Sprintf("busy (turn running for %s)", time.Since(st.TurnStarted).Round(time.Second))
		}
		fmt.Fprintf(&b, "**State**: %s, %d message(s) queued\n", state, st.Queued)
		if st.Profile != "" {
			fmt.Fprintf(&b, "**Profile**: %s\n", st.Profile)
		}
		if st.Model != "" {
			fmt.Fprintf(&b, "**Model**: %s\n", st.Model)
		}
		if st.Mode != "" {
			fmt.Fprintf(&b, "**Mode**: %s\n", st.Mode)
		}
		if st.Dir != "" {
			fmt.Fprintf(&b, "**Workspace**: `%s`\n", st.Dir)
		}
		if st.PID != 0 {
			fmt.Fprintf(&b, "**Agent**: pid %d, up %s\n**Session**: `%s`", st.PID, st.AgentUp.Round(time.Second), st.SessionID)
		} else {
			b.WriteString("**Agent**: not running (it starts with the next message)")
		}
		if u := chat.UsageText(st.Usage, nil); u != "" {
			fmt.Fprintf(&b, "\n**Context**: %s", u)
		}
		c.ephemeral(i, b.String())
	default:
		c.ephemeral(i, "Unknown command.")
	}
}

// onReaction cancels a thread's turn when a user who may act on the
// thread (see Access.mayAct) reacts 🛑 to a message in it, or to the
// message the thread was started from. Anyone
// else's 🛑 is ignored: counted and logged (at most ignoredCancelBurst
// lines a second), never answered in the thread, whose messages are
// bounded and not for strangers to spend.
func (c *Client) onReaction(_ *discordgo.Session, r *discordgo.MessageReactionAdd) {
	if r.Emoji.Name != emojiCancel || r.UserID == c.me() {
		return
	}
	c.mu.Lock()
	conv := c.convs[r.ChannelID]
	if conv == nil {
		conv = c.convs[r.MessageID] // the thread's starter message shares its id
	}
	accepting := c.accepting
	c.mu.Unlock()
	if conv == nil || !accepting {
		return
	}
	var roles []string
	name := "<@" + r.UserID + ">"
	if r.Member != nil {
		roles = r.Member.Roles
		if r.Member.User != nil {
			name = displayName(r.Member.User)
			if r.Member.User.Bot {
				return
			}
		}
	}
	access := c.acl()
	if !access.channel(conv.parent) {
		return // its turns were cancelled when the channel was taken off
	}
	if !access.mayAct(conv.parent, c.starterOf(conv), r.UserID, roles) {
		c.mu.Lock()
		c.stats.IgnoredCancels++
		c.mu.Unlock()
		c.ignored.Info().Str("thread", conv.thread).Str("user", r.UserID).Msg("🛑 ignored: not allowed to cancel this thread's turn")
		return
	}
	if c.engine.Cancel(conv.thread, adapter.CancelledBy(name)) {
		c.log.Info().Str("thread", conv.thread).Str("user", r.UserID).Msg("turn cancelled by reaction")
	}
}

// ignoredCancelBurst is how many ignored 🛑 reactions a second reach the
// log: anyone who can see a thread can react, as often as they like.
const ignoredCancelBurst = 5

func (c *Client) conversation(channel string) *conversation {
	c.mu.Lock()
	conv := c.convs[channel]
	if conv != nil {
		conv.used = time.Now()
	}
	c.mu.Unlock()
	if conv != nil {
		return conv
	}
	return c.adoptThread(c.ctx, channel)
}

func interactionUser(i *discordgo.Interaction) (*discordgo.User, []string) {
	if i.Member != nil && i.Member.User != nil {
		return i.Member.User, i.Member.Roles
	}
	if i.User != nil {
		return i.User, nil
	}
	return &discordgo.User{}, nil
}

func displayName(u *discordgo.User) string {
	if u.GlobalName != "" {
		return u.GlobalName
	}
	if u.Username != "" {
		return u.Username
	}
	return "<@" + u.ID + ">"
}

func (c *Client) ephemeral(i *discordgo.Interaction, text string) {
	c.respond(i, &discordgo.InteractionResponse{
		Type: discordgo.InteractionResponseChannelMessageWithSource,
		Data: &discordgo.InteractionResponseData{Content: text, Flags: discordgo.MessageFlagsEphemeral, AllowedMentions: noMentions},
	})
}

func (c *Client) public(i *discordgo.Interaction, text string) {
	c.respond(i, &discordgo.InteractionResponse{
		Type: discordgo.InteractionResponseChannelMessageWithSource,
		Data: &discordgo.InteractionResponseData{Content: text, AllowedMentions: noMentions},
	})
}

// interactionWindow is how long Discord waits for the first response to
// an interaction; after it the user is told the bot did not answer.
const interactionWindow = 3 * time.Second

// respond answers an interaction once. A 429 is tried again after its
// retry_after as long as the answer can still come within the
// interaction's window; a wait that would end past it is not made.
func (c *Client) respond(i *discordgo.Interaction, r *discordgo.InteractionResponse) {
	by := answerBy(i.ID, time.Now())
	err := c.doWhile(c.ctx, func(_ int, wait time.Duration) error {
		if time.Now().Add(wait).After(by) {
			return fmt.Errorf("%w: the next try would come after the interaction's %v", errGaveUp, interactionWindow)
		}
		return nil
	}, func(opts ...discordgo.RequestOption) error {
		return c.s.InteractionRespond(i, r, opts...)
	})
	if err != nil {
		c.log.Warn().Err(err).Str("interaction", i.ID).Msg("interaction not answered")
	}
}

// answerBy is when the window of the interaction id ends: 3 seconds after
// Discord made it, by its snowflake; 3 seconds from now for an id that
// tells no time or a time ahead of this clock. An interaction seen after
// its window (replayed after a resume) is still tried once.
func answerBy(id string, now time.Time) time.Time {
	made, err := discordgo.SnowflakeTimestamp(id)
	by := made.Add(interactionWindow)
	if err != nil || by.After(now.Add(interactionWindow)) {
		return now.Add(interactionWindow)
	}
	if by.Before(now) {
		return now
	}
	return by
}
