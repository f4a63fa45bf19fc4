package fakeslack

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

func (s *Server) wireUserRef(u *User) map[string]any {
	return map[string]any{"id": u.ID, "username": u.Name, "name": u.Name, "team_id": s.team.ID}
}

func (s *Server) wireTeam() map[string]any {
	return map[string]any{"id": s.team.ID, "domain": s.team.Domain}
}

// interactionBase is what every interaction payload carries.
func (s *Server) interactionBase(typ string, u *User, now time.Time) map[string]any {
	return map[string]any{
		"type":                  typ,
		"user":                  s.wireUserRef(u),
		"api_app_id":            s.bot.AppID,
		"token":                 s.opts.VerificationToken,
		"team":                  s.wireTeam(),
		"enterprise":            nil,
		"is_enterprise_install": false,
	}
}

// findElement finds the interactive element with actionID in blocks.
func findElement(blocks []json.RawMessage, actionID string) (blockID string, el map[string]any) {
	walkElements(blocks, func(id string, e map[string]any) {
		if a, _ := e["action_id"].(string); a == actionID && el == nil {
			blockID, el = id, e
		}
	})
	return blockID, el
}

// userAction renders what a user did to an element: pressed a button, or
// chose values in a menu.
func userAction(blockID string, el map[string]any, values []string, now time.Time) (map[string]any, error) {
	typ, _ := el["type"].(string)
	a := map[string]any{
		"type":      typ,
		"action_id": el["action_id"],
		"block_id":  blockID,
		"action_ts": formatTS(now.UnixMicro()),
	}
	one := func() (string, error) {
		if len(values) != 1 {
			return "", fmt.Errorf("%s takes one value, not %d", typ, len(values))
		}
		return values[0], nil
	}
	switch typ {
	case "button":
		if len(values) > 0 {
			return nil, fmt.Errorf("a button takes no value")
		}
		a["text"] = el["text"]
		if v, ok := el["value"]; ok {
			a["value"] = v
		}
		if st, ok := el["style"]; ok {
			a["style"] = st
		}
	case "static_select", "overflow", "radio_buttons":
		v, err := one()
		if err != nil {
			return nil, err
		}
		opt := findOption(el, v)
		if opt == nil {
			return nil, fmt.Errorf("%s has no option %q", typ, v)
		}
		a["selected_option"] = opt
	case "multi_static_select", "checkboxes":
		var opts []any
		for _, v := range values {
			opt := findOption(el, v)
			if opt == nil {
				return nil, fmt.Errorf("%s has no option %q", typ, v)
			}
			opts = append(opts, opt)
		}
		a["selected_options"] = opts
	case "users_select", "conversations_select", "channels_select", "datepicker", "timepicker":
		v, err := one()
		if err != nil {
			return nil, err
		}
		field := map[string]string{
			"users_select": "selected_user", "conversations_select": "selected_conversation",
			"channels_select": "selected_channel", "datepicker": "selected_date", "timepicker": "selected_time",
		}[typ]
		a[field] = v
	case "multi_users_select", "multi_conversations_select", "multi_channels_select":
		field := map[string]string{
			"multi_users_select": "selected_users", "multi_conversations_select": "selected_conversations",
			"multi_channels_select": "selected_channels",
		}[typ]
		a[field] = slices.Clone(values)
	default:
		return nil, fmt.Errorf("the fake cannot act on a %s", typ)
	}
	return a, nil
}

// findOption finds an option (or one in an option group) by value.
func findOption(el map[string]any, value string) map[string]any {
	var lists [][]any
	if opts, ok := el["options"].([]any); ok {
		lists = append(lists, opts)
	}
	if groups, ok := el["option_groups"].([]any); ok {
		for _, g := range groups {
			if gm, ok := g.(map[string]any); ok {
				if opts, ok := gm["options"].([]any); ok {
					lists = append(lists, opts)
				}
			}
		}
	}
	for _, l := range lists {
		for _, o := range l {
			if om, ok := o.(map[string]any); ok && om["value"] == value {
				return om
			}
		}
	}
	return nil
}

// ClickButton has userID press the button with actionID on a message
// (or on an ephemeral message shown to the user): the app gets a
// block_actions interaction with a fresh trigger_id and a response_url.
// It returns the envelope's id, or "" after reporting with tb.Errorf a
// message or button that is not there.
func (s *Server) ClickButton(channelID, ts, userID, actionID string) string {
	s.tb.Helper()
	return s.messageAction("ClickButton", channelID, ts, userID, actionID, nil)
}

// ChooseOption has userID choose values in the menu with actionID on a
// message: one value for a static select, overflow menu or radio
// buttons, any number for a multi-select or checkboxes; a user,
// conversation or channel id for those selects; a date for a date
// picker. It returns the envelope's id.
func (s *Server) ChooseOption(channelID, ts, userID, actionID string, values ...string) string {
	s.tb.Helper()
	if values == nil {
		values = []string{}
	}
	return s.messageAction("ChooseOption", channelID, ts, userID, actionID, values)
}

func (s *Server) messageAction(what, channelID, ts, userID, actionID string, values []string) string {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	ch := s.channels[channelID]
	if ch == nil {
		s.errorf("%s: unknown channel %s", what, channelID)
		return ""
	}
	u := s.userLocked(userID)
	var blocks []json.RawMessage
	var eph *Ephemeral
	m := s.messages[msgKey(channelID, ts)]
	if m != nil && !m.Deleted {
		blocks = m.Blocks
	} else {
		for _, e := range s.ephemerals {
			if e.Channel == channelID && e.TS == ts && e.User == userID && !e.Deleted {
				eph, blocks = e, e.Blocks
			}
		}
		if eph == nil {
			s.errorf("%s: no message %s in %s that %s sees", what, ts, channelID, userID)
			return ""
		}
	}
	blockID, el := findElement(blocks, actionID)
	if el == nil {
		s.errorf("%s: no element %q on message %s", what, actionID, ts)
		return ""
	}
	if (values == nil) != (el["type"] == "button") {
		s.errorf("%s: %q is a %v", what, actionID, el["type"])
		return ""
	}
	act, err := userAction(blockID, el, values, now)
	if err != nil {
		s.errorf("%s: %v", what, err)
		return ""
	}
	p := s.interactionBase("block_actions", u, now)
	container := map[string]any{"type": "message", "message_ts": ts, "channel_id": channelID, "is_ephemeral": eph != nil}
	rurl := &responseURL{channel: channelID, user: userID, messageTS: ts, ephemeral: eph != nil}
	if m != nil && eph == nil {
		if th := m.threadTS(); th != "" {
			container["thread_ts"] = th
			rurl.threadTS = th
		}
		p["message"] = s.wireMessageLocked(m)
	} else {
		rurl.threadTS = eph.ThreadTS
	}
	p["container"] = container
	p["channel"] = map[string]any{"id": ch.ID, "name": ch.Name}
	p["trigger_id"] = s.newTriggerLocked(userID, now)
	p["response_url"] = s.newResponseURLLocked(rurl, now)
	p["state"] = map[string]any{"values": map[string]any{}}
	p["actions"] = []any{act}
	e := s.newEnvelopeLocked(Interactive, "block_actions", "", p, now)
	return e.ID
}

// ClickViewButton has userID press a button in the modal they see: the
// app gets block_actions with the view and its state.
func (s *Server) ClickViewButton(viewID, userID, actionID string) string {
	s.tb.Helper()
	return s.viewAction("ClickViewButton", viewID, userID, actionID, nil)
}

// ChooseViewOption has userID choose in a menu of an actions or section
// block of the modal they see (with dispatch_action, an input's menu).
func (s *Server) ChooseViewOption(viewID, userID, actionID string, values ...string) string {
	s.tb.Helper()
	if values == nil {
		values = []string{}
	}
	return s.viewAction("ChooseViewOption", viewID, userID, actionID, values)
}

func (s *Server) viewAction(what, viewID, userID, actionID string, values []string) string {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	v := s.topViewLocked(what, viewID, userID)
	if v == nil {
		return ""
	}
	blockID, el := findElement(v.Blocks, actionID)
	if el == nil {
		s.errorf("%s: no element %q in view %s", what, actionID, viewID)
		return ""
	}
	act, err := userAction(blockID, el, values, now)
	if err != nil {
		s.errorf("%s: %v", what, err)
		return ""
	}
	p := s.interactionBase("block_actions", s.userLocked(userID), now)
	p["container"] = map[string]any{"type": "view", "view_id": v.ID}
	p["trigger_id"] = s.newTriggerLocked(userID, now)
	p["view"] = s.wireViewLocked(v, nil)
	p["actions"] = []any{act}
	return s.newEnvelopeLocked(Interactive, "block_actions", "", p, now).ID
}

// topViewLocked finds the view a user sees now, reporting with
// tb.Errorf when viewID is not it.
func (s *Server) topViewLocked(what, viewID, userID string) *view {
	s.tb.Helper()
	st := s.stacks[userID]
	if len(st) == 0 || st[len(st)-1] != viewID {
		s.errorf("%s: %s does not see view %s", what, userID, viewID)
		return nil
	}
	return s.views[viewID]
}

// inputValue renders a value typed or chosen in an input element for a
// view's state.
func inputValue(el map[string]any, given any) (map[string]any, error) {
	typ, _ := el["type"].(string)
	out := map[string]any{"type": typ}
	var list []string
	switch g := given.(type) {
	case nil:
	case string:
		list = []string{g}
	case []string:
		list = g
	default:
		return nil, fmt.Errorf("values are strings or []string, not %T", given)
	}
	switch typ {
	case "plain_text_input", "email_text_input", "url_text_input", "number_input", "rich_text_input":
		out["value"] = nil
		if len(list) > 0 {
			out["value"] = strings.Join(list, "")
		}
	case "static_select", "radio_buttons", "external_select":
		out["selected_option"] = nil
		if len(list) > 0 {
			opt := findOption(el, list[0])
			if opt == nil && typ != "external_select" {
				return nil, fmt.Errorf("%s has no option %q", typ, list[0])
			}
			if opt == nil {
				opt = map[string]any{"text": map[string]any{"type": "plain_text", "text": list[0]}, "value": list[0]}
			}
			out["selected_option"] = opt
		}
	case "multi_static_select", "checkboxes":
		opts := []any{}
		for _, v := range list {
			opt := findOption(el, v)
			if opt == nil {
				return nil, fmt.Errorf("%s has no option %q", typ, v)
			}
			opts = append(opts, opt)
		}
		out["selected_options"] = opts
	case "users_select", "conversations_select", "channels_select", "datepicker", "timepicker":
		field := map[string]string{
			"users_select": "selected_user", "conversations_select": "selected_conversation",
			"channels_select": "selected_channel", "datepicker": "selected_date", "timepicker": "selected_time",
		}[typ]
		out[field] = nil
		if len(list) > 0 {
			out[field] = list[0]
		}
	case "multi_users_select", "multi_conversations_select", "multi_channels_select":
		field := map[string]string{
			"multi_users_select": "selected_users", "multi_conversations_select": "selected_conversations",
			"multi_channels_select": "selected_channels",
		}[typ]
		out[field] = append([]string{}, list...)
	default:
		return nil, fmt.Errorf("the fake cannot fill a %s", typ)
	}
	return out, nil
}

// SubmitView has userID submit the modal they see, with values for its
// inputs keyed by action_id or block_id: a string for a text input or a
// single choice, a []string for several. Inputs not named are sent
// empty; a required one left empty is reported with tb.Errorf, as Slack's
// client would not submit. The app gets view_submission; its
// acknowledgement's response_action decides what follows: errors (shown,
// the view stays), update, push, clear (every view closes), or nothing
// (this view closes). It returns the envelope's id.
func (s *Server) SubmitView(viewID, userID string, values map[string]any) string {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	v := s.topViewLocked("SubmitView", viewID, userID)
	if v == nil {
		return ""
	}
	if v.Submit == "" {
		s.errorf("SubmitView: view %s has no submit button", viewID)
		return ""
	}
	state := map[string]any{}
	used := map[string]bool{}
	for _, b := range v.Blocks {
		var o map[string]any
		json.Unmarshal(b, &o)
		if o["type"] != "input" {
			continue
		}
		blockID, _ := o["block_id"].(string)
		el, _ := o["element"].(map[string]any)
		actionID, _ := el["action_id"].(string)
		given, ok := values[actionID]
		key := actionID
		if !ok {
			given, ok = values[blockID]
			key = blockID
		}
		if ok {
			used[key] = true
		}
		val, err := inputValue(el, given)
		if err != nil {
			s.errorf("SubmitView: %s: %v", key, err)
			return ""
		}
		if optional, _ := o["optional"].(bool); !optional && (given == nil || given == "" || fmt.Sprint(given) == "[]") {
			s.errorf("SubmitView: input %s is required", blockID)
			return ""
		}
		state[blockID] = map[string]any{actionID: val}
	}
	for k := range values {
		if !used[k] {
			s.errorf("SubmitView: view %s has no input %q", viewID, k)
			return ""
		}
	}
	p := s.interactionBase("view_submission", s.userLocked(userID), now)
	p["trigger_id"] = s.newTriggerLocked(userID, now)
	p["view"] = s.wireViewLocked(v, state)
	p["response_urls"] = []any{}
	e := s.newEnvelopeLocked(Interactive, "view_submission", "", p, now)
	e.onAck = func(payload json.RawMessage) string { return s.responseActionLocked(v, userID, payload) }
	return e.ID
}

// responseActionLocked does what a view_submission's acknowledgement
// says; it returns what Slack would refuse in it.
func (s *Server) responseActionLocked(v *view, user string, payload json.RawMessage) string {
	now := time.Now()
	var resp struct {
		Action string            `json:"response_action"`
		Errors map[string]string `json:"errors"`
		View   json.RawMessage   `json:"view"`
	}
	if p := strings.TrimSpace(string(payload)); p != "" && p != "null" && p != `""` {
		if err := json.Unmarshal(payload, &resp); err != nil {
			return "the acknowledgement's payload is not a response_action object"
		}
	}
	newView := func() (map[string]any, string) {
		var obj map[string]any
		if json.Unmarshal(resp.View, &obj) != nil || obj == nil {
			return nil, "response_action " + resp.Action + " without a view"
		}
		if problems := checkView(obj); len(problems) > 0 {
			return nil, "invalid view: " + problems[0].String()
		}
		return obj, ""
	}
	switch resp.Action {
	case "":
		s.closeViewsLocked(user, 1, "submitted", now)
	case "errors":
		if len(resp.Errors) == 0 {
			return "response_action errors without errors"
		}
		v.Errors = resp.Errors
	case "update":
		obj, bad := newView()
		if bad != "" {
			return bad
		}
		s.setViewLocked(v, obj, now)
		v.Updates++
	case "push":
		obj, bad := newView()
		if bad != "" {
			return bad
		}
		if len(s.stacks[user]) >= maxViewStack {
			return "push_limit_reached"
		}
		s.openViewLocked(user, obj, now)
	case "clear":
		s.closeViewsLocked(user, -1, "cleared", now)
	default:
		return "unknown response_action " + resp.Action
	}
	return ""
}

// CloseView has userID dismiss the modal they see: the view goes (every
// view, if it clears on close) and, if it asked to be told
// (notify_on_close), the app gets view_closed. It returns the
// envelope's id, or "" when none was sent.
func (s *Server) CloseView(viewID, userID string) string {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	v := s.topViewLocked("CloseView", viewID, userID)
	if v == nil {
		return ""
	}
	n := 1
	if v.ClearOnClose {
		n = -1
	}
	s.closeViewsLocked(userID, n, "closed", now)
	s.notifyLocked()
	if !v.NotifyOnClose {
		return ""
	}
	p := s.interactionBase("view_closed", s.userLocked(userID), now)
	p["view"] = s.wireViewLocked(v, nil)
	p["is_cleared"] = v.ClearOnClose
	return s.newEnvelopeLocked(Interactive, "view_closed", "", p, now).ID
}

// SlashCommand has userID type command (with its slash) and text in a
// conversation: the app gets the command with a trigger_id and a
// response_url. An acknowledgement with a payload ({"text": …,
// "response_type": "in_channel"}, or over HTTP a text body) is shown:
// ephemeral to the user, or in the channel. It returns the envelope's
// id.
func (s *Server) SlashCommand(channelID, userID, command, text string) string {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	ch := s.userChannelLocked("SlashCommand", channelID, userID)
	if ch == nil {
		return ""
	}
	if !strings.HasPrefix(command, "/") {
		s.errorf("SlashCommand: %q does not start with /", command)
		return ""
	}
	u := s.users[userID]
	p := map[string]string{
		"token":                 s.opts.VerificationToken,
		"team_id":               s.team.ID,
		"team_domain":           s.team.Domain,
		"channel_id":            ch.ID,
		"channel_name":          ch.Name,
		"user_id":               u.ID,
		"user_name":             u.Name,
		"command":               command,
		"text":                  text,
		"api_app_id":            s.bot.AppID,
		"is_enterprise_install": "false",
		"response_url":          s.newResponseURLLocked(&responseURL{channel: ch.ID, user: userID}, now),
		"trigger_id":            s.newTriggerLocked(userID, now),
	}
	if ch.Kind == IM {
		p["channel_name"] = "directmessage"
	}
	e := s.newEnvelopeLocked(SlashCommands, command, "", p, now)
	e.onAck = func(payload json.RawMessage) string { return s.commandAnswerLocked(ch, userID, payload) }
	return e.ID
}

// commandAnswerLocked shows the answer a slash command's acknowledgement
// carries.
func (s *Server) commandAnswerLocked(ch *channel, userID string, payload json.RawMessage) string {
	p := strings.TrimSpace(string(payload))
	if p == "" || p == "null" || p == `""` {
		return ""
	}
	var msg struct {
		Text         string            `json:"text"`
		Blocks       []json.RawMessage `json:"blocks"`
		ResponseType string            `json:"response_type"`
	}
	var str string
	if json.Unmarshal(payload, &str) == nil {
		msg.Text = str
	} else if err := json.Unmarshal(payload, &msg); err != nil {
		return "the acknowledgement's payload is not a message"
	}
	return s.showLocked(ch, userID, "", msg.Text, msg.Blocks, msg.ResponseType == "in_channel", "ack", time.Now())
}

// showLocked posts an answer to a user's action: in the channel as the
// bot, or ephemeral to the user. It returns what Slack would refuse.
func (s *Server) showLocked(ch *channel, userID, threadTS, text string, rawBlocks []json.RawMessage, inChannel bool, via string, now time.Time) string {
	var blocks []json.RawMessage
	if rawBlocks != nil {
		raw, _ := json.Marshal(rawBlocks)
		var problems []problem
		var ok bool
		blocks, problems, ok = checkBlocks(raw, "/blocks", 50, surfMessage)
		if !ok || len(problems) > 0 {
			return "invalid_blocks"
		}
		blocks = withBlockIDs(blocks)
	}
	if text == "" && len(blocks) == 0 {
		return "no_text"
	}
	if chars(text) > s.opts.MaxTextLength {
		return "msg_too_long"
	}
	if inChannel {
		m := s.botMessageLocked(ch, content{text: text, blocks: blocks}, now)
		if threadTS != "" {
			m.parent = s.parentLocked(ch, threadTS)
		}
		s.addMessageLocked(ch, m, via)
		s.botPostedLocked(ch, m)
		return ""
	}
	s.ephemerals = append(s.ephemerals, &Ephemeral{
		Channel: ch.ID, User: userID, TS: s.newTSLocked(now), ThreadTS: threadTS,
		Text: text, Blocks: blocks, Posted: now, Via: via,
	})
	return ""
}
