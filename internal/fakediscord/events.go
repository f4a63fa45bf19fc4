package fakediscord

import (
	"encoding/json"
	"mime"
	"path"
	"slices"
	"time"
)

// MessageOption adds to a message a user sends with SendMessage.
type MessageOption func(*userMessage)

type userMessage struct {
	files   []File
	roles   []string
	roleSet bool
	replyTo string
	embeds  []json.RawMessage
}

// WithAttachment attaches a file; contentType may be empty (then it is
// guessed from the name).
func WithAttachment(name, contentType string, data []byte) MessageOption {
	return func(u *userMessage) {
		u.files = append(u.files, File{Name: name, ContentType: contentType, Size: len(data), Data: slices.Clone(data)})
	}
}

// WithRoles sets the author's roles in the guild (kept for later
// messages and interactions).
func WithRoles(roleIDs ...string) MessageOption {
	return func(u *userMessage) { u.roles, u.roleSet = roleIDs, true }
}

// ReplyTo makes the message a reply to messageID in the same channel.
func ReplyTo(messageID string) MessageOption {
	return func(u *userMessage) { u.replyTo = messageID }
}

// WithEmbed adds an embed, given as its JSON object.
func WithEmbed(embedJSON string) MessageOption {
	return func(u *userMessage) { u.embeds = append(u.embeds, json.RawMessage(embedJSON)) }
}

// SendMessage has author post content in channelID (a channel or a
// thread): the message is stored, so REST reads of it work, and
// MESSAGE_CREATE is dispatched to the sessions whose intents allow it.
// Mentions are parsed from the content (write author.Mention() or
// srv.Bot().Mention() into it). It returns the message's id, or "" after
// reporting an unknown channel with tb.Errorf.
func (s *Server) SendMessage(channelID string, author User, content string, opts ...MessageOption) string {
	s.tb.Helper()
	var o userMessage
	for _, f := range opts {
		f(&o)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.channels[channelID]
	if ch == nil {
		s.errorf("SendMessage: unknown channel %s", channelID)
		return ""
	}
	author = s.userLocked(author)
	g := s.guildLocked(ch.GuildID)
	mem := s.memberLocked(g, author.ID)
	if o.roleSet {
		mem.roles = slices.Clone(o.roles)
		for _, r := range o.roles {
			if !slices.Contains(g.roles, r) {
				g.roles = append(g.roles, r)
			}
		}
	}
	now := time.Now()
	m := &message{Message: Message{
		ID:        s.newIDLocked(),
		ChannelID: ch.ID,
		GuildID:   ch.GuildID,
		Author:    author,
		Content:   content,
		Embeds:    o.embeds,
		Created:   now,
	}}
	if o.replyTo != "" {
		m.ReferenceID = o.replyTo
		m.Type = 19
	}
	for _, f := range o.files {
		ctype := f.ContentType
		if ctype == "" {
			ctype = mime.TypeByExtension(path.Ext(f.Name))
		}
		id := s.newIDLocked()
		m.Attachments = append(m.Attachments, Attachment{
			ID:          id,
			Filename:    f.Name,
			ContentType: ctype,
			Size:        f.Size,
			Data:        f.Data,
			URL:         s.attachmentURL(ch.ID, id, f.Name),
		})
	}
	if !s.addMessageLocked(m) {
		s.stats.Undelivered++
	}
	s.notifyLocked()
	return m.ID
}

// EditUserMessage has the author of a user's message change its content
// (MESSAGE_UPDATE is dispatched).
func (s *Server) EditUserMessage(channelID, messageID, content string) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.messages[messageID]
	if m == nil || m.ChannelID != channelID || m.Deleted {
		s.errorf("EditUserMessage: no message %s in channel %s", messageID, channelID)
		return
	}
	now := time.Now()
	m.Content = content
	m.EditedAt = now
	m.Edits++
	parseMentions(&m.Message)
	rev := m.snapshot()
	rev.At = now
	m.revisions = append(m.revisions, rev)
	if !s.messageEventLocked("MESSAGE_UPDATE", m) {
		s.stats.Undelivered++
	}
	s.notifyLocked()
}

// DeleteUserMessage deletes a message as its author or a moderator would
// (MESSAGE_DELETE is dispatched).
func (s *Server) DeleteUserMessage(channelID, messageID string) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.messages[messageID]
	if m == nil || m.ChannelID != channelID || m.Deleted {
		s.errorf("DeleteUserMessage: no message %s in channel %s", messageID, channelID)
		return
	}
	s.deleteMessageLocked(m)
	s.notifyLocked()
}

// AddReaction has userID react to a message with emoji (a unicode emoji,
// or name:id for a custom one) and dispatches MESSAGE_REACTION_ADD; a
// repeated reaction changes nothing.
func (s *Server) AddReaction(channelID, messageID, userID, emoji string) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.messages[messageID]
	if m == nil || m.ChannelID != channelID || m.Deleted {
		s.errorf("AddReaction: no message %s in channel %s", messageID, channelID)
		return
	}
	if !validEmoji(emoji) {
		s.errorf("AddReaction: %q is not an emoji", emoji)
		return
	}
	s.userByIDLocked(userID)
	if g, ok := s.guilds[m.GuildID]; ok {
		s.memberLocked(g, userID)
	}
	for _, r := range m.reactions {
		if r.UserID == userID && r.Emoji == emoji {
			return
		}
	}
	if !s.addReactionLocked(m, userID, emoji, time.Now()) {
		s.stats.Undelivered++
	}
	s.notifyLocked()
}

// RemoveReaction takes userID's reaction back and dispatches
// MESSAGE_REACTION_REMOVE.
func (s *Server) RemoveReaction(channelID, messageID, userID, emoji string) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.messages[messageID]
	if m == nil || m.ChannelID != channelID {
		s.errorf("RemoveReaction: no message %s in channel %s", messageID, channelID)
		return
	}
	s.removeReactionLocked(m, userID, emoji)
	s.notifyLocked()
}
