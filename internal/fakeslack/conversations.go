package fakeslack

import (
	"encoding/base64"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

var emojiName = regexp.MustCompile(`^[a-z0-9_+'\-]+(::skin-tone-[2-6])?$`)

// maxDistinctReactions is how many different emoji a message may carry.
const maxDistinctReactions = 23

// reactionTarget finds the message a reactions.* call names.
func (s *Server) reactionTarget(c *call) (*channel, *message, reply) {
	if c.str("channel") == "" || c.str("timestamp") == "" {
		return nil, nil, fail("no_item_specified")
	}
	ch, errReply := s.channelLocked(c.str("channel"), false)
	if errReply != nil {
		return nil, nil, errReply
	}
	if _, ok := parseTS(c.str("timestamp")); !ok {
		return nil, nil, fail("bad_timestamp")
	}
	m := s.messages[msgKey(ch.ID, c.str("timestamp"))]
	if m == nil || m.Deleted {
		return nil, nil, fail("message_not_found")
	}
	return ch, m, nil
}

func (s *Server) addReaction(c *call) reply {
	ch, m, errReply := s.reactionTarget(c)
	if errReply != nil {
		return errReply
	}
	if ch.Archived {
		return fail("is_archived")
	}
	name := c.str("name")
	if !emojiName.MatchString(name) {
		return fail("invalid_name")
	}
	if code := s.reactLocked(ch, m, s.bot.UserID, name, c.now); code != "" {
		return fail(code)
	}
	return okReply()
}

// reactLocked adds a reaction and tells the app of it; it returns the
// error Slack gives when it cannot.
func (s *Server) reactLocked(ch *channel, m *message, userID, name string, now time.Time) string {
	i := slices.IndexFunc(m.Reactions, func(r Reaction) bool { return r.Name == name })
	switch {
	case i >= 0 && slices.Contains(m.Reactions[i].Users, userID):
		return "already_reacted"
	case i < 0 && len(m.Reactions) >= maxDistinctReactions:
		return "too_many_emoji"
	case i < 0:
		m.Reactions = append(m.Reactions, Reaction{Name: name, Users: []string{userID}})
	default:
		m.Reactions[i].Users = append(m.Reactions[i].Users, userID)
	}
	s.reactionEventLocked("reaction_added", ch, m, userID, name, now)
	return ""
}

// unreactLocked removes a reaction and tells the app of it; it returns
// no_reaction when there was none.
func (s *Server) unreactLocked(ch *channel, m *message, userID, name string, now time.Time) string {
	i := slices.IndexFunc(m.Reactions, func(r Reaction) bool { return r.Name == name })
	if i < 0 || !slices.Contains(m.Reactions[i].Users, userID) {
		return "no_reaction"
	}
	r := &m.Reactions[i]
	r.Users = slices.DeleteFunc(r.Users, func(u string) bool { return u == userID })
	if len(r.Users) == 0 {
		m.Reactions = slices.Delete(m.Reactions, i, i+1)
	}
	s.reactionEventLocked("reaction_removed", ch, m, userID, name, now)
	return ""
}

func (s *Server) reactionEventLocked(typ string, ch *channel, m *message, userID, name string, now time.Time) {
	ev := map[string]any{
		"type":      typ,
		"user":      userID,
		"reaction":  name,
		"item_user": m.User,
		"item":      map[string]any{"type": "message", "channel": ch.ID, "ts": m.TS},
		"event_ts":  s.newTSLocked(now),
	}
	if userID == s.bot.UserID {
		s.botEventLocked(ev)
	} else {
		s.eventLocked(ev)
	}
}

func (s *Server) removeReaction(c *call) reply {
	ch, m, errReply := s.reactionTarget(c)
	if errReply != nil {
		return errReply
	}
	if !emojiName.MatchString(c.str("name")) {
		return fail("invalid_name")
	}
	if code := s.unreactLocked(ch, m, s.bot.UserID, c.str("name"), c.now); code != "" {
		return fail(code)
	}
	return okReply()
}

func (s *Server) getReactions(c *call) reply {
	ch, m, errReply := s.reactionTarget(c)
	if errReply != nil {
		return errReply
	}
	msg := s.wireMessageLocked(m)
	msg["permalink"] = "https://" + s.team.Domain + ".slack.com/archives/" + ch.ID + "/p" + strings.ReplaceAll(m.TS, ".", "")
	return okReply("type", "message", "channel", ch.ID, "message", msg)
}

func (s *Server) conversationInfo(c *call) reply {
	ch := s.channels[c.str("channel")]
	if ch == nil || (ch.BotAbsent && ch.Kind != Public) {
		return fail("channel_not_found")
	}
	w := s.wireChannelLocked(ch)
	if f := c.flag("include_num_members"); f != nil && *f {
		w["num_members"] = s.numMembersLocked(ch)
	}
	return okReply("channel", w)
}

func (s *Server) conversationOpen(c *call) reply {
	if id := c.str("channel"); id != "" {
		ch := s.channels[id]
		if ch == nil || (ch.Kind != IM && ch.Kind != MPIM) {
			return fail("channel_not_found")
		}
		return okReply("channel", map[string]any{"id": ch.ID})
	}
	users := strings.Split(c.str("users"), ",")
	if c.str("users") == "" {
		return fail("users_list_not_supplied")
	}
	for _, u := range users {
		if s.users[u] == nil {
			return fail("user_not_found")
		}
	}
	if len(users) > 8 {
		return fail("too_many_users")
	}
	if len(users) == 1 {
		existed := false
		for _, id := range s.corder {
			if ch := s.channels[id]; ch.Kind == IM && ch.User == users[0] {
				existed = true
			}
		}
		ch := s.imLocked(users[0])
		return okReply("no_op", existed, "already_open", existed, "channel", map[string]any{"id": ch.ID})
	}
	ch := &channel{Channel: Channel{ID: s.newIDLocked("G"), Kind: MPIM, Created: c.now}}
	ch.Name = "mpdm-" + strings.Join(users, "--") + "-1"
	ch.members = map[string]bool{}
	for _, u := range users {
		ch.members[u] = true
	}
	s.channels[ch.ID] = ch
	s.corder = append(s.corder, ch.ID)
	return okReply("channel", map[string]any{"id": ch.ID})
}

// page is a window over messages for the history methods.
type page struct {
	limit          int
	oldest, latest int64 // microseconds; latest 0: none
	inclusive      bool
	after          int64 // the cursor: start past this ts, in the page's order
	hasCursor      bool
}

// pageArgs reads limit, oldest, latest, inclusive and cursor.
func (s *Server) pageArgs(c *call, def, maxLimit int) (page, reply) {
	p := page{limit: def, inclusive: c.str("inclusive") == "1" || c.str("inclusive") == "true"}
	if s.opts.NonMarketplace {
		def, maxLimit = 15, 15
		p.limit = def
	}
	if v := c.str("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err == nil && n > 0 {
			p.limit = min(n, maxLimit)
		}
	}
	if v := c.str("oldest"); v != "" && v != "0" {
		us, ok := parseLooseTS(v)
		if !ok {
			return p, fail("invalid_ts_oldest")
		}
		p.oldest = us
	}
	if v := c.str("latest"); v != "" {
		us, ok := parseLooseTS(v)
		if !ok {
			return p, fail("invalid_ts_latest")
		}
		p.latest = us
	}
	if v := c.str("cursor"); v != "" {
		raw, err := base64.StdEncoding.DecodeString(v)
		ts, found := strings.CutPrefix(string(raw), "next_ts:")
		us, ok := parseTS(ts)
		if err != nil || !found || !ok {
			return p, fail("invalid_cursor")
		}
		p.after, p.hasCursor = us, true
	}
	return p, nil
}

// parseLooseTS reads a timestamp given as seconds, with or without a
// fraction.
func parseLooseTS(v string) (int64, bool) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 {
		return 0, false
	}
	if us, ok := parseTS(v); ok {
		return us, true
	}
	return int64(f * 1e6), true
}

func (p page) inRange(us int64) bool {
	if p.oldest > 0 && (us < p.oldest || (us == p.oldest && !p.inclusive)) {
		return false
	}
	if p.latest > 0 && (us > p.latest || (us == p.latest && !p.inclusive)) {
		return false
	}
	return true
}

// cut returns the page of msgs (in the order wanted) past the cursor,
// and the cursor for the next one.
func (p page) cut(msgs []*message, newestFirst bool) (out []*message, next string) {
	for _, m := range msgs {
		us, _ := parseTS(m.TS)
		if !p.inRange(us) {
			continue
		}
		if p.hasCursor && ((newestFirst && us >= p.after) || (!newestFirst && us <= p.after)) {
			continue
		}
		if len(out) == p.limit {
			last := out[len(out)-1].TS
			return out, base64.StdEncoding.EncodeToString([]byte("next_ts:" + last))
		}
		out = append(out, m)
	}
	return out, ""
}

func (s *Server) conversationReplies(c *call) reply {
	ch, errReply := s.channelLocked(c.str("channel"), false)
	if errReply != nil {
		return errReply
	}
	root := s.messages[msgKey(ch.ID, c.str("ts"))]
	if root == nil || (root.Deleted && !root.Tombstone) {
		return fail("thread_not_found")
	}
	if root.parent != "" {
		root = s.messages[msgKey(ch.ID, root.parent)]
	}
	p, errReply := s.pageArgs(c, 1000, 1000)
	if errReply != nil {
		return errReply
	}
	var live []*message
	for _, m := range s.threadLocked(ch.ID, root.TS) {
		if !m.Deleted || m.Tombstone {
			live = append(live, m)
		}
	}
	msgs, next := p.cut(live, false)
	return s.historyReply(msgs, next)
}

func (s *Server) conversationHistory(c *call) reply {
	ch, errReply := s.channelLocked(c.str("channel"), false)
	if errReply != nil {
		return errReply
	}
	p, errReply := s.pageArgs(c, 100, 999)
	if errReply != nil {
		return errReply
	}
	var top []*message
	for i := len(ch.msgs) - 1; i >= 0; i-- {
		m := s.messages[msgKey(ch.ID, ch.msgs[i])]
		if (m.parent == "" || m.ReplyBroadcast) && (!m.Deleted || m.Tombstone) {
			top = append(top, m)
		}
	}
	msgs, next := p.cut(top, true)
	r := s.historyReply(msgs, next)
	r["pin_count"] = 0
	return r
}

func (s *Server) historyReply(msgs []*message, next string) reply {
	list := make([]any, 0, len(msgs))
	for _, m := range msgs {
		list = append(list, s.wireMessageLocked(m))
	}
	r := okReply("messages", list, "has_more", next != "")
	if next != "" {
		r["response_metadata"] = map[string]any{"next_cursor": next}
	}
	return r
}

func (s *Server) userInfo(c *call) reply {
	if list := c.str("users"); list != "" {
		var out []any
		for _, id := range strings.Split(list, ",") {
			u := s.users[id]
			if u == nil {
				return fail("user_not_found")
			}
			out = append(out, s.wireUser(u))
		}
		return okReply("users", out)
	}
	u := s.users[c.str("user")]
	if u == nil {
		return fail("user_not_found")
	}
	return okReply("user", s.wireUser(u))
}

func (s *Server) wireGroup(g *UserGroup, withUsers, withCount bool) map[string]any {
	out := map[string]any{
		"id":           g.ID,
		"team_id":      s.team.ID,
		"is_usergroup": true,
		"is_subteam":   true,
		"name":         g.Name,
		"description":  "",
		"handle":       g.Handle,
		"is_external":  false,
		"date_create":  1700000000,
		"date_update":  1700000000,
		"date_delete":  0,
		"auto_type":    nil,
		"created_by":   s.bot.UserID,
		"prefs":        map[string]any{"channels": []string{}, "groups": []string{}},
	}
	if g.Disabled {
		out["date_delete"] = 1700000001
	}
	if withUsers {
		out["users"] = slices.Clone(g.Members)
	}
	if withCount {
		out["user_count"] = len(g.Members)
	}
	return out
}

func (s *Server) userGroupsList(c *call) reply {
	withUsers := c.flag("include_users") != nil && *c.flag("include_users")
	withCount := c.flag("include_count") != nil && *c.flag("include_count")
	withDisabled := c.flag("include_disabled") != nil && *c.flag("include_disabled")
	list := []any{}
	for _, id := range s.gorder {
		g := s.groups[id]
		if g.Disabled && !withDisabled {
			continue
		}
		list = append(list, s.wireGroup(g, withUsers, withCount))
	}
	return okReply("usergroups", list)
}

func (s *Server) userGroupUsers(c *call) reply {
	g := s.groups[c.str("usergroup")]
	withDisabled := c.flag("include_disabled") != nil && *c.flag("include_disabled")
	if g == nil || (g.Disabled && !withDisabled) {
		return fail("no_such_subteam")
	}
	return okReply("users", append([]string{}, g.Members...))
}

// statusLifetime is how long an assistant status stays without a reply.
const statusLifetime = 2 * time.Minute

// threadOf checks the channel_id and thread_ts of an assistant.threads
// call.
func (s *Server) threadOf(c *call) (*channel, string, reply) {
	ch := s.channels[c.str("channel_id")]
	if ch == nil || ch.BotAbsent {
		return nil, "", fail("channel_not_found")
	}
	th := s.parentLocked(ch, c.str("thread_ts"))
	if th == "" {
		return nil, "", fail("invalid_thread_ts")
	}
	return ch, th, nil
}

func (s *Server) statusLocked(channelID, threadTS string) *ThreadStatus {
	key := msgKey(channelID, threadTS)
	st := s.statuses[key]
	if st == nil {
		st = &ThreadStatus{Channel: channelID, ThreadTS: threadTS}
		s.statuses[key] = st
	}
	return st
}

func (s *Server) setThreadStatus(c *call) reply {
	ch, th, errReply := s.threadOf(c)
	if errReply != nil {
		return errReply
	}
	var loading []string
	if v := c.str("loading_messages"); v != "" {
		if raw, ok := c.jsonArg("loading_messages"); ok && json.Unmarshal(raw, &loading) == nil {
		} else {
			loading = strings.Split(v, ",")
		}
	}
	if len(loading) > 10 {
		return fail("invalid_arguments")
	}
	st := s.statusLocked(ch.ID, th)
	st.Status, st.LoadingMessages, st.At, st.Method, st.Cleared = c.str("status"), loading, c.now, "assistant.threads.setStatus", ""
	s.statusLog = append(s.statusLog, *st)
	return okReply()
}

func (s *Server) setThreadTitle(c *call) reply {
	ch, th, errReply := s.threadOf(c)
	if errReply != nil {
		return errReply
	}
	st := s.statusLocked(ch.ID, th)
	st.Title = c.str("title")
	s.statusLog = append(s.statusLog, ThreadStatus{Channel: ch.ID, ThreadTS: th, Title: st.Title, At: c.now, Method: "assistant.threads.setTitle"})
	return okReply()
}

func (s *Server) setSuggestedPrompts(c *call) reply {
	ch, th, errReply := s.threadOf(c)
	if errReply != nil {
		return errReply
	}
	if _, ok := c.jsonArg("prompts"); !ok {
		return fail("invalid_arguments")
	}
	s.statusLog = append(s.statusLog, ThreadStatus{Channel: ch.ID, ThreadTS: th, Title: c.str("title"), At: c.now, Method: "assistant.threads.setSuggestedPrompts"})
	return okReply()
}

// clearStatusLocked clears a thread's status as the bot replies in it.
func (s *Server) clearStatusLocked(channelID, threadTS, why string, now time.Time) {
	st := s.statuses[msgKey(channelID, threadTS)]
	if st == nil || st.Status == "" {
		return
	}
	s.expireStatusLocked(st, now)
	if st.Status == "" {
		return
	}
	st.Status, st.LoadingMessages, st.Cleared, st.At = "", nil, why, now
	s.statusLog = append(s.statusLog, *st)
}

// expireStatusLocked clears a status set more than two minutes ago.
func (s *Server) expireStatusLocked(st *ThreadStatus, now time.Time) {
	if st.Status != "" && now.Sub(st.At) > statusLifetime {
		st.Status, st.LoadingMessages, st.Cleared = "", nil, "timeout"
		st.At = st.At.Add(statusLifetime)
		s.statusLog = append(s.statusLog, *st)
	}
}
