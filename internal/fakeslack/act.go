package fakeslack

import (
	"encoding/json"
	"slices"
	"time"
)

// MessageOption adds to a message a user posts.
type MessageOption func(*userMessage)

type userMessage struct {
	thread    string
	broadcast bool
}

// InThread posts the message as a reply in the thread of threadTS.
func InThread(threadTS string) MessageOption {
	return func(u *userMessage) { u.thread = threadTS }
}

// AlsoToChannel shows a reply in the channel too (reply_broadcast).
func AlsoToChannel() MessageOption {
	return func(u *userMessage) { u.broadcast = true }
}

// userLocked returns a user, registering an unknown id.
func (s *Server) userLocked(userID string) *User {
	if u := s.users[userID]; u != nil {
		return u
	}
	u := &User{ID: userID, Name: "user" + userID, RealName: "user" + userID}
	s.users[userID] = u
	s.uorder = append(s.uorder, userID)
	return u
}

// userChannelLocked finds the conversation a user acts in, and makes the
// user a member.
func (s *Server) userChannelLocked(what, channelID, userID string) *channel {
	s.tb.Helper()
	ch := s.channels[channelID]
	if ch == nil {
		s.errorf("%s: unknown channel %s", what, channelID)
		return nil
	}
	if ch.Kind == IM && ch.User != userID {
		s.errorf("%s: %s is not in the IM %s", what, userID, channelID)
		return nil
	}
	s.userLocked(userID)
	if ch.members != nil {
		ch.members[userID] = true
	}
	return ch
}

// PostMessage has userID write text in a conversation (with InThread, in
// a thread) and returns the message's ts. The app hears a message event
// (if it subscribes to that kind of conversation), and an app_mention
// too when the text mentions the bot (write srv.Bot().Mention() into it)
// outside an IM. It returns "" after reporting an unknown channel or
// thread with tb.Errorf.
func (s *Server) PostMessage(channelID, userID, text string, opts ...MessageOption) string {
	s.tb.Helper()
	var o userMessage
	for _, f := range opts {
		f(&o)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.userChannelLocked("PostMessage", channelID, userID)
	if ch == nil {
		return ""
	}
	now := time.Now()
	m := &message{Message: Message{
		Channel: ch.ID, TS: s.newTSLocked(now), User: userID, Text: text,
		Blocks: []json.RawMessage{richText(text)}, Posted: now,
	}}
	if o.thread != "" {
		if m.parent = s.parentLocked(ch, o.thread); m.parent == "" {
			s.errorf("PostMessage: no thread %s in %s", o.thread, channelID)
			return ""
		}
		m.ReplyBroadcast = o.broadcast
	}
	s.addMessageLocked(ch, m, "user")
	s.userPostedLocked(ch, m)
	s.notifyLocked()
	return m.TS
}

// userPostedLocked sends the events of a user's new message: message,
// and app_mention when the bot is mentioned.
func (s *Server) userPostedLocked(ch *channel, m *message) {
	ev := s.userEventLocked(ch, m)
	ev["type"] = "message"
	ev["channel_type"] = string(ch.Kind)
	s.eventLocked(ev)
	if ch.Kind != IM && slices.Contains(mentions(m.Text), s.bot.UserID) {
		ev := s.userEventLocked(ch, m)
		ev["type"] = "app_mention"
		s.eventLocked(ev)
	}
}

// userEventLocked renders a user's message for an event.
func (s *Server) userEventLocked(ch *channel, m *message) map[string]any {
	ev := s.wireMessageLocked(m)
	ev["channel"] = ch.ID
	ev["event_ts"] = m.TS
	ev["client_msg_id"] = randomUUID()
	return ev
}

// EditMessage has a user change the text of their message: the app hears
// message_changed, and app_mention (with edited) when the new text
// mentions the bot.
func (s *Server) EditMessage(channelID, ts, text string) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, m := s.channels[channelID], s.messages[msgKey(channelID, ts)]
	if ch == nil || m == nil || m.Deleted || m.FromBot() {
		s.errorf("EditMessage: no user message %s in %s", ts, channelID)
		return
	}
	now := time.Now()
	prev := s.wireMessageLocked(m)
	m.Text, m.Blocks = text, []json.RawMessage{richText(text)}
	s.editedLocked(ch, m, prev, "user", now)
	if ch.Kind != IM && slices.Contains(mentions(text), s.bot.UserID) {
		ev := s.userEventLocked(ch, m)
		ev["type"] = "app_mention"
		s.eventLocked(ev)
	}
	s.notifyLocked()
}

// DeleteMessage has a user delete their message: the app hears
// message_deleted.
func (s *Server) DeleteMessage(channelID, ts string) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, m := s.channels[channelID], s.messages[msgKey(channelID, ts)]
	if ch == nil || m == nil || m.Deleted || m.FromBot() {
		s.errorf("DeleteMessage: no user message %s in %s", ts, channelID)
		return
	}
	s.deleteLocked(ch, m, time.Now())
	s.notifyLocked()
}

// SharedFile is a file a user shares with ShareFile.
type SharedFile struct {
	Name  string
	Title string
	Data  []byte
	// Comment is the message that comes with it; ThreadTS puts it in a
	// thread.
	Comment  string
	ThreadTS string
	// URL, if set, is what url_private and url_private_download say
	// instead of the file's address on the fake: a file that claims to
	// be somewhere else.
	URL string
}

// ShareFile has userID upload a file into a conversation: a file_share
// message carrying it, and the events message, file_shared and, when the
// comment mentions the bot, app_mention. The bot downloads it from its
// url_private with the bot token. It returns the message's ts and the
// file's id.
func (s *Server) ShareFile(channelID, userID string, sf SharedFile) (ts, fileID string) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.userChannelLocked("ShareFile", channelID, userID)
	if ch == nil {
		return "", ""
	}
	now := time.Now()
	f := &file{File: File{ID: s.newIDLocked("F"), Name: sf.Name, Title: sf.Title, Size: len(sf.Data),
		Data: slices.Clone(sf.Data), User: userID, Created: now}, uploaded: true, shared: true, url: sf.URL}
	if f.Title == "" {
		f.Title = f.Name
	}
	f.Filetype, f.Mimetype = filetypeOf(f.Name)
	m := &message{Message: Message{
		Channel: ch.ID, TS: s.newTSLocked(now), User: userID, Text: sf.Comment, Subtype: "file_share",
		Files: []string{f.ID}, Posted: now,
	}}
	if sf.Comment != "" {
		m.Blocks = []json.RawMessage{richText(sf.Comment)}
	}
	if sf.ThreadTS != "" {
		if m.parent = s.parentLocked(ch, sf.ThreadTS); m.parent == "" {
			s.errorf("ShareFile: no thread %s in %s", sf.ThreadTS, channelID)
			return "", ""
		}
	}
	f.Channel, f.ThreadTS, f.MessageTS = ch.ID, m.parent, m.TS
	s.files[f.ID] = f
	s.forder = append(s.forder, f.ID)
	s.addMessageLocked(ch, m, "user")
	s.eventLocked(s.fileSharedEvent(f, now))
	s.userPostedLocked(ch, m)
	s.notifyLocked()
	return m.TS, f.ID
}

// AddReaction has userID react to a message with name (an emoji name
// without colons): the app hears reaction_added. A repeat is reported
// with tb.Errorf.
func (s *Server) AddReaction(channelID, ts, userID, name string) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.userChannelLocked("AddReaction", channelID, userID)
	m := s.messages[msgKey(channelID, ts)]
	if ch == nil || m == nil || m.Deleted {
		s.errorf("AddReaction: no message %s in %s", ts, channelID)
		return
	}
	if code := s.reactLocked(ch, m, userID, name, time.Now()); code != "" {
		s.errorf("AddReaction: %s", code)
	}
	s.notifyLocked()
}

// RemoveReaction has userID take a reaction back: the app hears
// reaction_removed.
func (s *Server) RemoveReaction(channelID, ts, userID, name string) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.channels[channelID]
	m := s.messages[msgKey(channelID, ts)]
	if ch == nil || m == nil {
		s.errorf("RemoveReaction: no message %s in %s", ts, channelID)
		return
	}
	if code := s.unreactLocked(ch, m, userID, name, time.Now()); code != "" {
		s.errorf("RemoveReaction: %s", code)
	}
	s.notifyLocked()
}
