package fakediscord

import (
	"sort"
	"time"
)

// The JSON shapes below follow Discord's documented objects. Ids are
// strings, timestamps ISO 8601 with microseconds, nullable fields null.

const allPermissions = "2251799813685247"

func ts(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000+00:00") }

func tsOrNil(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return ts(t)
}

func emptyIfNil[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}

func (s *Server) wireUser(u User) map[string]any {
	m := map[string]any{
		"id":            u.ID,
		"username":      u.Username,
		"discriminator": "0",
		"global_name":   nil,
		"avatar":        nil,
		"public_flags":  0,
		"flags":         0,
	}
	if u.GlobalName != "" {
		m["global_name"] = u.GlobalName
	}
	if u.Bot {
		m["bot"] = true
	}
	return m
}

func (s *Server) wireBotSelf() map[string]any {
	m := s.wireUser(s.bot)
	m["verified"] = true
	m["mfa_enabled"] = false
	m["email"] = nil
	m["locale"] = "en-US"
	return m
}

// wireMember is a guild member; withUser adds the user object (members
// in MESSAGE_CREATE go without, those in interactions and REST with).
func (s *Server) wireMemberLocked(g *guild, userID string, withUser, withPerms bool) map[string]any {
	mem := s.memberLocked(g, userID)
	m := map[string]any{
		"roles":                        emptyIfNil(mem.roles),
		"joined_at":                    ts(mem.joined),
		"nick":                         nil,
		"avatar":                       nil,
		"premium_since":                nil,
		"deaf":                         false,
		"mute":                         false,
		"flags":                        0,
		"pending":                      false,
		"communication_disabled_until": nil,
	}
	if withUser {
		m["user"] = s.wireUser(s.userByIDLocked(userID))
	}
	if withPerms {
		m["permissions"] = allPermissions
	}
	return m
}

func (s *Server) wireChannelLocked(c *Channel, gateway bool) map[string]any {
	m := map[string]any{
		"id":                    c.ID,
		"type":                  c.Type,
		"guild_id":              c.GuildID,
		"name":                  c.Name,
		"flags":                 0,
		"last_message_id":       nil,
		"rate_limit_per_user":   0,
		"permission_overwrites": []any{},
		"nsfw":                  false,
	}
	if ids := s.chanMsgs[c.ID]; len(ids) > 0 {
		m["last_message_id"] = ids[len(ids)-1]
	}
	if c.IsThread() {
		m["parent_id"] = c.ParentID
		m["owner_id"] = c.OwnerID
		m["message_count"] = c.MessageCount
		m["total_message_sent"] = c.MessageCount
		m["member_count"] = 1
		m["thread_metadata"] = map[string]any{
			"archived":              c.Archived,
			"auto_archive_duration": c.AutoArchiveDuration,
			"archive_timestamp":     ts(c.Created),
			"locked":                false,
			"create_timestamp":      ts(c.Created),
		}
		if c.Type == ChannelPrivateThread {
			m["thread_metadata"].(map[string]any)["invitable"] = true
		}
		delete(m, "permission_overwrites")
		delete(m, "nsfw")
		if !gateway {
			m["member"] = map[string]any{
				"id":             c.ID,
				"user_id":        s.bot.ID,
				"join_timestamp": ts(c.Created),
				"flags":          1,
			}
		}
	} else {
		m["position"] = 0
		m["topic"] = nil
		m["parent_id"] = nil
		m["default_auto_archive_duration"] = 1440
	}
	return m
}

// wireMessageLocked renders a message; gateway adds the fields Discord
// sends only in gateway events (guild_id, member).
func (s *Server) wireMessageLocked(m *message, gateway bool) map[string]any {
	mentions := []any{}
	for _, id := range m.Mentions {
		u := s.wireUser(s.userByIDLocked(id))
		if gateway && m.GuildID != "" {
			if g, ok := s.guilds[m.GuildID]; ok {
				u["member"] = s.wireMemberLocked(g, id, false, false)
			}
		}
		mentions = append(mentions, u)
	}
	atts := []any{}
	for _, a := range m.Attachments {
		w := map[string]any{
			"id":           a.ID,
			"filename":     a.Filename,
			"size":         a.Size,
			"url":          a.URL,
			"proxy_url":    a.URL,
			"content_type": a.ContentType,
		}
		if a.Description != "" {
			w["description"] = a.Description
		}
		if a.ContentType == "" {
			delete(w, "content_type")
		}
		atts = append(atts, w)
	}
	w := map[string]any{
		"id":               m.ID,
		"channel_id":       m.ChannelID,
		"author":           s.wireUser(m.Author),
		"content":          m.Content,
		"timestamp":        ts(m.Created),
		"edited_timestamp": tsOrNil(m.EditedAt),
		"tts":              false,
		"mention_everyone": m.MentionEveryone,
		"mentions":         mentions,
		"mention_roles":    emptyIfNil(m.MentionRoles),
		"attachments":      atts,
		"embeds":           emptyIfNil(m.Embeds),
		"components":       emptyIfNil(m.Components),
		"pinned":           false,
		"type":             m.Type,
		"flags":            m.Flags,
	}
	if len(m.reactions) > 0 {
		w["reactions"] = s.wireReactions(m)
	}
	if m.ReferenceID != "" {
		w["message_reference"] = map[string]any{
			"type":       0,
			"message_id": m.ReferenceID,
			"channel_id": m.ChannelID,
			"guild_id":   m.GuildID,
		}
		if ref, ok := s.messages[m.ReferenceID]; ok && !ref.Deleted {
			w["referenced_message"] = s.wireMessageLocked(ref, false)
		} else {
			w["referenced_message"] = nil
		}
	}
	if m.ThreadID != "" {
		if th, ok := s.channels[m.ThreadID]; ok {
			w["thread"] = s.wireChannelLocked(th, gateway)
		}
	}
	if m.WebhookID != "" {
		w["webhook_id"] = m.WebhookID
		w["application_id"] = s.appID
	}
	if m.InteractionID != "" {
		if in, ok := s.interactions[m.InteractionID]; ok {
			w["interaction_metadata"] = map[string]any{
				"id":                             in.ID,
				"type":                           in.Type,
				"user":                           s.wireUser(s.userByIDLocked(in.UserID)),
				"authorizing_integration_owners": map[string]any{"0": in.GuildID},
			}
		}
	}
	if gateway && m.GuildID != "" {
		w["guild_id"] = m.GuildID
		if g, ok := s.guilds[m.GuildID]; ok && m.WebhookID == "" {
			w["member"] = s.wireMemberLocked(g, m.Author.ID, false, false)
		}
	}
	return w
}

func (s *Server) wireReactions(m *message) []any {
	type agg struct {
		count int
		me    bool
	}
	var order []string
	by := map[string]*agg{}
	for _, r := range m.reactions {
		a, ok := by[r.Emoji]
		if !ok {
			a = &agg{}
			by[r.Emoji] = a
			order = append(order, r.Emoji)
		}
		a.count++
		if r.UserID == s.bot.ID {
			a.me = true
		}
	}
	out := []any{}
	for _, e := range order {
		a := by[e]
		out = append(out, map[string]any{
			"count":         a.count,
			"count_details": map[string]any{"burst": 0, "normal": a.count},
			"me":            a.me,
			"me_burst":      false,
			"burst_colors":  []any{},
			"emoji":         wireEmoji(e),
		})
	}
	return out
}

// wireEmoji renders a unicode emoji or a name:id custom one.
func wireEmoji(e string) map[string]any {
	if name, id, ok := splitCustomEmoji(e); ok {
		return map[string]any{"id": id, "name": name}
	}
	return map[string]any{"id": nil, "name": e}
}

func (s *Server) wireGuildLocked(g *guild) map[string]any {
	var chans, threads []any
	ids := make([]string, 0, len(s.channels))
	for id, c := range s.channels {
		if c.GuildID == g.id {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return idLess(ids[i], ids[j]) })
	for _, id := range ids {
		c := s.channels[id]
		if c.IsThread() {
			if !c.Archived {
				threads = append(threads, s.wireChannelLocked(c, true))
			}
		} else {
			chans = append(chans, s.wireChannelLocked(c, true))
		}
	}
	members := []any{}
	for _, uid := range g.order {
		members = append(members, s.wireMemberLocked(g, uid, true, false))
	}
	roles := []any{map[string]any{
		"id": g.id, "name": "@everyone", "permissions": "1071698660929", "position": 0,
		"color": 0, "hoist": false, "managed": false, "mentionable": false, "flags": 0,
	}}
	for i, r := range g.roles {
		roles = append(roles, map[string]any{
			"id": r, "name": "role-" + r, "permissions": "0", "position": i + 1,
			"color": 0, "hoist": false, "managed": false, "mentionable": false, "flags": 0,
		})
	}
	return map[string]any{
		"id":                            g.id,
		"name":                          g.name,
		"icon":                          nil,
		"owner_id":                      "1",
		"joined_at":                     ts(g.joined),
		"large":                         false,
		"unavailable":                   false,
		"member_count":                  len(g.members),
		"members":                       members,
		"channels":                      emptyIfNil(chans),
		"threads":                       emptyIfNil(threads),
		"roles":                         roles,
		"emojis":                        []any{},
		"stickers":                      []any{},
		"presences":                     []any{},
		"voice_states":                  []any{},
		"stage_instances":               []any{},
		"guild_scheduled_events":        []any{},
		"features":                      []any{},
		"verification_level":            0,
		"default_message_notifications": 0,
		"explicit_content_filter":       0,
		"mfa_level":                     0,
		"nsfw_level":                    0,
		"premium_tier":                  0,
		"preferred_locale":              "en-US",
		"system_channel_id":             nil,
		"application_id":                nil,
		"afk_channel_id":                nil,
		"afk_timeout":                   300,
	}
}
