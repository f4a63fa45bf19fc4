package fakeslack

import (
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// content is what a chat call says a message holds.
type content struct {
	text, markdown                  string
	hasText, hasBlocks, hasMarkdown bool
	hasAttachments                  bool
	blocks                          []json.RawMessage
	attachments                     json.RawMessage
}

func (ct content) empty() bool {
	return ct.text == "" && len(ct.blocks) == 0 && len(ct.attachments) == 0 && ct.markdown == ""
}

// contentLocked reads and checks text, blocks, attachments and
// markdown_text; a non-nil reply is the error to answer.
func (s *Server) contentLocked(c *call) (content, reply) {
	var ct content
	ct.text, ct.hasText = c.args["text"]
	ct.markdown, ct.hasMarkdown = c.args["markdown_text"]
	if raw, ok := c.jsonArg("blocks"); ok {
		ct.hasBlocks = true
		blocks, problems, formatOK := checkBlocks(raw, "/blocks", 50, surfMessage)
		if !formatOK {
			return ct, fail("invalid_blocks_format")
		}
		if len(problems) > 0 {
			return ct, failMessages("invalid_blocks", problems)
		}
		ct.blocks = withBlockIDs(blocks)
	}
	if raw, ok := c.jsonArg("attachments"); ok {
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) != nil {
			return ct, fail("invalid_attachments")
		}
		if len(list) > 100 {
			return ct, fail("too_many_attachments")
		}
		if len(list) > 0 {
			ct.hasAttachments = true
			ct.attachments = raw
		}
	}
	switch {
	case ct.hasMarkdown && (ct.text != "" || ct.hasBlocks):
		return ct, fail("markdown_text_conflict")
	case chars(ct.markdown) > 12000:
		return ct, fail("msg_too_long")
	case chars(ct.text) > s.opts.MaxTextLength:
		return ct, fail("msg_too_long")
	}
	if ct.hasMarkdown {
		b, _ := json.Marshal(map[string]any{"type": "markdown", "block_id": randomBlockID(), "text": ct.markdown})
		ct.text = ct.markdown
		ct.blocks = []json.RawMessage{b}
	}
	return ct, nil
}

// channelLocked finds the conversation a call names by id (or, with
// names, by #name or name); asPoster also takes a user id for the IM
// with that user, as chat.postMessage does. It answers the error Slack
// gives a bot that cannot post there.
func (s *Server) channelLocked(id string, asPoster bool) (*channel, reply) {
	ch := s.channels[id]
	if ch == nil && asPoster {
		name := strings.TrimPrefix(id, "#")
		for _, cid := range s.corder {
			if c := s.channels[cid]; c.Kind != IM && c.Name == name {
				ch = c
				break
			}
		}
		if ch == nil && strings.HasPrefix(id, "U") {
			if _, ok := s.users[id]; ok {
				ch = s.imLocked(id)
			}
		}
	}
	switch {
	case ch == nil:
		return nil, fail("channel_not_found")
	case ch.BotAbsent && ch.Kind != Public:
		return nil, fail("channel_not_found")
	case ch.BotAbsent:
		return nil, fail("not_in_channel")
	}
	return ch, nil
}

// parentLocked resolves a thread_ts: the ts of the thread's parent, or
// "" when it names no message that is there (a reply's ts stands for
// its thread).
func (s *Server) parentLocked(ch *channel, threadTS string) string {
	m := s.messages[msgKey(ch.ID, threadTS)]
	if m == nil || (m.Deleted && !m.Tombstone) {
		return ""
	}
	if m.parent != "" {
		return m.parent
	}
	return m.TS
}

// addMessageLocked stores a new message and counts it in its thread.
func (s *Server) addMessageLocked(ch *channel, m *message, method string) {
	m.revisions = []Revision{{At: m.Posted, Text: m.Text, Blocks: slices.Clone(m.Blocks), Method: method}}
	s.messages[msgKey(ch.ID, m.TS)] = m
	ch.msgs = append(ch.msgs, m.TS)
	if m.parent != "" {
		if p := s.messages[msgKey(ch.ID, m.parent)]; p != nil {
			p.Replies++
			if !slices.Contains(p.ReplyUsers, m.User) {
				p.ReplyUsers = append(p.ReplyUsers, m.User)
			}
		}
	}
}

// botMessageLocked makes a message from the bot.
func (s *Server) botMessageLocked(ch *channel, ct content, now time.Time) *message {
	return &message{Message: Message{
		Channel:     ch.ID,
		TS:          s.newTSLocked(now),
		User:        s.bot.UserID,
		BotID:       s.bot.BotID,
		AppID:       s.bot.AppID,
		Text:        ct.text,
		Blocks:      ct.blocks,
		Attachments: ct.attachments,
		Posted:      now,
	}}
}

func (s *Server) postMessage(c *call) reply {
	ch, errReply := s.channelLocked(c.str("channel"), true)
	if errReply != nil {
		return errReply
	}
	if ch.Archived {
		return fail("is_archived")
	}
	ct, errReply := s.contentLocked(c)
	if errReply != nil {
		return errReply
	}
	if ct.empty() {
		return fail("no_text")
	}
	m := s.botMessageLocked(ch, ct, c.now)
	if th := c.str("thread_ts"); th != "" {
		if m.parent = s.parentLocked(ch, th); m.parent == "" {
			m.UnthreadedFrom = th
		}
	}
	if raw, ok := c.jsonArg("metadata"); ok && json.Valid(raw) {
		m.Metadata = raw
	}
	m.ReplyBroadcast = m.parent != "" && c.flag("reply_broadcast") != nil && *c.flag("reply_broadcast")
	m.UnfurlLinks, m.UnfurlMedia, m.Mrkdwn = c.flag("unfurl_links"), c.flag("unfurl_media"), c.flag("mrkdwn")
	m.Username, m.IconEmoji, m.IconURL = c.str("username"), c.str("icon_emoji"), c.str("icon_url")
	s.addMessageLocked(ch, m, "chat.postMessage")
	s.botPostedLocked(ch, m)
	return okReply("channel", ch.ID, "ts", m.TS, "message", s.wireMessageLocked(m))
}

// botPostedLocked does what follows a message of the bot: the message
// event Slack sends the app about it, and the thread's assistant status
// cleared.
func (s *Server) botPostedLocked(ch *channel, m *message) {
	thread := m.parent
	if thread == "" {
		thread = m.TS
	}
	s.clearStatusLocked(ch.ID, thread, "reply", m.Posted)
	ev := s.wireMessageLocked(m)
	ev["channel"] = ch.ID
	ev["channel_type"] = string(ch.Kind)
	ev["event_ts"] = m.TS
	s.botEventLocked(ev)
}

// botMessageOf finds a message of the bot that chat.update or
// chat.delete may change.
func (s *Server) botMessageOf(c *call, verb string) (*channel, *message, reply) {
	ch := s.channels[c.str("channel")]
	if ch == nil || (ch.BotAbsent && ch.Kind != Public) {
		return nil, nil, fail("channel_not_found")
	}
	m := s.messages[msgKey(ch.ID, c.str("ts"))]
	if m == nil || m.Deleted {
		return nil, nil, fail("message_not_found")
	}
	if !m.FromBot() {
		return nil, nil, fail("cant_" + verb + "_message")
	}
	return ch, m, nil
}

func (s *Server) updateMessage(c *call) reply {
	ch, m, errReply := s.botMessageOf(c, "update")
	if errReply != nil {
		return errReply
	}
	if m.Stream != nil && m.Stream.State == "streaming" && !s.streamExpiredLocked(m, c.now) {
		return fail("streaming_state_conflict")
	}
	ct, errReply := s.contentLocked(c)
	if errReply != nil {
		return errReply
	}
	if !ct.hasText && !ct.hasBlocks && !ct.hasAttachments && !ct.hasMarkdown {
		return fail("no_text")
	}
	prev := s.wireMessageLocked(m)
	if ct.hasText || ct.hasMarkdown {
		m.Text = ct.text
	}
	if ct.hasBlocks || ct.hasMarkdown {
		m.Blocks = ct.blocks
	}
	if ct.hasAttachments {
		m.Attachments = ct.attachments
	}
	if m.Text == "" && len(m.Blocks) == 0 && len(m.Attachments) == 0 {
		return fail("no_text")
	}
	if raw, ok := c.jsonArg("metadata"); ok && json.Valid(raw) {
		m.Metadata = raw
	}
	s.editedLocked(ch, m, prev, "chat.update", c.now)
	return okReply("channel", ch.ID, "ts", m.TS, "text", m.Text, "message", s.wireMessageLocked(m))
}

// editedLocked records an edit of a message and tells the app of it.
func (s *Server) editedLocked(ch *channel, m *message, prev map[string]any, method string, now time.Time) {
	m.Edits++
	m.Edited = now
	m.revisions = append(m.revisions, Revision{At: now, Text: m.Text, Blocks: slices.Clone(m.Blocks), Method: method})
	ev := map[string]any{
		"type":             "message",
		"subtype":          "message_changed",
		"hidden":           true,
		"channel":          ch.ID,
		"channel_type":     string(ch.Kind),
		"ts":               s.newTSLocked(now),
		"message":          s.wireMessageLocked(m),
		"previous_message": prev,
	}
	ev["event_ts"] = ev["ts"]
	if m.FromBot() {
		s.botEventLocked(ev)
	} else {
		s.eventLocked(ev)
	}
}

func (s *Server) deleteMessage(c *call) reply {
	ch, m, errReply := s.botMessageOf(c, "delete")
	if errReply != nil {
		return errReply
	}
	s.deleteLocked(ch, m, c.now)
	return okReply("channel", ch.ID, "ts", m.TS)
}

// deleteLocked deletes a message (a parent with replies leaves a
// tombstone) and tells the app of it.
func (s *Server) deleteLocked(ch *channel, m *message, now time.Time) {
	prev := s.wireMessageLocked(m)
	m.Deleted = true
	m.Tombstone = m.parent == "" && m.Replies > 0
	if m.Stream != nil && m.Stream.State == "streaming" {
		m.Stream.State = "stopped"
		m.Stream.Ended = now
	}
	if m.parent != "" {
		if p := s.messages[msgKey(ch.ID, m.parent)]; p != nil {
			p.Replies--
			p.ReplyUsers = nil
			for _, r := range s.threadLocked(ch.ID, p.TS) {
				if r.parent != "" && !r.Deleted && !slices.Contains(p.ReplyUsers, r.User) {
					p.ReplyUsers = append(p.ReplyUsers, r.User)
				}
			}
		}
	}
	ts := s.newTSLocked(now)
	ev := map[string]any{
		"type":             "message",
		"subtype":          "message_deleted",
		"hidden":           true,
		"channel":          ch.ID,
		"channel_type":     string(ch.Kind),
		"ts":               ts,
		"event_ts":         ts,
		"deleted_ts":       m.TS,
		"previous_message": prev,
	}
	if m.FromBot() {
		s.botEventLocked(ev)
	} else {
		s.eventLocked(ev)
	}
}

func (s *Server) postEphemeral(c *call) reply {
	ch, errReply := s.channelLocked(c.str("channel"), false)
	if errReply != nil {
		return errReply
	}
	if ch.Archived {
		return fail("is_archived")
	}
	user := c.str("user")
	if u := s.users[user]; u == nil || !ch.has(user) {
		return fail("user_not_in_channel")
	}
	ct, errReply := s.contentLocked(c)
	if errReply != nil {
		return errReply
	}
	if ct.empty() {
		return fail("no_text")
	}
	e := &Ephemeral{
		Channel: ch.ID, User: user, TS: s.newTSLocked(c.now),
		Text: ct.text, Blocks: ct.blocks, Posted: c.now, Via: "chat.postEphemeral",
	}
	if th := c.str("thread_ts"); th != "" {
		if e.ThreadTS = s.parentLocked(ch, th); e.ThreadTS == "" {
			e.ThreadTS = th
		}
	}
	s.ephemerals = append(s.ephemerals, e)
	return okReply("message_ts", e.TS)
}

func (s *Server) getPermalink(c *call) reply {
	ch, errReply := s.channelLocked(c.str("channel"), false)
	if errReply != nil {
		return errReply
	}
	m := s.messages[msgKey(ch.ID, c.str("message_ts"))]
	if m == nil || (m.Deleted && !m.Tombstone) {
		return fail("message_not_found")
	}
	link := "https://" + s.team.Domain + ".slack.com/archives/" + ch.ID + "/p" + strings.ReplaceAll(m.TS, ".", "")
	if m.parent != "" {
		link += "?thread_ts=" + m.parent + "&cid=" + ch.ID
	}
	return okReply("channel", ch.ID, "permalink", link)
}
