package discord

import (
	"strings"

	"acpbroker/chat/thread"

	"github.com/bwmarrin/discordgo"
)

// onMessage hands a guild message to the Server, the bot's own left out.
func (c *Client) onMessage(_ *discordgo.Session, m *discordgo.MessageCreate) {
	if m.Author == nil || m.GuildID == "" {
		return
	}
	me := c.me()
	if m.Author.ID == me {
		return
	}
	c.srv.Message(message(m.Message, me))
}

// message is a Discord message as package thread takes it. A thread
// opened from it has its id.
func message(m *discordgo.Message, me string) thread.Message {
	var roles []string
	if m.Member != nil {
		roles = m.Member.Roles
	}
	content := strings.TrimSpace(m.Content)
	out := thread.Message{
		Where:     m.ChannelID,
		ID:        m.ID,
		Ref:       ref(m.GuildID, m.ChannelID, m.ID),
		From:      user(m.Author, roles),
		Text:      stripMention(m.Content, me),
		Mentioned: mentions(m, me),
		Addressed: me != "" && (strings.HasPrefix(content, "<@"+me+">") || strings.HasPrefix(content, "<@!"+me+">")),
		Opens:     m.ID,
	}
	for _, a := range m.Attachments {
		out.Files = append(out.Files, thread.Attachment{Name: a.Filename, Type: a.ContentType, Size: int64(a.Size), URL: a.URL})
	}
	return out
}

func mentions(m *discordgo.Message, me string) bool {
	for _, u := range m.Mentions {
		if u != nil && u.ID == me {
			return true
		}
	}
	return strings.Contains(m.Content, "<@"+me+">") || strings.Contains(m.Content, "<@!"+me+">")
}

func stripMention(s, me string) string {
	s = strings.ReplaceAll(s, "<@!"+me+">", "")
	s = strings.ReplaceAll(s, "<@"+me+">", "")
	return strings.TrimSpace(s)
}

// user is a Discord user as package thread takes it: the global name
// shown, the user name kept.
func user(u *discordgo.User, roles []string) thread.User {
	return thread.User{ID: u.ID, Name: u.GlobalName, Handle: u.Username, Roles: roles, Bot: u.Bot}
}

// onReaction hands a 🛑 on a message of a channel (a thread, or the
// message a thread was opened from) to the Server; the bot's own and
// other reactions are left out.
func (c *Client) onReaction(_ *discordgo.Session, r *discordgo.MessageReactionAdd) {
	if r.Emoji.Name != emojiCancel || r.UserID == c.me() {
		return
	}
	from := thread.User{ID: r.UserID}
	if r.Member != nil {
		from.Roles = r.Member.Roles
		if r.Member.User != nil {
			from = user(r.Member.User, r.Member.Roles)
			from.ID = r.UserID
		}
	}
	c.srv.Reaction(thread.Reaction{Threads: []string{r.ChannelID, r.MessageID}, From: from, Mark: thread.MarkStop})
}

// onInteraction hands a click, a modal, a slash command or an
// autocompletion to the Server, with a Reply that answers it within
// Discord's 3 seconds.
func (c *Client) onInteraction(_ *discordgo.Session, ic *discordgo.InteractionCreate) {
	c.dispatch(ic.Interaction, &reply{c: c, i: ic.Interaction})
}

// dispatch hands interaction i to the Server, answered through r, or
// answers an autocompletion on a goroutine of the Client's; it reports
// whether the Server was handed an event.
func (c *Client) dispatch(i *discordgo.Interaction, r thread.Reply) bool {
	from := interactionUser(i)
	switch i.Type {
	case discordgo.InteractionApplicationCommandAutocomplete:
		c.spawn(func() { c.onAutocomplete(i, from) })
		return false
	case discordgo.InteractionMessageComponent:
		d := i.MessageComponentData()
		c.srv.Click(thread.Click{Where: i.ChannelID, Action: d.CustomID, Values: d.Values, From: from, Reply: r})
	case discordgo.InteractionModalSubmit:
		d := i.ModalSubmitData()
		values := map[string]string{}
		for _, row := range d.Components {
			ar, ok := row.(*discordgo.ActionsRow)
			if !ok {
				continue
			}
			for _, comp := range ar.Components {
				if in, ok := comp.(*discordgo.TextInput); ok {
					values[in.CustomID] = in.Value
				}
			}
		}
		c.srv.Answer(thread.FormAnswer{Form: d.CustomID, Values: values, From: from, Reply: r})
	case discordgo.InteractionApplicationCommand:
		args, _ := commandArgs(i)
		c.srv.Command(thread.Command{Name: i.ApplicationCommandData().Name, Args: args, Where: i.ChannelID, From: from, Reply: r})
	default:
		return false
	}
	return true
}

func interactionUser(i *discordgo.Interaction) thread.User {
	if i.Member != nil && i.Member.User != nil {
		return user(i.Member.User, i.Member.Roles)
	}
	if i.User != nil {
		return user(i.User, nil)
	}
	return thread.User{}
}
