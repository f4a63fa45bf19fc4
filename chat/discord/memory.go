package discord

import (
	"encoding/json"
	"fmt"
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
}

func (c *Client) remember(conv *conversation) {
	if c.cfg.Memory == nil {
		return
	}
	b, _ := json.Marshal(record{Parent: conv.parent, Starter: conv.starter})
	c.cfg.Memory.PutThreadChat(conv.thread, b)
}

// recordedStarter is the starter Memory kept for thread, or "".
func (c *Client) recordedStarter(thread string) string {
	if c.cfg.Memory == nil {
		return ""
	}
	chat, ok := c.cfg.Memory.ThreadChat(thread)
	var r record
	if !ok || len(chat) == 0 || json.Unmarshal(chat, &r) != nil {
		return ""
	}
	return r.Starter
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
		c.keepLocked(&conversation{thread: thread, parent: r.Parent, starter: r.Starter})
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
	c.spawn(func() {
		select {
		case <-c.ready:
		case <-c.ctx.Done():
			return
		}
		for _, it := range turns {
			guild, channel, msg := splitRef(it.Ref)
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
				c.unreact(channel, msg, emojiWorking)
				c.unreact(channel, msg, emojiQueued)
				c.react(channel, msg, emojiFailed)
			}
		}
	})
}
