package brokertest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"acpbroker/internal/fakediscord"
)

// Discord reads and drives the fake Discord as the broker's users see
// it: Channel is the allowed channel where the bot is mentioned. Its
// methods wait within a context and return errors rather than failing a
// test, so they are safe on any goroutine.
type Discord struct {
	Srv     *fakediscord.Server
	Channel string
}

// RestartNotice starts the message a broker posts about a turn it did
// not finish before it restarted.
const RestartNotice = "⚠️ The broker restarted"

// PermissionPrefix starts a permission request.
const PermissionPrefix = "🔐"

// Status reactions the broker puts on a user's message.
const (
	Queued    = "⏳"
	Working   = "⚙️"
	Done      = "✅"
	Failed    = "❌"
	Cancelled = "⏹️"
	Refused   = "🚫"
)

// Final reports whether a status reaction says the message's turn ended.
func Final(emoji string) bool {
	return emoji == Done || emoji == Failed || emoji == Cancelled || emoji == Refused
}

// Mention has u mention the bot in the channel with text, waits for the
// thread the broker opens and returns its id (the message's).
func (d Discord) Mention(ctx context.Context, u fakediscord.User, text string, opts ...fakediscord.MessageOption) (string, error) {
	id := d.Srv.SendMessage(d.Channel, u, d.Srv.Bot().Mention()+" "+text, opts...)
	err := d.Srv.WaitFor(ctx, func() bool {
		ch, ok := d.Srv.Channel(id)
		return ok && ch.IsThread()
	})
	if err != nil {
		return id, fmt.Errorf("no thread for %q: %w", text, err)
	}
	return id, nil
}

// Post has u write text in a thread and returns the message's id.
func (d Discord) Post(thread string, u fakediscord.User, text string) string {
	return d.Srv.SendMessage(thread, u, text)
}

// BotMessages are the bot's messages in a channel that speak of turns:
// answers and notices, without permission requests, replies to
// interactions and replies to refused messages.
func (d Discord) BotMessages(channel string) []fakediscord.Message {
	var out []fakediscord.Message
	bot := d.Srv.Bot().ID
	for _, m := range d.Srv.Messages(channel) {
		if m.Author.ID == bot && m.InteractionID == "" && m.ReferenceID == "" && !strings.HasPrefix(m.Content, PermissionPrefix) {
			out = append(out, m)
		}
	}
	return out
}

// Answer is one turn's answer as the thread shows it: its messages, up to
// and including the one with the final footer.
type Answer struct {
	Msgs   []fakediscord.Message
	Text   string // the messages' contents, joined by newlines
	Footer string // the final line: how the turn ended
}

// Answers splits the bot's messages in a thread into finished answers,
// told apart by their final footers; restart notices are skipped and an
// answer still streaming is left out.
func (d Discord) Answers(thread string) []Answer {
	var out []Answer
	var cur []fakediscord.Message
	for _, m := range d.BotMessages(thread) {
		if strings.HasPrefix(m.Content, RestartNotice) {
			continue
		}
		cur = append(cur, m)
		if f := Footer(m.Content); f != "" {
			a := Answer{Msgs: cur, Footer: f}
			parts := make([]string, len(cur))
			for i, m := range cur {
				parts[i] = m.Content
			}
			a.Text = strings.Join(parts, "\n")
			out = append(out, a)
			cur = nil
		}
	}
	return out
}

// Footer returns a message's last line if it says how a turn ended
// ("-# ✅ …", "-# ❌ …", "-# ⏹️ …", "-# ☑️ …"). The line shown while a
// turn is being abandoned ("-# ⏹️ stopping: …") is not such a line.
func Footer(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	last := lines[len(lines)-1]
	if strings.HasPrefix(last, "-# ⏹️ stopping:") {
		return ""
	}
	for _, mark := range []string{"-# ✅", "-# ❌", "-# ⏹️", "-# ☑️"} {
		if strings.HasPrefix(last, mark) {
			return last
		}
	}
	return ""
}

// AwaitAnswers waits until the thread shows n finished answers and
// returns them.
func (d Discord) AwaitAnswers(ctx context.Context, thread string, n int) ([]Answer, error) {
	var got []Answer
	err := d.Srv.WaitFor(ctx, func() bool {
		got = d.Answers(thread)
		return len(got) >= n
	})
	if err != nil {
		return got, fmt.Errorf("waiting for %d answer(s), %d shown: %w", n, len(got), err)
	}
	return got, nil
}

// AwaitBotText waits for a bot message in channel, after the first skip,
// containing text.
func (d Discord) AwaitBotText(ctx context.Context, channel, text string, skip int) (fakediscord.Message, error) {
	var found fakediscord.Message
	err := d.Srv.WaitFor(ctx, func() bool {
		msgs := d.BotMessages(channel)
		for _, m := range msgs[min(skip, len(msgs)):] {
			if strings.Contains(m.Content, text) {
				found = m
				return true
			}
		}
		return false
	})
	if err != nil {
		return found, fmt.Errorf("waiting for a bot message with %q: %w", text, err)
	}
	return found, nil
}

// SeenAt is when a message first showed text, from its revisions (zero
// if it never did).
func (d Discord) SeenAt(channel, messageID, text string) time.Time {
	for _, r := range d.Srv.Revisions(channel, messageID) {
		if strings.Contains(r.Content, text) {
			return r.At
		}
	}
	return time.Time{}
}

// BotReactions lists the bot's reactions on a message.
func (d Discord) BotReactions(channel, messageID string) []string {
	var out []string
	bot := d.Srv.Bot().ID
	for _, r := range d.Srv.Reactions(channel, messageID) {
		if r.UserID == bot {
			out = append(out, r.Emoji)
		}
	}
	return out
}

// AwaitReaction waits for the bot's emoji reaction on a message.
func (d Discord) AwaitReaction(ctx context.Context, channel, messageID, emoji string) error {
	err := d.Srv.WaitFor(ctx, func() bool { return d.Srv.HasReaction(channel, messageID, d.Srv.Bot().ID, emoji) })
	if err != nil {
		return fmt.Errorf("waiting for the bot's %s on %s: %w", emoji, messageID, err)
	}
	return nil
}

// PermissionRequest waits for a permission request with buttons in a
// thread, other than those in skip, and returns it.
func (d Discord) PermissionRequest(ctx context.Context, thread string, skip ...string) (fakediscord.Message, error) {
	var found fakediscord.Message
	err := d.Srv.WaitFor(ctx, func() bool {
		for _, m := range d.Srv.Messages(thread) {
			if strings.HasPrefix(m.Content, PermissionPrefix+" **Permission needed**") && len(m.Buttons()) > 0 && !slices.Contains(skip, m.ID) {
				found = m
				return true
			}
		}
		return false
	})
	if err != nil {
		return found, fmt.Errorf("waiting for a permission request: %w", err)
	}
	return found, nil
}

// Button returns the custom id of a message's button labelled label.
func Button(m fakediscord.Message, label string) (string, bool) {
	for _, b := range m.Buttons() {
		if b.Label == label {
			return b.CustomID, true
		}
	}
	return "", false
}

// Response waits for the bot's first response to an interaction.
func (d Discord) Response(ctx context.Context, interactionID string) (fakediscord.InteractionResponse, error) {
	if interactionID == "" {
		return fakediscord.InteractionResponse{}, fmt.Errorf("the interaction was not dispatched")
	}
	err := d.Srv.WaitFor(ctx, func() bool { return len(d.Srv.InteractionResponses(interactionID)) > 0 })
	if err != nil {
		return fakediscord.InteractionResponse{}, fmt.Errorf("waiting for the answer to interaction %s: %w", interactionID, err)
	}
	return d.Srv.InteractionResponses(interactionID)[0], nil
}

// Slash has u run a slash command in a channel and returns the bot's
// first response, with an error if it came late or was refused.
func (d Discord) Slash(ctx context.Context, channel string, u fakediscord.User, name string) (fakediscord.InteractionResponse, error) {
	r, err := d.Response(ctx, d.Srv.SlashCommand(channel, u.ID, name, nil))
	if err == nil && (r.Late || r.Status >= 300) {
		err = fmt.Errorf("/%s answered late or refused: status %d, late %v", name, r.Status, r.Late)
	}
	return r, err
}

// AgentPID asks /status in a thread for its agent's pid (0: none).
func (d Discord) AgentPID(ctx context.Context, thread string, u fakediscord.User) (int, error) {
	r, err := d.Slash(ctx, thread, u, "status")
	if err != nil {
		return 0, err
	}
	_, rest, ok := strings.Cut(r.Content, "**Agent**: pid ")
	if !ok {
		return 0, nil
	}
	num, _, _ := strings.Cut(rest, ",")
	pid, _ := strconv.Atoi(num)
	return pid, nil
}
