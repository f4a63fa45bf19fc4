package discord

import (
	"context"
	"fmt"
	"time"

	"acpbroker/chat"
	"acpbroker/chat/thread"

	"github.com/bwmarrin/discordgo"
)

// reply answers one interaction as package thread says: its first answer
// is the interaction's response, within Discord's 3 seconds; after Defer
// the answer edits the response.
type reply struct {
	c        *Client
	i        *discordgo.Interaction
	deferred bool
}

var _ thread.Reply = (*reply)(nil)

// Private implements thread.Reply: an ephemeral message.
func (r *reply) Private(ctx context.Context, v thread.View) {
	d := &discordgo.InteractionResponseData{Content: v.Text, Flags: discordgo.MessageFlagsEphemeral, AllowedMentions: noMentions}
	if len(v.Actions) > 0 {
		d.Components = components(v.Actions)
	}
	r.c.respond(ctx, r.i, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseChannelMessageWithSource, Data: d})
}

// Public implements thread.Reply: the response's message, or after
// Defer the response edited.
func (r *reply) Public(ctx context.Context, text string) {
	if !r.deferred {
		r.c.respond(ctx, r.i, &discordgo.InteractionResponse{
			Type: discordgo.InteractionResponseChannelMessageWithSource,
			Data: &discordgo.InteractionResponseData{Content: text, AllowedMentions: noMentions},
		})
		return
	}
	c := r.c
	err := c.do(ctx, 3, func(opts ...discordgo.RequestOption) error {
		_, err := c.s.InteractionResponseEdit(r.i, &discordgo.WebhookEdit{Content: &text, AllowedMentions: noMentions}, opts...)
		return err
	})
	if err != nil {
		c.log.Warn().Err(err).Str("interaction", r.i.ID).Msg("the deferred answer was not shown")
	}
}

// Posted implements thread.Reply: the response's message, read back.
func (r *reply) Posted(ctx context.Context) (thread.Origin, error) {
	c := r.c
	var m *discordgo.Message
	err := c.do(ctx, 5, func(opts ...discordgo.RequestOption) (err error) {
		m, err = c.s.InteractionResponse(r.i, opts...)
		return err
	})
	if err != nil {
		return thread.Origin{}, err
	}
	return thread.Origin{Where: m.ChannelID, ID: m.ID, Ref: ref(r.i.GuildID, m.ChannelID, m.ID)}, nil
}

// Update implements thread.Reply: the clicked message edited in the
// response.
func (r *reply) Update(ctx context.Context, v thread.View) {
	r.c.respond(ctx, r.i, &discordgo.InteractionResponse{
		Type: discordgo.InteractionResponseUpdateMessage,
		Data: &discordgo.InteractionResponseData{Content: v.Text, Components: components(v.Actions), AllowedMentions: noMentions},
	})
}

// Ack implements thread.Reply: a deferred update that changes nothing.
func (r *reply) Ack(ctx context.Context) {
	r.c.respond(ctx, r.i, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredMessageUpdate})
}

// Defer implements thread.Reply: Discord shows the bot thinking.
func (r *reply) Defer(ctx context.Context) {
	r.deferred = true
	r.c.respond(ctx, r.i, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredChannelMessageWithSource})
}

// Form implements thread.Reply: a modal of text inputs.
func (r *reply) Form(ctx context.Context, f thread.Form) {
	var rows []discordgo.MessageComponent
	for _, fl := range f.Fields {
		in := discordgo.TextInput{CustomID: fl.ID, Label: fl.Label, Style: discordgo.TextInputShort, Required: fl.Required,
			Placeholder: fl.Placeholder, MinLength: fl.MinRunes, MaxLength: fl.MaxRunes, Value: fl.Value}
		if fl.Multiline {
			in.Style = discordgo.TextInputParagraph
		}
		rows = append(rows, discordgo.ActionsRow{Components: []discordgo.MessageComponent{in}})
	}
	r.c.respond(ctx, r.i, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseModal,
		Data: &discordgo.InteractionResponseData{CustomID: f.ID, Title: f.Title, Components: rows}})
}

// interactionWindow is how long Discord waits for the first response to
// an interaction; after it the user is told the bot did not answer.
const interactionWindow = 3 * time.Second

// respond answers an interaction once. A 429 is tried again after its
// retry_after as long as the answer can still come within the
// interaction's window; a wait that would end past it is not made.
func (c *Client) respond(ctx context.Context, i *discordgo.Interaction, r *discordgo.InteractionResponse) {
	by := answerBy(i.ID, time.Now())
	err := c.doWhile(ctx, func(_ int, wait time.Duration) error {
		if time.Now().Add(wait).After(by) {
			return fmt.Errorf("%w: the next try would come after the interaction's %v", chat.ErrGaveUp, interactionWindow)
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
