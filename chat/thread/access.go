package thread

import "slices"

// Access says who may use the bot, and where. Channels, users and roles
// are named as the platform names them; roles are the groups a user is
// in (Discord's roles, Slack's user groups).
type Access struct {
	AllowedChannels  []string
	AllowAllChannels bool
	// AllowChannel, if set, allows the channels it reports true for,
	// besides those listed (Slack: direct messages with the bot, when
	// they are allowed).
	AllowChannel func(id string) bool
	// AllowedUsers and AllowedRoles, when both empty, allow everyone who
	// can write in an allowed channel.
	AllowedUsers []string
	AllowedRoles []string
	// Approvers, and members of ApproverRoles, may act on any thread:
	// answer its questions, cancel and reset it.
	Approvers     []string
	ApproverRoles []string
	// AllowedBots are bots whose messages are treated like a user's.
	AllowedBots  []string
	ShowThoughts bool
	// ChannelAgents names the agent profile new threads of a channel get
	// (the default when a channel has none).
	ChannelAgents map[string]string
}

// SetAccess changes who may use the bot, from the next event on.
//
// Threads of a channel the new lists no longer allow stop at once: their
// running turns are cancelled, and their later messages, clicks and
// commands are refused.
func (s *Server) SetAccess(a Access) {
	s.mu.Lock()
	s.access = a
	var dropped []string
	for id, conv := range s.convs {
		if !a.channel(conv.channel) {
			dropped = append(dropped, id)
		}
	}
	s.mu.Unlock()
	for _, thread := range dropped {
		if s.engine != nil && s.engine.Cancel(thread, errChannelNotServed) {
			s.log.Info().Str("thread", thread).Msg("channel no longer allowed; turn cancelled")
		}
	}
}

// Access returns the access lists in force.
func (s *Server) Access() Access { return s.acl() }

func (s *Server) acl() Access {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.access
}

// mayAct is the one rule for who may act on a thread (answer its
// permission requests and questions, cancel it, reset it, change its
// agent's options), checked against the lists in force now: in a
// channel the bot still serves, the thread's starter while still allowed
// to use the bot, an approver, or a member of an approver role. A thread
// whose starter is unknown is left to the approvers (fail closed).
func (a Access) mayAct(channel, starter string, u User) bool {
	if !a.channel(channel) {
		return false
	}
	return a.approver(u) || (starter != "" && u.ID == starter && a.user(u))
}

// approver reports whether u is an approver, or a member of an approver
// role.
func (a Access) approver(u User) bool {
	if slices.Contains(a.Approvers, u.ID) {
		return true
	}
	for _, r := range u.Roles {
		if slices.Contains(a.ApproverRoles, r) {
			return true
		}
	}
	return false
}

// whoMayAct names, for a refusal, who may act on a thread.
func whoMayAct(starter string) string {
	if starter == "" {
		return "An approver"
	}
	return "<@" + starter + "> or an approver"
}

func (a Access) channel(id string) bool {
	return a.AllowAllChannels || slices.Contains(a.AllowedChannels, id) || (a.AllowChannel != nil && a.AllowChannel(id))
}

// user reports whether u may use the bot (in an allowed channel).
func (a Access) user(u User) bool {
	if len(a.AllowedUsers) == 0 && len(a.AllowedRoles) == 0 {
		return true
	}
	if slices.Contains(a.AllowedUsers, u.ID) {
		return true
	}
	for _, r := range u.Roles {
		if slices.Contains(a.AllowedRoles, r) {
			return true
		}
	}
	return false
}
