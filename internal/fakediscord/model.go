package fakediscord

import (
	"encoding/json"
	"maps"
	"slices"
	"sort"
	"testing"
	"time"
)

// Channel types the fake models.
const (
	ChannelText          = 0
	ChannelAnnouncement  = 5
	ChannelPublicThread  = 11
	ChannelPrivateThread = 12
)

// Message flags the fake gives meaning to.
const (
	FlagSuppressEmbeds = 1 << 2
	FlagEphemeral      = 1 << 6
	FlagLoading        = 1 << 7
	FlagComponentsV2   = 1 << 15
)

// Gateway intents the fake checks.
const (
	IntentGuilds                = 1 << 0
	IntentGuildMembers          = 1 << 1
	IntentGuildPresences        = 1 << 8
	IntentGuildMessages         = 1 << 9
	IntentGuildMessageReactions = 1 << 10
	IntentMessageContent        = 1 << 15
)

// User is a Discord user.
type User struct {
	ID         string
	Username   string
	GlobalName string
	Bot        bool
}

// Mention returns the user's mention markup, <@id>.
func (u User) Mention() string { return "<@" + u.ID + ">" }

// Channel is a guild text channel or a thread.
type Channel struct {
	ID      string
	GuildID string
	Name    string
	Type    int
	// ParentID, OwnerID, AutoArchiveDuration and Archived are for
	// threads: the channel the thread is in, who started it, its archive
	// delay in minutes and whether it is archived.
	ParentID            string
	OwnerID             string
	AutoArchiveDuration int
	Archived            bool
	// StarterMessageID is the message a thread was started from (a
	// thread takes its starter message's id); empty otherwise.
	StarterMessageID string
	Created          time.Time
	// MessageCount counts the messages ever posted in the channel.
	MessageCount int
	// Renames counts the changes of its name.
	Renames int
}

// IsThread reports whether c is a thread.
func (c Channel) IsThread() bool {
	return c.Type == ChannelPublicThread || c.Type == ChannelPrivateThread
}

// Attachment is a file attached to a message.
type Attachment struct {
	ID          string
	Filename    string
	ContentType string
	Description string
	Size        int
	Data        []byte
	// URL serves Data from the fake (a plain http://127.0.0.1 address,
	// reachable by any HTTP client).
	URL string
}

// Revision is one state of a message: the one it was created with, or
// the one an edit left.
type Revision struct {
	At          time.Time
	Content     string
	Embeds      []json.RawMessage
	Components  []json.RawMessage
	Attachments []Attachment
	Flags       int
}

// Message is a message as it currently stands.
type Message struct {
	ID        string
	ChannelID string
	GuildID   string
	Author    User
	Content   string
	// Embeds and Components are the JSON objects last sent for them.
	Embeds      []json.RawMessage
	Components  []json.RawMessage
	Attachments []Attachment
	// Mentions and MentionRoles are parsed from Content, as Discord does.
	Mentions        []string
	MentionRoles    []string
	MentionEveryone bool
	Flags           int
	Type            int
	// ReferenceID is the message this one replies to.
	ReferenceID string
	// ThreadID is the thread started from this message.
	ThreadID string
	// InteractionID is set on interaction responses and follow-ups;
	// WebhookID (the application id) too.
	InteractionID string
	WebhookID     string
	Created       time.Time
	// EditedAt is zero if the message was never edited; Edits counts the
	// edits.
	EditedAt time.Time
	Edits    int
	Deleted  bool
}

// Ephemeral reports whether only the interacting user sees the message.
func (m Message) Ephemeral() bool { return m.Flags&FlagEphemeral != 0 }

// Button is a button found in a message's components.
type Button struct {
	CustomID string
	Label    string
	URL      string
	Style    int
	Disabled bool
}

// Buttons returns the buttons in the message's components, in order.
func (m Message) Buttons() []Button {
	var out []Button
	walkComponents(m.Components, func(c map[string]any) {
		if num(c["type"]) != 2 {
			return
		}
		b := Button{Style: num(c["style"])}
		b.CustomID, _ = c["custom_id"].(string)
		b.Label, _ = c["label"].(string)
		b.URL, _ = c["url"].(string)
		b.Disabled, _ = c["disabled"].(bool)
		out = append(out, b)
	})
	return out
}

// ButtonID returns the custom id of the button labelled label, failing
// the test if the message has none.
func (m Message) ButtonID(tb testing.TB, label string) string {
	tb.Helper()
	for _, b := range m.Buttons() {
		if b.Label == label {
			return b.CustomID
		}
	}
	tb.Fatalf("no %q button on %q", label, m.Content)
	return ""
}

// CustomIDs returns the custom_id of every component in the message.
func (m Message) CustomIDs() []string {
	var out []string
	walkComponents(m.Components, func(c map[string]any) {
		if id, ok := c["custom_id"].(string); ok {
			out = append(out, id)
		}
	})
	return out
}

// findComponent returns the type of the component with customID, or 0.
func (m Message) findComponent(customID string) int {
	typ := 0
	walkComponents(m.Components, func(c map[string]any) {
		if id, _ := c["custom_id"].(string); id == customID && typ == 0 {
			typ = num(c["type"])
		}
	})
	return typ
}

func walkComponents(raw []json.RawMessage, f func(map[string]any)) {
	var walk func(v any)
	walk = func(v any) {
		switch t := v.(type) {
		case map[string]any:
			f(t)
			for _, k := range []string{"components", "accessory"} {
				if sub, ok := t[k]; ok {
					walk(sub)
				}
			}
		case []any:
			for _, e := range t {
				walk(e)
			}
		}
	}
	for _, r := range raw {
		var v any
		if json.Unmarshal(r, &v) == nil {
			walk(v)
		}
	}
}

func num(v any) int {
	f, _ := v.(float64)
	return int(f)
}

// Reaction is one user's reaction to a message.
type Reaction struct {
	// Emoji is the unicode emoji, or name:id for a custom one.
	Emoji  string
	UserID string
	At     time.Time
}

// Command is a registered application command.
type Command struct {
	ID            string
	ApplicationID string
	// GuildID is empty for a global command.
	GuildID     string
	Name        string
	Description string
	Type        int
	Version     string
	Options     []CommandOption
	// JSON is the command as the fake returns it.
	JSON json.RawMessage
}

// CommandOption is an option of a registered command.
type CommandOption struct {
	Name     string
	Type     int
	Required bool
	// Autocomplete: the bot suggests the option's values as the user
	// types (see Server.Autocomplete).
	Autocomplete bool
	Options      []CommandOption
}

// Interaction is an interaction the fake dispatched and what the bot did
// with it.
type Interaction struct {
	ID    string
	Token string
	// Type is 2 for an application command, 3 for a message component,
	// 4 for an application command's autocomplete, 5 for a modal
	// submitted.
	Type int
	// Name is the command's name (types 2 and 4); CustomID and Values the
	// component's (type 3), MessageID the message it is on. A submitted
	// modal (type 5) has the modal's CustomID, the values by text input
	// in ModalValues, and the MessageID of the button that opened it.
	Name         string
	CustomID     string
	Values       []string
	ModalValues  map[string]string
	MessageID    string
	ChannelID    string
	GuildID      string
	UserID       string
	DispatchedAt time.Time
	// Responses are the callbacks the bot made, accepted or not.
	Responses []InteractionResponse
	// OriginalMessageID is the message @original stands for: the
	// response message (types 4 and 5) or the component's message (6
	// and 7). FollowupIDs are the follow-up messages.
	OriginalMessageID string
	FollowupIDs       []string
}

// Acknowledged reports whether the interaction got an accepted response.
func (i Interaction) Acknowledged() bool {
	for _, r := range i.Responses {
		if r.Status/100 == 2 {
			return true
		}
	}
	return false
}

// InteractionResponse is one callback to POST /interactions/{id}/{token}/callback.
type InteractionResponse struct {
	// Type is the response type: 4 message, 5 deferred message, 6
	// deferred update, 7 update message, 8 autocomplete result, 9 modal.
	Type    int
	Content string
	Flags   int
	// Data is the "data" object as sent.
	Data  json.RawMessage
	Files []File
	At    time.Time
	// Latency is the time since the INTERACTION_CREATE was dispatched;
	// Late is set when it exceeded Options.InteractionDeadline.
	Latency time.Duration
	Late    bool
	// Status is the HTTP status the fake answered.
	Status int
}

// Ephemeral reports whether the response asked for an ephemeral message.
func (r InteractionResponse) Ephemeral() bool { return r.Flags&FlagEphemeral != 0 }

// File is a file uploaded in a multipart request.
type File struct {
	// Field is the form field, e.g. files[0].
	Field       string
	Name        string
	ContentType string
	Size        int
	Data        []byte
}

// Request is a REST request the fake received.
type Request struct {
	At     time.Time
	Method string
	// Path is the path after the version, e.g. /channels/1/messages;
	// Query the raw query.
	Path  string
	Query string
	// Route is the route key (a Route* constant), empty if the route is
	// unknown; Major its major parameter (channel, guild, or interaction
	// token).
	Route string
	Major string
	// Status is the HTTP status answered.
	Status      int
	ContentType string
	Body        []byte
	// JSON is the decoded JSON body (payload_json for multipart), nil if
	// none.
	JSON  any
	Files []File
	// Unknown is set when no route matched (answered 404 or 405).
	Unknown bool
	// RateLimited is set when the request was answered 429, Injected when
	// that or another status came from Inject429 or InjectError.
	RateLimited bool
	Injected    bool
}

type guild struct {
	id, name string
	joined   time.Time
	members  map[string]*member
	order    []string // member ids
	roles    []string
}

type member struct {
	roles  []string
	joined time.Time
}

type message struct {
	Message
	revisions []Revision
	reactions []Reaction
}

func (m *message) snapshot() Revision {
	return Revision{
		At:          m.Created,
		Content:     m.Content,
		Embeds:      slices.Clone(m.Embeds),
		Components:  slices.Clone(m.Components),
		Attachments: slices.Clone(m.Attachments),
		Flags:       m.Flags,
	}
}

func copyMessage(m *message) Message {
	c := m.Message
	c.Embeds = slices.Clone(m.Embeds)
	c.Components = slices.Clone(m.Components)
	c.Attachments = slices.Clone(m.Attachments)
	c.Mentions = slices.Clone(m.Mentions)
	c.MentionRoles = slices.Clone(m.MentionRoles)
	return c
}

// AddGuild adds a guild the bot is in (guilds are also created by
// AddChannel). Guilds added before the bot identifies are in its READY
// and get a GUILD_CREATE; later ones are announced with GUILD_CREATE at
// once.
func (s *Server) AddGuild(guildID, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.guilds[guildID]; ok {
		return
	}
	g := s.guildLocked(guildID)
	g.name = name
	s.dispatchLocked("GUILD_CREATE", IntentGuilds, func(*gwSession) any { return s.wireGuildLocked(g) })
	s.notifyLocked()
}

func (s *Server) guildLocked(guildID string) *guild {
	if g, ok := s.guilds[guildID]; ok {
		return g
	}
	g := &guild{id: guildID, name: "guild-" + guildID, joined: time.Now(), members: map[string]*member{}}
	s.guilds[guildID] = g
	s.guildOrder = append(s.guildOrder, guildID)
	s.memberLocked(g, s.bot.ID)
	return g
}

func (s *Server) memberLocked(g *guild, userID string) *member {
	if m, ok := g.members[userID]; ok {
		return m
	}
	m := &member{joined: time.Now()}
	g.members[userID] = m
	g.order = append(g.order, userID)
	return m
}

// AddChannel adds a text channel to a guild, creating the guild if
// needed, and returns the channel's id (a fresh one if channelID is
// empty). If the guild is already known to the bot, CHANNEL_CREATE is
// dispatched.
func (s *Server) AddChannel(guildID, channelID, name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if channelID == "" {
		channelID = s.newIDLocked()
	}
	_, known := s.guilds[guildID]
	s.guildLocked(guildID)
	if _, dup := s.channels[channelID]; dup {
		s.errorf("AddChannel: channel %s exists", channelID)
		return channelID
	}
	c := &Channel{ID: channelID, GuildID: guildID, Name: name, Type: ChannelText, Created: time.Now()}
	s.channels[channelID] = c
	if known {
		s.dispatchLocked("CHANNEL_CREATE", IntentGuilds, func(*gwSession) any { return s.wireChannelLocked(c, true) })
	} else {
		g := s.guilds[guildID]
		s.dispatchLocked("GUILD_CREATE", IntentGuilds, func(*gwSession) any { return s.wireGuildLocked(g) })
	}
	s.notifyLocked()
	return channelID
}

// AddUser registers a user (users are also registered when they first
// act). A user is given to the guild as a member by SetRoles or by
// acting in one of its channels.
func (s *Server) AddUser(u User) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.userLocked(u)
}

func (s *Server) userLocked(u User) User {
	if old, ok := s.users[u.ID]; ok {
		if u.Username == "" {
			return *old
		}
		*old = u
		return u
	}
	if u.Username == "" {
		u.Username = "user" + u.ID
	}
	s.users[u.ID] = &u
	return u
}

func (s *Server) userByIDLocked(id string) User {
	if u, ok := s.users[id]; ok {
		return *u
	}
	return s.userLocked(User{ID: id})
}

// SetRoles makes userID a member of guildID with the given role ids.
func (s *Server) SetRoles(guildID, userID string, roleIDs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.userByIDLocked(userID)
	g := s.guildLocked(guildID)
	m := s.memberLocked(g, userID)
	m.roles = slices.Clone(roleIDs)
	for _, r := range roleIDs {
		if !slices.Contains(g.roles, r) {
			g.roles = append(g.roles, r)
		}
	}
	s.notifyLocked()
}

// Channel returns a channel or thread.
func (s *Server) Channel(channelID string) (Channel, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.channels[channelID]
	if !ok {
		return Channel{}, false
	}
	return *c, true
}

// Threads returns every thread, oldest first.
func (s *Server) Threads() []Channel {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Channel
	for _, c := range s.channels {
		if c.IsThread() {
			out = append(out, *c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return idLess(out[i].ID, out[j].ID) })
	return out
}

// idLess orders snowflakes (shorter is smaller, then lexically).
func idLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// Messages returns the channel's messages that are not deleted, oldest
// first, as they currently stand (ephemeral ones included).
func (s *Server) Messages(channelID string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, id := range s.chanMsgs[channelID] {
		if m := s.messages[id]; !m.Deleted {
			out = append(out, copyMessage(m))
		}
	}
	return out
}

// Message returns a message, deleted or not.
func (s *Server) Message(channelID, messageID string) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.messages[messageID]
	if !ok || m.ChannelID != channelID {
		return Message{}, false
	}
	return copyMessage(m), true
}

// Edits returns the states a message's edits left, oldest first (not the
// state it was created with; see Revisions).
func (s *Server) Edits(channelID, messageID string) []Revision {
	r := s.Revisions(channelID, messageID)
	if len(r) == 0 {
		return nil
	}
	return r[1:]
}

// Revisions returns every state of a message: as created, then after each
// edit.
func (s *Server) Revisions(channelID, messageID string) []Revision {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.messages[messageID]
	if !ok || m.ChannelID != channelID {
		return nil
	}
	return slices.Clone(m.revisions)
}

// Reactions returns the reactions a message currently has, in the order
// they were added.
func (s *Server) Reactions(channelID, messageID string) []Reaction {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.messages[messageID]
	if !ok || m.ChannelID != channelID {
		return nil
	}
	return slices.Clone(m.reactions)
}

// HasReaction reports whether userID (the bot: Bot().ID) reacted with
// emoji.
func (s *Server) HasReaction(channelID, messageID, userID, emoji string) bool {
	for _, r := range s.Reactions(channelID, messageID) {
		if r.UserID == userID && r.Emoji == emoji {
			return true
		}
	}
	return false
}

// Commands returns the registered application commands, global ones and
// guild ones, in registration order.
func (s *Server) Commands() []Command {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Command, len(s.commands))
	for i, c := range s.commands {
		out[i] = *c
	}
	return out
}

// Interaction returns an interaction the fake dispatched.
func (s *Server) Interaction(interactionID string) (Interaction, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.interactions[interactionID]
	if !ok {
		return Interaction{}, false
	}
	return in.copy(), true
}

// InteractionResponses returns the callbacks made for an interaction.
func (s *Server) InteractionResponses(interactionID string) []InteractionResponse {
	in, _ := s.Interaction(interactionID)
	return in.Responses
}

// Requests returns every REST request received, in order (only the
// latest ones with Options.MaxRequests).
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// RequestsTo returns the requests for a route key (a Route* constant).
func (s *Server) RequestsTo(route string) []Request {
	var out []Request
	for _, r := range s.Requests() {
		if r.Route == route {
			out = append(out, r)
		}
	}
	return out
}

// UnknownRequests returns the requests no route matched.
func (s *Server) UnknownRequests() []Request {
	var out []Request
	for _, r := range s.Requests() {
		if r.Unknown {
			out = append(out, r)
		}
	}
	return out
}

// RateLimited returns the requests answered 429.
func (s *Server) RateLimited() []Request {
	var out []Request
	for _, r := range s.Requests() {
		if r.RateLimited {
			out = append(out, r)
		}
	}
	return out
}

// Typing returns how many times the bot triggered the typing indicator in
// a channel.
func (s *Server) Typing(channelID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.typing[channelID]
}

type interaction struct {
	Interaction
	answered  bool
	deferred  bool   // type 5 answered and @original not yet filled
	modal     *Modal // the modal the bot answered with (type 9)
	modalDone bool   // and it was submitted
}

func (in *interaction) copy() Interaction {
	c := in.Interaction
	c.Values = slices.Clone(in.Values)
	c.Responses = slices.Clone(in.Responses)
	c.FollowupIDs = slices.Clone(in.FollowupIDs)
	c.ModalValues = maps.Clone(in.ModalValues)
	return c
}
