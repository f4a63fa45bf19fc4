package fakeslack

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"mime"
	"net/url"
	"path"
	"regexp"
	"strings"
)

// wireMessageLocked renders a message as the Web API and events show it.
func (s *Server) wireMessageLocked(m *message) map[string]any {
	out := map[string]any{"type": "message", "ts": m.TS, "text": m.Text}
	if m.Tombstone {
		out["subtype"] = "tombstone"
		out["text"] = "This message was deleted."
		out["hidden"] = true
		out["user"] = "USLACKBOT"
	} else {
		if m.User != "" {
			out["user"] = m.User
			out["team"] = s.team.ID
		}
		if m.Subtype != "" {
			out["subtype"] = m.Subtype
		}
		if m.FromBot() {
			out["bot_id"] = m.BotID
			out["app_id"] = m.AppID
			out["bot_profile"] = s.wireBotProfile()
		}
		if m.Blocks != nil {
			out["blocks"] = m.Blocks
		}
		if len(m.Attachments) > 0 {
			out["attachments"] = m.Attachments
		}
		if len(m.Metadata) > 0 {
			out["metadata"] = m.Metadata
		}
		if len(m.Files) > 0 {
			var files []any
			for _, id := range m.Files {
				if f := s.files[id]; f != nil {
					files = append(files, s.wireFileLocked(f))
				}
			}
			out["files"] = files
			out["upload"] = !m.FromBot()
			out["display_as_bot"] = false
		}
		if m.Username != "" {
			out["username"] = m.Username
		}
		if m.IconEmoji != "" || m.IconURL != "" {
			out["icons"] = map[string]any{"emoji": m.IconEmoji, "image_48": m.IconURL}
		}
		if m.Edits > 0 {
			out["edited"] = map[string]any{"user": m.User, "ts": formatTS(m.Edited.UnixMicro())}
		}
		if len(m.Reactions) > 0 {
			var rs []any
			for _, r := range m.Reactions {
				rs = append(rs, map[string]any{"name": r.Name, "users": r.Users, "count": len(r.Users)})
			}
			out["reactions"] = rs
		}
	}
	if th := m.threadTS(); th != "" {
		out["thread_ts"] = th
	}
	if m.parent != "" {
		if p := s.messages[msgKey(m.Channel, m.parent)]; p != nil {
			out["parent_user_id"] = p.User
		}
		if m.ReplyBroadcast {
			out["subtype"] = "thread_broadcast"
		}
	}
	if m.Replies > 0 {
		out["reply_count"] = m.Replies
		out["reply_users"] = m.ReplyUsers
		out["reply_users_count"] = len(m.ReplyUsers)
		out["latest_reply"] = s.latestReplyLocked(m)
	}
	return out
}

func (s *Server) latestReplyLocked(m *message) string {
	latest := ""
	for _, r := range s.threadLocked(m.Channel, m.TS) {
		if r.parent != "" && !r.Deleted {
			latest = r.TS
		}
	}
	return latest
}

func (s *Server) wireBotProfile() map[string]any {
	return map[string]any{
		"id": s.bot.BotID, "app_id": s.bot.AppID, "name": s.bot.Name, "deleted": false,
		"team_id": s.team.ID, "updated": 1700000000, "icons": map[string]any{},
	}
}

func (s *Server) wireUser(u *User) map[string]any {
	profile := map[string]any{
		"real_name":    u.RealName,
		"display_name": u.DisplayName,
		"email":        u.Email,
		"team":         s.team.ID,
		"image_72":     "",
	}
	if u.IsBot && u.ID == s.bot.UserID {
		profile["bot_id"] = s.bot.BotID
		profile["api_app_id"] = s.bot.AppID
	}
	tz := u.TZ
	if tz == "" {
		tz = "Europe/London"
	}
	return map[string]any{
		"id":          u.ID,
		"team_id":     s.team.ID,
		"name":        u.Name,
		"real_name":   u.RealName,
		"deleted":     u.Deleted,
		"is_bot":      u.IsBot,
		"is_app_user": false,
		"tz":          tz,
		"profile":     profile,
		"updated":     1700000000,
	}
}

func (s *Server) wireChannelLocked(c *channel) map[string]any {
	out := map[string]any{
		"id":              c.ID,
		"created":         c.Created.Unix(),
		"is_archived":     c.Archived,
		"is_im":           c.Kind == IM,
		"is_mpim":         c.Kind == MPIM,
		"is_private":      c.Kind != Public,
		"is_member":       !c.BotAbsent,
		"context_team_id": s.team.ID,
	}
	if c.Kind == IM {
		out["user"] = c.User
		out["is_open"] = true
		return out
	}
	out["name"] = c.Name
	out["name_normalized"] = c.Name
	out["is_channel"] = c.Kind == Public || c.Kind == Private
	out["is_group"] = c.Kind == MPIM
	out["is_general"] = false
	out["creator"] = s.bot.UserID
	out["topic"] = map[string]any{"value": "", "creator": "", "last_set": 0}
	out["purpose"] = map[string]any{"value": "", "creator": "", "last_set": 0}
	return out
}

func (s *Server) numMembersLocked(c *channel) int {
	n := len(c.members)
	if c.members == nil {
		n = len(s.users) - 1
	}
	if !c.BotAbsent {
		n++
	}
	return n
}

// fileURLs are the addresses of a file on the fake.
func (s *Server) fileURL(f *file, download bool) string {
	if f.url != "" {
		return f.url
	}
	p := "/files-pri/" + s.team.ID + "-" + f.ID + "/"
	if download {
		p += "download/"
	}
	return s.URL() + p + url.PathEscape(f.Name)
}

func (s *Server) wireFileLocked(f *file) map[string]any {
	out := map[string]any{
		"id":                   f.ID,
		"created":              f.Created.Unix(),
		"timestamp":            f.Created.Unix(),
		"name":                 f.Name,
		"title":                f.Title,
		"mimetype":             f.Mimetype,
		"filetype":             f.Filetype,
		"pretty_type":          strings.ToUpper(f.Filetype),
		"user":                 f.User,
		"user_team":            s.team.ID,
		"editable":             false,
		"size":                 f.Size,
		"mode":                 "hosted",
		"is_external":          false,
		"external_type":        "",
		"is_public":            false,
		"public_url_shared":    false,
		"display_as_bot":       false,
		"username":             "",
		"url_private":          s.fileURL(f, false),
		"url_private_download": s.fileURL(f, true),
		"permalink":            "https://" + s.team.Domain + ".slack.com/files/" + f.User + "/" + f.ID + "/" + url.PathEscape(f.Name),
		"permalink_public":     "https://slack-files.com/" + s.team.ID + "-" + f.ID,
		"has_rich_preview":     false,
	}
	if f.AltText != "" {
		out["alt_txt"] = f.AltText
	}
	if f.Channel != "" {
		out["channels"] = []string{f.Channel}
		share := map[string]any{"ts": f.MessageTS, "share_user_id": f.User, "team_id": s.team.ID}
		if f.ThreadTS != "" {
			share["thread_ts"] = f.ThreadTS
		}
		kind := "private"
		if c := s.channels[f.Channel]; c != nil && c.Kind == Public {
			kind = "public"
			out["is_public"] = true
		}
		out["shares"] = map[string]any{kind: map[string]any{f.Channel: []any{share}}}
	} else {
		out["channels"] = []string{}
	}
	return out
}

// filetypeOf guesses Slack's filetype and the mimetype of a file name.
func filetypeOf(name string) (filetype, mimetype string) {
	ext := strings.TrimPrefix(strings.ToLower(path.Ext(name)), ".")
	mimetype = mime.TypeByExtension("." + ext)
	if i := strings.IndexByte(mimetype, ';'); i >= 0 {
		mimetype = mimetype[:i]
	}
	switch ext {
	case "":
		return "text", "text/plain"
	case "txt":
		return "text", "text/plain"
	case "md":
		return "markdown", "text/markdown"
	case "jpeg":
		ext = "jpg"
	}
	if mimetype == "" {
		mimetype = "application/octet-stream"
	}
	return ext, mimetype
}

var mentionRE = regexp.MustCompile(`<([@#!])([^>|]+)(?:\|[^>]*)?>`)

// richText renders a user's text as the rich_text block Slack adds to
// the messages users write: text, user and channel mentions.
func richText(text string) json.RawMessage {
	var els []any
	last := 0
	for _, loc := range mentionRE.FindAllStringSubmatchIndex(text, -1) {
		if loc[0] > last {
			els = append(els, map[string]any{"type": "text", "text": text[last:loc[0]]})
		}
		kind, id := text[loc[2]:loc[3]], text[loc[4]:loc[5]]
		switch {
		case kind == "@":
			els = append(els, map[string]any{"type": "user", "user_id": id})
		case kind == "#":
			els = append(els, map[string]any{"type": "channel", "channel_id": id})
		case strings.HasPrefix(id, "subteam^"):
			els = append(els, map[string]any{"type": "usergroup", "usergroup_id": strings.TrimPrefix(id, "subteam^")})
		default:
			els = append(els, map[string]any{"type": "broadcast", "range": id})
		}
		last = loc[1]
	}
	if last < len(text) {
		els = append(els, map[string]any{"type": "text", "text": text[last:]})
	}
	if els == nil {
		els = []any{}
	}
	b, _ := json.Marshal(map[string]any{
		"type":     "rich_text",
		"block_id": randomBlockID(),
		"elements": []any{map[string]any{"type": "rich_text_section", "elements": els}},
	})
	return b
}

// randomBlockID makes up an id, as Slack does for blocks and elements
// sent without one.
func randomBlockID() string {
	const letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 5)
	rand.Read(b)
	for i := range b {
		b[i] = letters[int(b[i])%len(letters)]
	}
	return string(b)
}

// fillIDs gives a block, and its interactive elements, the block_id and
// action_ids they lack, as Slack does.
func fillIDs(o map[string]any) {
	if o["block_id"] == nil {
		o["block_id"] = randomBlockID()
	}
	fill := func(e any) {
		if el, ok := e.(map[string]any); ok && el["action_id"] == nil && elementTypes[fmt.Sprint(el["type"])] && el["type"] != "image" {
			el["action_id"] = randomBlockID()
		}
	}
	fill(o["accessory"])
	fill(o["element"])
	if els, ok := o["elements"].([]any); ok && o["type"] == "actions" {
		for _, e := range els {
			fill(e)
		}
	}
}

// withBlockIDs gives every block that has none a block_id, as Slack does.
func withBlockIDs(blocks []json.RawMessage) []json.RawMessage {
	out := make([]json.RawMessage, len(blocks))
	for i, b := range blocks {
		var o map[string]any
		if json.Unmarshal(b, &o) == nil {
			fillIDs(o)
			b, _ = json.Marshal(o)
		}
		out[i] = b
	}
	return out
}

// mentions returns the user ids mentioned in a text.
func mentions(text string) []string {
	var out []string
	for _, m := range mentionRE.FindAllStringSubmatch(text, -1) {
		if m[1] == "@" {
			out = append(out, m[2])
		}
	}
	return out
}
