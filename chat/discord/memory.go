package discord

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"acpbroker/chat"

	"github.com/bwmarrin/discordgo"
)

// Memory keeps the conversations across restarts (the state store is
// one): a record per thread, opaque to it.
type Memory interface {
	PutThreadChat(thread string, record json.RawMessage)
	ThreadChat(thread string) (json.RawMessage, bool)
	ThreadChats() map[string]json.RawMessage
}

// record is a conversation as Memory keeps it.
type record struct {
	Parent  string `json:"parent"`
	Starter string `json:"starter"`
	Agent   string `json:"agent,omitempty"`
}

func (c *Client) remember(conv *conversation) {
	if c.cfg.Memory == nil {
		return
	}
	c.mu.Lock() // the starter may be found meanwhile
	r := record{Parent: conv.parent, Starter: conv.starter, Agent: conv.agent}
	c.mu.Unlock()
	b, _ := json.Marshal(r)
	c.cfg.Memory.PutThreadChat(conv.thread, b)
}

// recorded is what Memory kept of thread (empty if nothing).
func (c *Client) recorded(thread string) record {
	var r record
	if c.cfg.Memory == nil {
		return r
	}
	if chat, ok := c.cfg.Memory.ThreadChat(thread); ok && len(chat) > 0 && json.Unmarshal(chat, &r) != nil {
		return record{}
	}
	return r
}

// recall loads the conversations Memory kept.
func (c *Client) recall() {
	if c.cfg.Memory == nil {
		return
	}
	for thread, chat := range c.cfg.Memory.ThreadChats() {
		var r record
		if len(chat) == 0 || json.Unmarshal(chat, &r) != nil || r.Parent == "" {
			continue
		}
		c.keepLocked(&conversation{thread: thread, parent: r.Parent, starter: r.Starter, agent: r.Agent})
	}
}

// ref names a message for the journal: guild/channel/message.
func ref(m *discordgo.Message) string { return m.GuildID + "/" + m.ChannelID + "/" + m.ID }

func splitRef(r string) (guild, channel, message string) {
	parts := strings.Split(r, "/")
	if len(parts) != 3 {
		return "", "", ""
	}
	return parts[0], parts[1], parts[2]
}

// Report implements chat.Platform: once connected, each thread is told
// in words which of its messages the broker did not finish, and that
// message's status reaction shows the failure.
func (c *Client) Report(turns []chat.Interruption, reported func(uint64)) {
	if len(turns) == 0 {
		return
	}
	// A thread's turns are looked at in order: each claims the first
	// outcome after its prompt that no earlier turn of the thread claims.
	turns = slices.Clone(turns)
	slices.SortStableFunc(turns, func(a, b chat.Interruption) int { return cmp.Compare(a.ID, b.ID) })
	c.spawn(func() {
		select {
		case <-c.ready:
		case <-c.ctx.Done():
			return
		}
		claimed := map[string]map[string]bool{} // by thread: messages showing other turns
		for _, it := range turns {
			guild, channel, msg := splitRef(it.Ref)
			taken := claimed[it.Thread]
			if taken == nil {
				taken = map[string]bool{}
				claimed[it.Thread] = taken
			}
			for _, w := range it.Elsewhere {
				taken[w] = true
			}
			if it.Outcome != "" && msg != "" {
				if where := c.outcomeShown(it.Thread, msg, taken); where != "" {
					// It ended and the thread shows it: the broker died
					// before noting so. At most the status reaction lags.
					c.log.Info().Str("thread", it.Thread).Uint64("turn", it.ID).Str("message", where).Msg("the thread already shows how the turn ended")
					taken[where] = true
					reported(it.ID)
					c.settleReaction(channel, msg, outcomeEmoji(it.Outcome))
					continue
				}
			}
			text := "⚠️ " + chat.InterruptionText(it)
			if msg != "" {
				text += fmt.Sprintf("\n-# https://discord.com/channels/%s/%s/%s", guild, channel, msg)
			}
			if _, err := c.send(c.ctx, it.Thread, &discordgo.MessageSend{Content: text, AllowedMentions: noMentions}); err != nil {
				c.log.Warn().Err(err).Str("thread", it.Thread).Msg("interrupted turn not reported; will try at the next start")
				continue
			}
			reported(it.ID)
			if msg != "" {
				c.settleReaction(channel, msg, emojiFailed)
			}
		}
	})
}

// outcomeShown finds the message that shows how the turn of the prompt
// message ended: a message of the bot's after the prompt, posted before
// this process began, whose last line is an outcome, and which does not
// show another turn's (taken: an earlier turn, still being shown when
// the prompt was sent, can end in a message after it). A thread shows
// its turns in order, so the first such line is this turn's; a later
// turn's, posted since, does not count. When Discord cannot tell, the
// answer is none (the thread is told again rather than not at all).
func (c *Client) outcomeShown(thread, prompt string, taken map[string]bool) string {
	var msgs []*discordgo.Message
	err := c.do(c.ctx, 3, func(opts ...discordgo.RequestOption) (err error) {
		msgs, err = c.s.ChannelMessages(thread, 100, "", prompt, "", opts...)
		return err
	})
	if err != nil {
		c.log.Debug().Err(err).Str("thread", thread).Msg("could not read the thread to find a turn's outcome")
		return ""
	}
	// Discord lists them newest first.
	slices.SortFunc(msgs, func(a, b *discordgo.Message) int { return cmp.Compare(snowflake(a.ID), snowflake(b.ID)) })
	for _, m := range msgs {
		if at, err := discordgo.SnowflakeTimestamp(m.ID); err != nil || !at.Before(c.born) {
			continue
		}
		if m.Author != nil && m.Author.ID == c.me() && !taken[m.ID] && outcomeLine(m.Content) {
			return m.ID
		}
	}
	return ""
}

// snowflake is a Discord id as a number, in the order ids were made.
func snowflake(id string) uint64 {
	n, _ := strconv.ParseUint(id, 10, 64)
	return n
}

// outcomeLine reports whether a message's last line says how a turn
// ended (see turnSink.footer); the line shown while a turn is being
// stopped is not one, nor is a permission request's or a question's
// closing line (who chose what).
func outcomeLine(content string) bool {
	content = strings.TrimSpace(content)
	if strings.HasPrefix(content, markPermission) || strings.HasPrefix(content, markQuestion) {
		return false
	}
	last := content[strings.LastIndexByte(content, '\n')+1:]
	if strings.HasPrefix(last, "-# "+emojiCancelled+" "+stoppingPrefix) {
		return false
	}
	for _, mark := range []string{emojiDone, emojiFailed, emojiCancelled, emojiFinishedOther} {
		if strings.HasPrefix(last, "-# "+mark) {
			return true
		}
	}
	return strings.HasPrefix(content, emojiLost+" Discord kept failing")
}

// outcomeEmoji is the status reaction of a turn that ended so.
func outcomeEmoji(state string) string {
	switch state {
	case "done":
		return emojiDone
	case "cancelled":
		return emojiCancelled
	default:
		return emojiFailed
	}
}

// settleReaction leaves emoji as the bot's only status reaction on a
// prompt message, whatever an earlier process left there.
func (c *Client) settleReaction(channel, message, emoji string) {
	var m *discordgo.Message
	err := c.do(c.ctx, 3, func(opts ...discordgo.RequestOption) (err error) {
		m, err = c.s.ChannelMessage(channel, message, opts...)
		return err
	})
	mine := map[string]bool{}
	if err != nil {
		// Unknown: take off those a running turn puts there.
		mine[emojiQueued], mine[emojiWorking] = true, true
	} else {
		for _, r := range m.Reactions {
			if r.Me && r.Emoji != nil {
				mine[r.Emoji.Name] = true
			}
		}
	}
	for _, e := range []string{emojiQueued, emojiWorking, emojiDone, emojiFailed, emojiCancelled} {
		if mine[e] && e != emoji {
			c.unreact(channel, message, e)
		}
	}
	if !mine[emoji] {
		c.react(channel, message, emoji)
	}
}
