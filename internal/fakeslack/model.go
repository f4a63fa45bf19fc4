package fakeslack

import (
	"encoding/json"
	"maps"
	"slices"
	"time"
)

// Team is the workspace.
type Team struct {
	ID     string
	Domain string
	Name   string
}

// Bot is the app's bot user.
type Bot struct {
	UserID string
	BotID  string
	AppID  string
	Name   string
}

// Mention returns the bot's mention, <@U…>, as users write it.
func (b Bot) Mention() string { return "<@" + b.UserID + ">" }

// User is a member of the workspace.
type User struct {
	ID          string
	Name        string
	RealName    string
	DisplayName string
	Email       string
	TZ          string
	IsBot       bool
	Deleted     bool
}

// Mention returns the user's mention, <@U…>.
func (u User) Mention() string { return "<@" + u.ID + ">" }

// ChannelKind is a kind of conversation, as an event's channel_type says
// it.
type ChannelKind string

const (
	Public  ChannelKind = "channel"
	Private ChannelKind = "group"
	IM      ChannelKind = "im"
	MPIM    ChannelKind = "mpim"
)

// Channel is a conversation: a public or private channel, a direct
// message (IM) with the bot, or a group DM.
type Channel struct {
	ID   string
	Name string
	Kind ChannelKind
	// Members are the users in the conversation besides the bot; none
	// means every user of the workspace, as in #general. A user who posts
	// joins.
	Members []string
	// BotAbsent keeps the bot out: it can neither post (not_in_channel)
	// nor read the conversation, and hears none of its events.
	BotAbsent bool
	Archived  bool
	// User is the other party of an IM.
	User    string
	Created time.Time
}

// UserGroup is a user group (@handle) and its members.
type UserGroup struct {
	ID       string
	Handle   string
	Name     string
	Members  []string
	Disabled bool
}

// Mention returns the group's mention, <!subteam^S…>.
func (g UserGroup) Mention() string { return "<!subteam^" + g.ID + ">" }

// Message is a message as it now stands.
type Message struct {
	Channel string
	TS      string
	// ThreadTS is the parent's ts for a reply, the message's own ts for a
	// parent with replies, and empty otherwise.
	ThreadTS string
	// User is the author: a user's id, or the bot's user id, in which case
	// BotID and AppID are set too.
	User    string
	BotID   string
	AppID   string
	Subtype string
	Text    string
	Blocks  []json.RawMessage
	// Attachments and Metadata are as the bot sent them.
	Attachments json.RawMessage
	Metadata    json.RawMessage
	Files       []string
	// ReplyBroadcast: a reply also shown in the channel.
	ReplyBroadcast bool
	// UnthreadedFrom is the thread_ts the bot asked for when it named no
	// message: Slack posts such a reply at the top level.
	UnthreadedFrom string
	// UnfurlLinks, UnfurlMedia and Mrkdwn are the flags as sent, nil when
	// not sent.
	UnfurlLinks *bool
	UnfurlMedia *bool
	Mrkdwn      *bool
	Username    string
	IconEmoji   string
	IconURL     string
	Reactions   []Reaction
	// Replies counts the replies of a parent; ReplyUsers are their
	// authors.
	Replies    int
	ReplyUsers []string
	Posted     time.Time
	// Edits counts the edits; Edited is the last one's time.
	Edits  int
	Edited time.Time
	// Deleted is set once the message is deleted. A parent deleted while
	// it has replies stays in its thread as a Tombstone ("This message
	// was deleted."), with both set; Messages and Thread list it.
	Deleted   bool
	Tombstone bool
	// Stream is set on a message started with chat.startStream.
	Stream *Stream
}

// FromBot reports whether the bot wrote the message.
func (m Message) FromBot() bool { return m.BotID != "" }

// Revision is one state of a message.
type Revision struct {
	At     time.Time
	Text   string
	Blocks []json.RawMessage
	// Method is the call that left this state (chat.postMessage,
	// chat.update, chat.stopStream, response_url…), or "user".
	Method string
}

// Reaction is one emoji on a message and who reacted with it, in order.
type Reaction struct {
	Name  string
	Users []string
}

// Stream is the state of a streamed message.
type Stream struct {
	// State is "streaming", "stopped" (by chat.stopStream), "expired"
	// (Options.StreamLifetime passed) or "stopped_by_user".
	State string
	// Mode is "markdown_text" or "chunks", as the stream started.
	Mode          string
	RecipientUser string
	RecipientTeam string
	Started       time.Time
	Ended         time.Time
	// Appends are the pieces in order: what chat.startStream,
	// chat.appendStream and chat.stopStream each brought.
	Appends []StreamAppend
}

// StreamAppend is what one streaming call added.
type StreamAppend struct {
	At           time.Time
	Method       string
	MarkdownText string
	Chunks       json.RawMessage
}

// Ephemeral is a message shown to one user only.
type Ephemeral struct {
	Channel  string
	User     string
	TS       string
	ThreadTS string
	Text     string
	Blocks   []json.RawMessage
	Posted   time.Time
	// Via is how it came: chat.postEphemeral, response_url, or the
	// acknowledgement of a slash command (ack).
	Via string
	// Replaced counts its replacements through a response_url; Deleted
	// is set once one deleted it.
	Replaced int
	Deleted  bool
}

// File is an uploaded file.
type File struct {
	ID       string
	Name     string
	Title    string
	Mimetype string
	Filetype string
	AltText  string
	// Size is the length announced; Data what was uploaded.
	Size int
	Data []byte
	User string
	// Channel, ThreadTS and MessageTS say where it was shared; Channel is
	// empty while it is not.
	Channel   string
	ThreadTS  string
	MessageTS string
	Created   time.Time
	// Downloads counts the downloads of url_private with the bot token.
	Downloads int
}

// View is a modal the bot opened.
type View struct {
	ID              string
	User            string
	Type            string
	CallbackID      string
	ExternalID      string
	PrivateMetadata string
	Hash            string
	RootID          string
	PreviousID      string
	Title           string
	Submit          string
	Close           string
	NotifyOnClose   bool
	ClearOnClose    bool
	Blocks          []json.RawMessage
	// JSON is the view as the fake answers it.
	JSON    json.RawMessage
	Opened  time.Time
	Updates int
	// Open is true while the user sees it (it is in the user's stack);
	// Closed says when and ClosedBy how it went: submitted, cleared,
	// closed (by the user), replaced (a response_action update did not
	// close it; it stays open).
	Open     bool
	Closed   time.Time
	ClosedBy string
	// Errors are the errors of the last response_action "errors", by
	// block_id.
	Errors map[string]string
}

// ThreadStatus is an assistant.threads.setStatus or setTitle call, or
// the current state of a thread they made.
type ThreadStatus struct {
	Channel         string
	ThreadTS        string
	Status          string
	LoadingMessages []string
	Title           string
	At              time.Time
	Method          string
	// Cleared says why a status went away: "reply" (the bot posted in
	// the thread), "timeout" (two minutes passed), or "" (set, or cleared
	// by an empty status).
	Cleared string
}

type channel struct {
	Channel
	members map[string]bool // nil: everyone
	msgs    []string        // ts of its messages, oldest first
}

func (c *channel) has(userID string) bool {
	return c.members == nil || c.members[userID]
}

type message struct {
	Message
	parent    string // the thread's parent ts for a reply
	revisions []Revision
}

func msgKey(channel, ts string) string { return channel + "/" + ts }

func copyMessage(m *message) Message {
	c := m.Message
	c.Blocks = slices.Clone(m.Blocks)
	c.Files = slices.Clone(m.Files)
	c.ReplyUsers = slices.Clone(m.ReplyUsers)
	c.Reactions = make([]Reaction, len(m.Reactions))
	for i, r := range m.Reactions {
		c.Reactions[i] = Reaction{Name: r.Name, Users: slices.Clone(r.Users)}
	}
	if m.Stream != nil {
		st := *m.Stream
		st.Appends = slices.Clone(m.Stream.Appends)
		c.Stream = &st
	}
	c.ThreadTS = m.threadTS()
	return c
}

func (m *message) threadTS() string {
	if m.parent != "" {
		return m.parent
	}
	if m.Replies > 0 || m.Tombstone {
		return m.TS
	}
	return ""
}

// AddUser registers a user (its ID is made up if empty) and returns it.
func (s *Server) AddUser(u User) User {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u.ID == "" {
		u.ID = s.newIDLocked("U")
	}
	if u.Name == "" {
		u.Name = "user" + u.ID
	}
	if u.RealName == "" {
		u.RealName = u.Name
	}
	if old, ok := s.users[u.ID]; ok {
		*old = u
	} else {
		s.users[u.ID] = &u
		s.uorder = append(s.uorder, u.ID)
	}
	s.notifyLocked()
	return u
}

// AddChannel adds a conversation (its ID is made up if empty: C… for a
// channel, G… for a private one, D… for an IM) and returns it.
func (s *Server) AddChannel(c Channel) Channel {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.Kind == "" {
		c.Kind = Public
	}
	if c.ID == "" {
		prefix := map[ChannelKind]string{Public: "C", Private: "G", IM: "D", MPIM: "G"}[c.Kind]
		c.ID = s.newIDLocked(prefix)
	}
	if _, dup := s.channels[c.ID]; dup {
		s.errorf("AddChannel: channel %s exists", c.ID)
		return c
	}
	if c.Name == "" && c.Kind != IM {
		c.Name = "channel-" + c.ID
	}
	if c.Created.IsZero() {
		c.Created = time.Now()
	}
	ch := &channel{Channel: c}
	if c.Kind == IM {
		ch.members = map[string]bool{c.User: true}
	} else if len(c.Members) > 0 {
		ch.members = map[string]bool{}
		for _, m := range c.Members {
			ch.members[m] = true
		}
	}
	s.channels[c.ID] = ch
	s.corder = append(s.corder, c.ID)
	s.notifyLocked()
	return c
}

// AddDM returns the direct message conversation between the bot and
// userID, opening it if needed.
func (s *Server) AddDM(userID string) Channel {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.imLocked(userID).snapshot()
}

func (s *Server) imLocked(userID string) *channel {
	for _, id := range s.corder {
		if c := s.channels[id]; c.Kind == IM && c.User == userID {
			return c
		}
	}
	c := &channel{Channel: Channel{ID: s.newIDLocked("D"), Kind: IM, User: userID, Created: time.Now()}}
	c.members = map[string]bool{userID: true}
	s.channels[c.ID] = c
	s.corder = append(s.corder, c.ID)
	s.notifyLocked()
	return c
}

func (c *channel) snapshot() Channel {
	out := c.Channel
	out.Members = nil
	if c.members != nil {
		out.Members = slices.Sorted(maps.Keys(c.members))
	}
	return out
}

// JoinChannel makes userID a member of a channel that lists its members.
func (s *Server) JoinChannel(channelID, userID string) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.channels[channelID]
	if c == nil {
		s.errorf("JoinChannel: unknown channel %s", channelID)
		return
	}
	if c.members != nil {
		c.members[userID] = true
	}
	s.notifyLocked()
}

// SetBotAbsent takes the bot out of a channel, or puts it back.
func (s *Server) SetBotAbsent(channelID string, absent bool) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.channels[channelID]
	if c == nil {
		s.errorf("SetBotAbsent: unknown channel %s", channelID)
		return
	}
	c.BotAbsent = absent
	s.notifyLocked()
}

// AddUserGroup adds a user group (its ID is made up if empty) and
// returns it.
func (s *Server) AddUserGroup(g UserGroup) UserGroup {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g.ID == "" {
		g.ID = s.newIDLocked("S")
	}
	if g.Handle == "" {
		g.Handle = "group-" + g.ID
	}
	if g.Name == "" {
		g.Name = g.Handle
	}
	g.Members = slices.Clone(g.Members)
	if old, ok := s.groups[g.ID]; ok {
		*old = g
	} else {
		s.groups[g.ID] = &g
		s.gorder = append(s.gorder, g.ID)
	}
	s.notifyLocked()
	return g
}

// SetGroupMembers replaces a user group's members.
func (s *Server) SetGroupMembers(groupID string, userIDs ...string) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[groupID]
	if g == nil {
		s.errorf("SetGroupMembers: unknown group %s", groupID)
		return
	}
	g.Members = slices.Clone(userIDs)
	s.notifyLocked()
}

// User returns a user.
func (s *Server) User(userID string) (User, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.users[userID]
	if !ok {
		return User{}, false
	}
	return *u, true
}

// Channel returns a conversation.
func (s *Server) Channel(channelID string) (Channel, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.channels[channelID]
	if !ok {
		return Channel{}, false
	}
	return c.snapshot(), true
}

// Message returns a message, deleted or not.
func (s *Server) Message(channelID, ts string) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.messages[msgKey(channelID, ts)]
	if !ok {
		return Message{}, false
	}
	return copyMessage(m), true
}

// Messages returns the conversation's messages that are not deleted
// (tombstones included), replies among them, oldest first.
func (s *Server) Messages(channelID string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	if c := s.channels[channelID]; c != nil {
		for _, ts := range c.msgs {
			if m := s.messages[msgKey(channelID, ts)]; !m.Deleted || m.Tombstone {
				out = append(out, copyMessage(m))
			}
		}
	}
	return out
}

// Thread returns a thread as it now stands: the parent (or its
// tombstone) and the replies that are not deleted, oldest first. A
// threadTS naming a reply stands for its thread.
func (s *Server) Thread(channelID, threadTS string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	root := s.messages[msgKey(channelID, threadTS)]
	if root == nil {
		return nil
	}
	if root.parent != "" {
		threadTS = root.parent
	}
	var out []Message
	for _, m := range s.threadLocked(channelID, threadTS) {
		if !m.Deleted || m.Tombstone {
			out = append(out, copyMessage(m))
		}
	}
	return out
}

// threadLocked returns a thread's parent and replies, deleted or not.
func (s *Server) threadLocked(channelID, threadTS string) []*message {
	c := s.channels[channelID]
	if c == nil {
		return nil
	}
	var out []*message
	for _, ts := range c.msgs {
		m := s.messages[msgKey(channelID, ts)]
		if m.TS == threadTS || m.parent == threadTS {
			out = append(out, m)
		}
	}
	return out
}

// Revisions returns every state of a message: as posted, then after each
// edit.
func (s *Server) Revisions(channelID, ts string) []Revision {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.messages[msgKey(channelID, ts)]
	if !ok {
		return nil
	}
	return slices.Clone(m.revisions)
}

// Reactions returns a message's reactions.
func (s *Server) Reactions(channelID, ts string) []Reaction {
	m, _ := s.Message(channelID, ts)
	return m.Reactions
}

// HasReaction reports whether userID (the bot: Bot().UserID) reacted to
// a message with name.
func (s *Server) HasReaction(channelID, ts, userID, name string) bool {
	for _, r := range s.Reactions(channelID, ts) {
		if r.Name == name && slices.Contains(r.Users, userID) {
			return true
		}
	}
	return false
}

// Ephemerals returns the ephemeral messages shown to userID, oldest
// first.
func (s *Server) Ephemerals(userID string) []Ephemeral {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Ephemeral
	for _, e := range s.ephemerals {
		if e.User == userID {
			c := *e
			c.Blocks = slices.Clone(e.Blocks)
			out = append(out, c)
		}
	}
	return out
}

// Files returns the files uploaded, by the bot or by users, oldest
// first; a file whose bytes have not arrived at its upload URL is not
// among them.
func (s *Server) Files() []File {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]File, 0, len(s.forder))
	for _, id := range s.forder {
		if f := s.files[id]; f.uploaded {
			out = append(out, f.snapshot())
		}
	}
	return out
}

// File returns a file.
func (s *Server) File(fileID string) (File, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.files[fileID]
	if !ok {
		return File{}, false
	}
	return f.snapshot(), true
}

// Views returns the views opened for userID ("" for everyone's), oldest
// first, open or not.
func (s *Server) Views(userID string) []View {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []View
	for _, id := range s.vorder {
		if v := s.views[id]; userID == "" || v.User == userID {
			out = append(out, v.snapshot())
		}
	}
	return out
}

// View returns a view.
func (s *Server) View(viewID string) (View, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.views[viewID]
	if !ok {
		return View{}, false
	}
	return v.snapshot(), true
}

// OpenView returns the view userID sees now: the top of the user's
// modal stack.
func (s *Server) OpenView(userID string) (View, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stacks[userID]
	if len(st) == 0 {
		return View{}, false
	}
	return s.views[st[len(st)-1]].snapshot(), true
}

// ThreadStatus returns the assistant status and title of a thread as
// they now stand.
func (s *Server) ThreadStatus(channelID, threadTS string) (ThreadStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.statuses[msgKey(channelID, threadTS)]
	if !ok {
		return ThreadStatus{}, false
	}
	s.expireStatusLocked(st, time.Now())
	c := *st
	c.LoadingMessages = slices.Clone(st.LoadingMessages)
	return c, true
}

// StatusLog returns every status and title the bot set, in order.
func (s *Server) StatusLog() []ThreadStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.statusLog)
}

// Channels returns the conversations in creation order.
func (s *Server) Channels() []Channel {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Channel, 0, len(s.corder))
	for _, id := range s.corder {
		out = append(out, s.channels[id].snapshot())
	}
	return out
}
