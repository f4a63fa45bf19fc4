package discord

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"acpbroker/chat/thread"

	"github.com/bwmarrin/discordgo"
)

// platform is the Client as package thread drives it: its methods make
// one REST call each (a reaction waits for its channel's lane first) and
// tell Discord's errors in thread's terms. A thread is a Discord thread
// channel, named by its id, which is the id of the message it was
// opened from; a message's Ref is guild/channel/message.
type platform Client

var (
	_ thread.Platform = (*platform)(nil)
	_ thread.Typer    = (*platform)(nil)
	_ thread.Renamer  = (*platform)(nil)
	_ thread.Referrer = (*platform)(nil)
)

func (p *platform) client() *Client { return (*Client)(p) }

// noMentions: nothing the bot posts pings anyone.
var noMentions = &discordgo.MessageAllowedMentions{}

// Status reactions, by mark.
var emoji = map[thread.Mark]string{
	thread.MarkQueued:    "⏳",
	thread.MarkWorking:   "⚙️",
	thread.MarkDone:      "✅",
	thread.MarkFailed:    "❌",
	thread.MarkCancelled: "⏹️",
	thread.MarkRefused:   "🚫",
	thread.MarkLost:      "⚠️",
	thread.MarkStop:      emojiCancel,
}

// emojiCancel is a user's reaction that cancels the turn.
const emojiCancel = "🛑"

// Post implements thread.Platform.
func (p *platform) Post(ctx context.Context, where string, v thread.View) (string, error) {
	c := p.client()
	m := &discordgo.MessageSend{Content: v.Text, AllowedMentions: noMentions, Files: files(v.Files)}
	if len(v.Actions) > 0 {
		m.Components = components(v.Actions)
	}
	if v.ReplyTo != "" {
		m.Reference = &discordgo.MessageReference{MessageID: v.ReplyTo, ChannelID: where}
	}
	if v.NoPreview {
		m.Flags = discordgo.MessageFlagsSuppressEmbeds
	}
	var out *discordgo.Message
	err := c.callOnce(ctx, func(opts ...discordgo.RequestOption) (err error) {
		out, err = c.s.ChannelMessageSendComplex(where, m, opts...)
		return err
	})
	if err != nil {
		return "", err
	}
	return out.ID, nil
}

// Edit implements thread.Platform.
func (p *platform) Edit(ctx context.Context, where, id string, v thread.View) error {
	c := p.client()
	e := discordgo.NewMessageEdit(where, id).SetContent(v.Text)
	comps := components(v.Actions)
	e.Components = &comps
	e.AllowedMentions = noMentions
	e.Files = files(v.Files)
	return c.callOnce(ctx, func(opts ...discordgo.RequestOption) error {
		_, err := c.s.ChannelMessageEditComplex(e, opts...)
		return err
	})
}

// Delete implements thread.Platform.
func (p *platform) Delete(ctx context.Context, where, id string) error {
	c := p.client()
	return c.callOnce(ctx, func(opts ...discordgo.RequestOption) error {
		return c.s.ChannelMessageDelete(where, id, opts...)
	})
}

// Mark implements thread.Platform: a reaction, in its channel's lane.
func (p *platform) Mark(ctx context.Context, where, id string, m thread.Mark, on bool) error {
	c := p.client()
	e, ok := emoji[m]
	if !ok {
		return fmt.Errorf("no reaction for the mark %v", m)
	}
	l, ok := c.enterLane(ctx, where)
	if !ok {
		return cmp.Or(context.Cause(ctx), context.Cause(c.ctx))
	}
	defer c.leaveLane(where, l, true)
	return c.callOnce(ctx, func(opts ...discordgo.RequestOption) error {
		if on {
			return c.s.MessageReactionAdd(where, id, e, opts...)
		}
		return c.s.MessageReactionRemove(where, id, e, "@me", opts...)
	})
}

// Marks implements thread.Platform: the bot's reactions that are marks.
func (p *platform) Marks(ctx context.Context, where, id string) ([]thread.Mark, error) {
	c := p.client()
	var m *discordgo.Message
	err := c.callOnce(ctx, func(opts ...discordgo.RequestOption) (err error) {
		m, err = c.s.ChannelMessage(where, id, opts...)
		return err
	})
	if err != nil {
		return nil, err
	}
	var out []thread.Mark
	for _, r := range m.Reactions {
		if !r.Me || r.Emoji == nil {
			continue
		}
		for mark, e := range emoji {
			if e == r.Emoji.Name {
				out = append(out, mark)
			}
		}
	}
	return out, nil
}

// OpenThread implements thread.Platform: a public thread from the
// message, archived after a day of quiet.
func (p *platform) OpenThread(ctx context.Context, channel, id, name string) (string, error) {
	c := p.client()
	var ch *discordgo.Channel
	err := c.callOnce(ctx, func(opts ...discordgo.RequestOption) (err error) {
		ch, err = c.s.MessageThreadStartComplex(channel, id, &discordgo.ThreadStart{Name: name, AutoArchiveDuration: 1440}, opts...)
		return err
	})
	if err != nil {
		return "", err
	}
	return ch.ID, nil
}

// errNotOurs: the channel is not a thread the bot owns.
var errNotOurs = fmt.Errorf("%w: not a thread of the bot's", thread.ErrNotFound)

// Thread implements thread.Platform: a thread channel the bot owns, from
// discordgo's state when it knows it.
func (p *platform) Thread(ctx context.Context, where string) (string, error) {
	c := p.client()
	ch, err := c.s.State.Channel(where)
	if err != nil {
		err = c.callOnce(ctx, func(opts ...discordgo.RequestOption) error {
			var err error
			ch, err = c.s.Channel(where, opts...)
			return err
		})
	}
	switch {
	case err != nil:
		return "", err
	case ch == nil || !ch.IsThread() || ch.OwnerID != c.me():
		return "", errNotOurs
	}
	return ch.ParentID, nil
}

// Starter implements thread.Platform: the author of the message the
// thread was opened from, which shares its id.
func (p *platform) Starter(ctx context.Context, channel, thread string) (string, error) {
	c := p.client()
	var first *discordgo.Message
	err := c.callOnce(ctx, func(opts ...discordgo.RequestOption) (err error) {
		first, err = c.s.ChannelMessage(channel, thread, opts...)
		return err
	})
	switch {
	case err != nil:
		return "", err
	case first.Author == nil:
		return "", errNoAuthor
	}
	return first.Author.ID, nil
}

var errNoAuthor = fmt.Errorf("%w: the message has no author", thread.ErrNotFound)

// History implements thread.Platform: the messages after after whose
// ids tell when they were made.
func (p *platform) History(ctx context.Context, where, after string) ([]thread.Past, error) {
	c := p.client()
	var msgs []*discordgo.Message
	err := c.callOnce(ctx, func(opts ...discordgo.RequestOption) (err error) {
		msgs, err = c.s.ChannelMessages(where, 100, "", after, "", opts...)
		return err
	})
	if err != nil {
		return nil, err
	}
	// Discord lists them newest first.
	slices.SortFunc(msgs, func(a, b *discordgo.Message) int { return cmp.Compare(snowflake(a.ID), snowflake(b.ID)) })
	out := make([]thread.Past, 0, len(msgs))
	me := c.me()
	for _, m := range msgs {
		at, err := discordgo.SnowflakeTimestamp(m.ID)
		if err != nil {
			continue
		}
		out = append(out, thread.Past{ID: m.ID, At: at, Mine: m.Author != nil && m.Author.ID == me, Outcome: thread.ShowsOutcome(m.Content)})
	}
	return out, nil
}

// snowflake is a Discord id as a number, in the order ids were made.
func snowflake(id string) uint64 {
	n, _ := strconv.ParseUint(id, 10, 64)
	return n
}

// ref names a message for the journal: guild/channel/message.
func ref(guild, channel, message string) string { return guild + "/" + channel + "/" + message }

// Ref implements thread.Referrer: the message's guild, from the
// gateway's cache of its channel when it knows it.
func (p *platform) Ref(ctx context.Context, where, id string) (string, error) {
	c := p.client()
	ch, err := c.s.State.Channel(where)
	if err != nil {
		err = c.callOnce(ctx, func(opts ...discordgo.RequestOption) error {
			var err error
			ch, err = c.s.Channel(where, opts...)
			return err
		})
	}
	if err != nil {
		return "", err
	}
	return ref(ch.GuildID, where, id), nil
}

// Locate implements thread.Platform.
func (p *platform) Locate(r string) (where, id, link string, ok bool) {
	parts := strings.Split(r, "/")
	if len(parts) != 3 {
		return "", "", "", false
	}
	return parts[1], parts[2], fmt.Sprintf("https://discord.com/channels/%s/%s/%s", parts[0], parts[1], parts[2]), true
}

// ThreadLink implements thread.Linker: a channel mention.
func (p *platform) ThreadLink(thread string) string { return "<#" + thread + ">" }

// Download implements thread.Platform: an attachment's URL, fetched
// with Config.HTTPClient within RequestTimeout, a byte past limit at
// most.
func (p *platform) Download(ctx context.Context, f thread.Attachment, limit int64) ([]byte, error) {
	c := p.client()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.URL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("download answered %s", resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, limit+1))
}

// Usage implements thread.Platform: a slash command with its options,
// "/config option:mode value:".
func (p *platform) Usage(command string, args ...thread.Arg) string {
	s := "/" + command
	for _, a := range args {
		s += " " + a.Name + ":" + a.Value
	}
	return s
}

// Typing implements thread.Typer.
func (p *platform) Typing(ctx context.Context, where string) error {
	c := p.client()
	return c.callOnce(ctx, func(opts ...discordgo.RequestOption) error {
		return c.s.ChannelTyping(where, opts...)
	})
}

// files are a View's files as discordgo sends them.
func files(fs []thread.File) []*discordgo.File {
	var out []*discordgo.File
	for _, f := range fs {
		out = append(out, &discordgo.File{Name: f.Name, ContentType: f.Type, Reader: strings.NewReader(f.Data)})
	}
	return out
}

// components lay out a View's actions: a select menu a row of its own,
// buttons five to a row, at most five rows.
func components(actions []thread.Action) []discordgo.MessageComponent {
	rows := []discordgo.MessageComponent{}
	var row discordgo.ActionsRow
	flush := func() {
		if len(row.Components) > 0 {
			rows = append(rows, row)
			row = discordgo.ActionsRow{}
		}
	}
	for _, a := range actions {
		if a.Menu != nil {
			flush()
			rows = append(rows, discordgo.ActionsRow{Components: []discordgo.MessageComponent{selectMenu(a)}})
			continue
		}
		if len(row.Components) == 5 {
			flush()
		}
		row.Components = append(row.Components, button(a))
	}
	flush()
	return rows[:min(len(rows), 5)]
}

func button(a thread.Action) discordgo.Button {
	if a.URL != "" {
		return discordgo.Button{Label: a.Label, Style: discordgo.LinkButton, URL: a.URL}
	}
	style := discordgo.SecondaryButton
	switch a.Style {
	case thread.Primary:
		style = discordgo.PrimaryButton
	case thread.Success:
		style = discordgo.SuccessButton
	case thread.Danger:
		style = discordgo.DangerButton
	}
	return discordgo.Button{Label: a.Label, Style: style, CustomID: a.ID}
}

func selectMenu(a thread.Action) discordgo.SelectMenu {
	m := a.Menu
	lo := m.Min
	menu := discordgo.SelectMenu{MenuType: discordgo.StringSelectMenu, CustomID: a.ID, Placeholder: m.Placeholder, MinValues: &lo, MaxValues: m.Max}
	for _, o := range m.Options {
		menu.Options = append(menu.Options, discordgo.SelectMenuOption{Label: o.Label, Value: o.Value, Default: o.Default})
	}
	return menu
}
