package fakediscord

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode"
)

// ---- application commands ----

// cmdScope checks the application and guild of a command route and
// returns the guild ("" for global commands).
func (s *Server) cmdScope(c *call) (string, int, any, bool) {
	if c.p("application_id") != s.appID {
		st, b := apiError(403, 50001, "Missing Access")
		return "", st, b, false
	}
	g := c.p("guild_id")
	if _, ok := s.guilds[g]; g != "" && !ok {
		st, b := apiError(403, 50001, "Missing Access")
		return "", st, b, false
	}
	return g, 0, nil, true
}

func validCommandName(name string, chatInput bool) bool {
	n := 0
	for _, r := range name {
		n++
		if !chatInput {
			continue
		}
		if unicode.IsUpper(r) || !(unicode.IsLetter(r) || unicode.IsNumber(r) || r == '-' || r == '_' || r == '\'') {
			return false
		}
	}
	return n >= 1 && n <= 32
}

// parseCommandOptions validates and converts option definitions.
func parseCommandOptions(raw []json.RawMessage, field string) ([]CommandOption, string, string) {
	if len(raw) > 25 {
		return nil, field, "Must be 25 or fewer in length."
	}
	var out []CommandOption
	optional := false
	for i, r := range raw {
		o := object(r)
		f := field + "." + strconv.Itoa(i)
		opt := CommandOption{Name: str(o, "name"), Type: integer(o, "type")}
		json.Unmarshal(o["required"], &opt.Required)
		json.Unmarshal(o["autocomplete"], &opt.Autocomplete)
		if opt.Autocomplete && opt.Type != 3 && opt.Type != 4 && opt.Type != 10 {
			return nil, f + ".autocomplete", "Autocomplete can only be enabled for string, integer and number options."
		}
		if opt.Autocomplete && len(raws(o, "choices")) > 0 {
			return nil, f + ".autocomplete", "Autocomplete cannot be enabled on options with choices."
		}
		if opt.Type < 1 || opt.Type > 11 {
			return nil, f + ".type", "Value must be one of {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}."
		}
		if !validCommandName(opt.Name, true) {
			return nil, f + ".name", "Command name is invalid"
		}
		if n := len([]rune(str(o, "description"))); n < 1 || n > 100 {
			return nil, f + ".description", "Must be between 1 and 100 in length."
		}
		if opt.Required && optional {
			return nil, f + ".required", "Required options must be placed before non-required options"
		}
		optional = optional || !opt.Required
		if opt.Type == 1 || opt.Type == 2 {
			sub, sf, msg := parseCommandOptions(raws(o, "options"), f+".options")
			if msg != "" {
				return nil, sf, msg
			}
			opt.Options = sub
		}
		out = append(out, opt)
	}
	return out, "", ""
}

// buildCommandLocked validates a command body and renders the command
// as stored; old, if not nil, is the command it replaces.
func (s *Server) buildCommandLocked(raw json.RawMessage, field, guildID string, old *Command) (*Command, int, any) {
	o := object(raw)
	var generic map[string]any
	if o == nil || json.Unmarshal(raw, &generic) != nil {
		st, b := formError(field, "MODEL_TYPE_CONVERT", "Only dictionaries may be used in a ModelType")
		return nil, st, b
	}
	if field != "" {
		field += "."
	}
	cmd := &Command{ApplicationID: s.appID, GuildID: guildID, Name: str(o, "name"), Description: str(o, "description"), Type: integer(o, "type")}
	if cmd.Type == 0 {
		cmd.Type = 1
	}
	if cmd.Type < 1 || cmd.Type > 4 {
		st, b := formError(field+"type", "BASE_TYPE_CHOICES", "Value must be one of {1, 2, 3, 4}.")
		return nil, st, b
	}
	if !validCommandName(cmd.Name, cmd.Type == 1) {
		st, b := formError(field+"name", "APPLICATION_COMMAND_INVALID_NAME", "Command name is invalid")
		return nil, st, b
	}
	n := len([]rune(cmd.Description))
	if cmd.Type == 1 && (n < 1 || n > 100) {
		st, b := formError(field+"description", "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length.")
		return nil, st, b
	}
	if cmd.Type != 1 && n != 0 {
		st, b := formError(field+"description", "APPLICATION_COMMAND_INVALID_DESCRIPTION", "Context menu commands cannot have description")
		return nil, st, b
	}
	opts, of, msg := parseCommandOptions(raws(o, "options"), field+"options")
	if msg != "" {
		st, b := formError(of, "APPLICATION_COMMAND_OPTIONS_INVALID", msg)
		return nil, st, b
	}
	cmd.Options = opts
	cmd.ID = s.newIDLocked()
	if old != nil {
		cmd.ID = old.ID
	}
	cmd.Version = s.newIDLocked()
	generic["id"] = cmd.ID
	generic["application_id"] = s.appID
	generic["version"] = cmd.Version
	generic["type"] = cmd.Type
	generic["description"] = cmd.Description
	if _, ok := generic["default_member_permissions"]; !ok {
		generic["default_member_permissions"] = nil
	}
	if _, ok := generic["nsfw"]; !ok {
		generic["nsfw"] = false
	}
	if _, ok := generic["options"]; !ok || generic["options"] == nil {
		delete(generic, "options")
	}
	if guildID != "" {
		generic["guild_id"] = guildID
	}
	cmd.JSON = mustJSON(generic)
	return cmd, 0, nil
}

func (s *Server) findCommandLocked(guildID, name string, typ int) *Command {
	for _, c := range s.commands {
		if c.GuildID == guildID && c.Name == name && c.Type == typ {
			return c
		}
	}
	return nil
}

func (s *Server) getCommands(c *call) (int, any) {
	g, st, b, ok := s.cmdScope(c)
	if !ok {
		return st, b
	}
	out := []json.RawMessage{}
	for _, cmd := range s.commands {
		if cmd.GuildID == g {
			out = append(out, cmd.JSON)
		}
	}
	return 200, out
}

func (s *Server) overwriteCommands(c *call) (int, any) {
	g, st, b, ok := s.cmdScope(c)
	if !ok {
		return st, b
	}
	if c.arr == nil {
		return formError("", "BASE_TYPE_ARRAY", "Must be an array.")
	}
	if len(c.arr) > 100 {
		return formError("", "BASE_TYPE_MAX_LENGTH", "Must be 100 or fewer in length.")
	}
	var made []*Command
	for i, raw := range c.arr {
		o := object(raw)
		typ := integer(o, "type")
		if typ == 0 {
			typ = 1
		}
		for _, m := range made {
			if m.Name == str(o, "name") && m.Type == typ {
				return formError(strconv.Itoa(i)+".name", "APPLICATION_COMMANDS_DUPLICATE_NAME", "Application command names must be unique")
			}
		}
		cmd, st, b := s.buildCommandLocked(raw, strconv.Itoa(i), g, s.findCommandLocked(g, str(o, "name"), typ))
		if cmd == nil {
			return st, b
		}
		made = append(made, cmd)
	}
	s.commands = slices.DeleteFunc(s.commands, func(c *Command) bool { return c.GuildID == g })
	s.commands = append(s.commands, made...)
	out := []json.RawMessage{}
	for _, cmd := range made {
		out = append(out, cmd.JSON)
	}
	return 200, out
}

func (s *Server) createCommand(c *call) (int, any) {
	g, st, b, ok := s.cmdScope(c)
	if !ok {
		return st, b
	}
	raw := json.RawMessage(c.req.Body)
	if c.obj == nil {
		raw = nil
	}
	typ := integer(c.obj, "type")
	if typ == 0 {
		typ = 1
	}
	old := s.findCommandLocked(g, str(c.obj, "name"), typ)
	cmd, st, b := s.buildCommandLocked(raw, "", g, old)
	if cmd == nil {
		return st, b
	}
	if old != nil {
		*old = *cmd
		return 200, cmd.JSON
	}
	s.commands = append(s.commands, cmd)
	return http.StatusCreated, cmd.JSON
}

func (s *Server) deleteCommand(c *call) (int, any) {
	g, st, b, ok := s.cmdScope(c)
	if !ok {
		return st, b
	}
	n := len(s.commands)
	s.commands = slices.DeleteFunc(s.commands, func(cmd *Command) bool { return cmd.GuildID == g && cmd.ID == c.p("command_id") })
	if len(s.commands) == n {
		return apiError(404, 10063, "Unknown application command")
	}
	return http.StatusNoContent, nil
}

// ---- interactions: the user's side ----

// SlashCommand has userID invoke the chat-input command name in
// channelID and returns the interaction's id. The command must be
// registered, for the channel's guild or globally; options are checked
// against its definition (required ones present, no unknown ones) and
// typed by it: strings for string, user, channel, role and mentionable
// options, Go numbers for integer and number ones, bools, and
// map[string]any for a subcommand's or group's own options. Misuse is
// reported with tb.Errorf and returns "".
func (s *Server) SlashCommand(channelID, userID, name string, options map[string]any) string {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.channels[channelID]
	if ch == nil {
		s.errorf("SlashCommand: unknown channel %s", channelID)
		return ""
	}
	cmd := s.findCommandLocked(ch.GuildID, name, 1)
	if cmd == nil {
		cmd = s.findCommandLocked("", name, 1)
	}
	if cmd == nil {
		s.errorf("SlashCommand: /%s is not registered", name)
		return ""
	}
	resolved := map[string]map[string]any{}
	opts, err := s.commandOptionsLocked(ch, cmd.Options, options, resolved)
	if err != nil {
		s.errorf("SlashCommand /%s: %v", name, err)
		return ""
	}
	data := map[string]any{"id": cmd.ID, "name": cmd.Name, "type": cmd.Type}
	if len(opts) > 0 {
		data["options"] = opts
	}
	if cmd.GuildID != "" {
		data["guild_id"] = cmd.GuildID
	}
	if len(resolved) > 0 {
		data["resolved"] = resolved
	}
	in := s.newInteractionLocked(2, ch, userID, data, nil)
	in.Name = name
	return in.ID
}

func (s *Server) commandOptionsLocked(ch *Channel, defs []CommandOption, given map[string]any, resolved map[string]map[string]any) ([]any, error) {
	for k := range given {
		if !slices.ContainsFunc(defs, func(d CommandOption) bool { return d.Name == k }) {
			return nil, fmt.Errorf("no option %q", k)
		}
	}
	out := []any{}
	for _, d := range defs {
		v, ok := given[d.Name]
		if !ok {
			if d.Required {
				return nil, fmt.Errorf("required option %q missing", d.Name)
			}
			continue
		}
		o := map[string]any{"name": d.Name, "type": d.Type}
		switch d.Type {
		case 1, 2:
			sub, _ := v.(map[string]any)
			if v != nil && sub == nil {
				return nil, fmt.Errorf("option %q: want map[string]any, got %T", d.Name, v)
			}
			nested, err := s.commandOptionsLocked(ch, d.Options, sub, resolved)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", d.Name, err)
			}
			o["options"] = nested
		case 3, 6, 7, 8, 9:
			id, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("option %q: want string, got %T", d.Name, v)
			}
			o["value"] = id
			s.resolveLocked(ch, d.Type, id, resolved)
		case 4, 10:
			f, ok := toFloat(v)
			if !ok || d.Type == 4 && f != math.Trunc(f) {
				return nil, fmt.Errorf("option %q: want a number, got %v", d.Name, v)
			}
			o["value"] = f
		case 5:
			b, ok := v.(bool)
			if !ok {
				return nil, fmt.Errorf("option %q: want bool, got %T", d.Name, v)
			}
			o["value"] = b
		default:
			return nil, fmt.Errorf("option %q: type %d is not supported by the fake", d.Name, d.Type)
		}
		out = append(out, o)
	}
	return out, nil
}

func (s *Server) resolveLocked(ch *Channel, typ int, id string, resolved map[string]map[string]any) {
	add := func(kind string, v any) {
		if resolved[kind] == nil {
			resolved[kind] = map[string]any{}
		}
		resolved[kind][id] = v
	}
	switch typ {
	case 6, 9:
		if u, ok := s.users[id]; ok {
			add("users", s.wireUser(*u))
			if g, ok := s.guilds[ch.GuildID]; ok {
				if _, ok := g.members[id]; ok {
					add("members", s.wireMemberLocked(g, id, false, true))
				}
			}
		}
	case 7:
		if c, ok := s.channels[id]; ok {
			add("channels", map[string]any{"id": c.ID, "name": c.Name, "type": c.Type, "permissions": allPermissions})
		}
	}
}

func toFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case float64:
		return n, true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

// ClickButton has userID click the button customID on a message and
// returns the interaction's id. The message must carry that button,
// enabled. Misuse is reported with tb.Errorf and returns "".
func (s *Server) ClickButton(channelID, messageID, userID, customID string) string {
	s.tb.Helper()
	return s.component(channelID, messageID, userID, customID, nil, true)
}

// TryClickButton is ClickButton for a user who may click too late: when
// the message no longer carries that button enabled (the bot closed it
// meanwhile), no interaction is made and the error says why.
func (s *Server) TryClickButton(channelID, messageID, userID, customID string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.componentLocked(channelID, messageID, userID, customID, nil, true)
}

// SelectMenu has userID choose values in the select menu customID on a
// message and returns the interaction's id.
func (s *Server) SelectMenu(channelID, messageID, userID, customID string, values ...string) string {
	s.tb.Helper()
	return s.component(channelID, messageID, userID, customID, values, false)
}

// Click is one user's click on a button, for ClickTogether.
type Click struct{ UserID, CustomID string }

// ClickTogether has several users click buttons of one message at the
// same moment: every click is checked against the message as it is now
// and dispatched, before the bot can answer any of them (as when people
// click before Discord has shown them the bot's edit). It returns the
// interactions' ids, in order.
func (s *Server) ClickTogether(channelID, messageID string, clicks ...Click) []string {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, len(clicks))
	for i, c := range clicks {
		id, err := s.componentLocked(channelID, messageID, c.UserID, c.CustomID, nil, true)
		if err != nil {
			s.errorf("%v", err)
		}
		ids[i] = id
	}
	return ids
}

func (s *Server) component(channelID, messageID, userID, customID string, values []string, button bool) string {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	id, err := s.componentLocked(channelID, messageID, userID, customID, values, button)
	if err != nil {
		s.errorf("%v", err)
	}
	return id
}

func (s *Server) componentLocked(channelID, messageID, userID, customID string, values []string, button bool) (string, error) {
	ch := s.channels[channelID]
	m := s.messages[messageID]
	if ch == nil || m == nil || m.ChannelID != channelID || m.Deleted {
		return "", fmt.Errorf("no message %s in channel %s to interact with", messageID, channelID)
	}
	typ := m.findComponent(customID)
	switch {
	case typ == 0:
		return "", fmt.Errorf("message %s has no component %q (it has %q)", messageID, customID, m.CustomIDs())
	case button && typ != 2:
		return "", fmt.Errorf("component %q is type %d, not a button", customID, typ)
	case !button && (typ < 3 || typ == 4 || typ > 8):
		return "", fmt.Errorf("component %q is type %d, not a select menu", customID, typ)
	}
	if button {
		for _, b := range m.Buttons() {
			if b.CustomID == customID && b.Disabled {
				return "", fmt.Errorf("button %q is disabled", customID)
			}
		}
	}
	if !button {
		if err := checkSelect(m, customID, values); err != nil {
			return "", err
		}
	}
	data := map[string]any{"custom_id": customID, "component_type": typ}
	if !button {
		data["values"] = emptyIfNil(values)
	}
	in := s.newInteractionLocked(3, ch, userID, data, m)
	in.CustomID = customID
	in.Values = slices.Clone(values)
	in.MessageID = m.ID
	return in.ID, nil
}

func (s *Server) newInteractionLocked(typ int, ch *Channel, userID string, data map[string]any, m *message) *interaction {
	s.userByIDLocked(userID)
	g := s.guildLocked(ch.GuildID)
	s.memberLocked(g, userID)
	in := &interaction{Interaction: Interaction{
		ID:           s.newIDLocked(),
		Token:        "fake-" + randomHex(32),
		Type:         typ,
		ChannelID:    ch.ID,
		GuildID:      ch.GuildID,
		UserID:       userID,
		DispatchedAt: time.Now(),
	}}
	s.interactions[in.ID] = in
	s.byToken[in.Token] = in
	chw := s.wireChannelLocked(ch, true)
	chw["permissions"] = allPermissions
	payload := map[string]any{
		"id":                             in.ID,
		"application_id":                 s.appID,
		"type":                           typ,
		"data":                           data,
		"guild_id":                       ch.GuildID,
		"channel_id":                     ch.ID,
		"channel":                        chw,
		"member":                         s.wireMemberLocked(g, userID, true, true),
		"token":                          in.Token,
		"version":                        1,
		"locale":                         "en-US",
		"guild_locale":                   "en-US",
		"app_permissions":                allPermissions,
		"entitlements":                   []any{},
		"authorizing_integration_owners": map[string]any{"0": ch.GuildID},
		"context":                        0,
		"attachment_size_limit":          s.opts.MaxUploadBytes,
	}
	if m != nil {
		payload["message"] = s.wireMessageLocked(m, false)
	}
	if !s.dispatchLocked("INTERACTION_CREATE", 0, func(*gwSession) any { return payload }) {
		s.stats.Undelivered++
	}
	s.notifyLocked()
	return in
}

// ---- interactions: the bot's side ----

const responseFlags = FlagSuppressEmbeds | FlagEphemeral | 1<<12 | FlagComponentsV2

func (s *Server) interactionCallback(c *call) (int, any) {
	in := s.interactions[c.p("interaction_id")]
	if in == nil || in.Token != c.p("interaction_token") {
		return apiError(404, 10062, "Unknown interaction")
	}
	data := object(c.obj["data"])
	resp := InteractionResponse{
		Type:    integer(c.obj, "type"),
		Content: str(data, "content"),
		Flags:   integer(data, "flags"),
		Data:    c.obj["data"],
		Files:   c.files,
		At:      c.now,
		Latency: c.now.Sub(in.DispatchedAt),
	}
	status, body := s.respondLocked(c, in, &resp, data)
	resp.Status = status
	in.Responses = append(in.Responses, resp)
	return status, body
}

func (s *Server) respondLocked(c *call, in *interaction, resp *InteractionResponse, data map[string]json.RawMessage) (int, any) {
	if resp.Latency > s.opts.InteractionDeadline {
		resp.Late = true
		return apiError(404, 10062, "Unknown interaction")
	}
	if in.answered {
		return apiError(400, 40060, "Interaction has already been acknowledged.")
	}
	ch := s.channels[in.ChannelID]
	input := parseMsgInput(data)
	if (in.Type == 4) != (resp.Type == 8) {
		return formError("type", "INTERACTION_RESPONSE_TYPE_INVALID", "Autocomplete interactions take an autocomplete result, and only they do.")
	}
	switch resp.Type {
	case 8:
		if st, b, ok := checkAutocompleteResult(data); !ok {
			return st, b
		}
	case 4, 5:
		if resp.Type == 5 {
			input = msgInput{flags: input.flags & FlagEphemeral}
		}
		m, st, b := s.newBotMessageOrLoadingLocked(c, ch, input, resp.Type == 5)
		if m == nil {
			return st, b
		}
		m.WebhookID = s.appID
		m.InteractionID = in.ID
		if in.Type == 2 {
			m.Type = 20
		}
		s.addMessageLocked(m)
		in.OriginalMessageID = m.ID
		in.deferred = resp.Type == 5
	case 6, 7:
		// A modal opened from a component may update that component's
		// message too.
		if in.Type != 3 && (in.Type != 5 || in.MessageID == "") {
			return formError("type", "INTERACTION_RESPONSE_TYPE_INVALID", "This response type is only valid for message component interactions.")
		}
		m := s.messages[in.MessageID]
		if m == nil || m.Deleted {
			return unknownMessage()
		}
		if resp.Type == 7 {
			if st, b, ok := s.applyEditLocked(c, m, input); !ok {
				return st, b
			}
		}
		in.OriginalMessageID = m.ID
	case 9:
		if in.Type != 2 && in.Type != 3 {
			return formError("type", "INTERACTION_RESPONSE_TYPE_INVALID", "A modal can only answer a command or a component.")
		}
		modal, st, b, ok := parseModal(data)
		if !ok {
			return st, b
		}
		in.modal = modal
	default:
		return formError("type", "INTERACTION_RESPONSE_TYPE_INVALID", "Invalid interaction response type.")
	}
	in.answered = true
	return http.StatusNoContent, nil
}

// newBotMessageOrLoadingLocked makes an interaction response message;
// loading makes the empty "thinking" message of a deferred response.
func (s *Server) newBotMessageOrLoadingLocked(c *call, ch *Channel, in msgInput, loading bool) (*message, int, any) {
	if !loading {
		return s.newBotMessageLocked(c, ch, in, responseFlags)
	}
	m := &message{Message: Message{
		ID:        s.newIDLocked(),
		ChannelID: ch.ID,
		GuildID:   ch.GuildID,
		Author:    s.bot,
		Flags:     FlagLoading | in.flags&FlagEphemeral,
		Created:   c.now,
	}}
	return m, 0, nil
}

// webhookInteraction resolves the application and token of a webhook
// route to the interaction.
func (s *Server) webhookInteraction(c *call) (*interaction, int, any) {
	in := s.byToken[c.p("interaction_token")]
	if c.p("application_id") != s.appID || in == nil {
		st, b := apiError(404, 10015, "Unknown Webhook")
		return nil, st, b
	}
	return in, 0, nil
}

// webhookMessage returns the message a webhook route names: @original or
// one of the interaction's follow-ups.
func (s *Server) webhookMessage(c *call) (*interaction, *message, int, any) {
	in, st, b := s.webhookInteraction(c)
	if in == nil {
		return nil, nil, st, b
	}
	id := c.p("message_id")
	if id == "" {
		id = in.OriginalMessageID
	} else if id != in.OriginalMessageID && !slices.Contains(in.FollowupIDs, id) {
		id = ""
	}
	m := s.messages[id]
	if id == "" || m == nil || m.Deleted {
		st, b := unknownMessage()
		return nil, nil, st, b
	}
	return in, m, 0, nil
}

func (s *Server) getWebhookMessage(c *call) (int, any) {
	_, m, st, b := s.webhookMessage(c)
	if m == nil {
		return st, b
	}
	return 200, s.wireMessageLocked(m, false)
}

func (s *Server) editWebhookMessage(c *call) (int, any) {
	in, m, st, b := s.webhookMessage(c)
	if m == nil {
		return st, b
	}
	if st, b, ok := s.applyEditLocked(c, m, parseMsgInput(c.obj)); !ok {
		return st, b
	}
	if m.ID == in.OriginalMessageID {
		in.deferred = false
	}
	return 200, s.wireMessageLocked(m, false)
}

func (s *Server) deleteWebhookMessage(c *call) (int, any) {
	_, m, st, b := s.webhookMessage(c)
	if m == nil {
		return st, b
	}
	s.deleteMessageLocked(m)
	return http.StatusNoContent, nil
}

func (s *Server) createFollowup(c *call) (int, any) {
	in, st, b := s.webhookInteraction(c)
	if in == nil {
		return st, b
	}
	if !in.answered {
		return apiError(404, 10015, "Unknown Webhook")
	}
	input := parseMsgInput(c.obj)
	if m := s.messages[in.OriginalMessageID]; in.deferred && m != nil && !m.Deleted {
		// The first follow-up after a deferred response fills the
		// "thinking" message.
		if st, b, ok := s.applyEditLocked(c, m, input); !ok {
			return st, b
		}
		in.deferred = false
		return 200, s.wireMessageLocked(m, false)
	}
	m, st, b := s.newBotMessageLocked(c, s.channels[in.ChannelID], input, responseFlags)
	if m == nil {
		return st, b
	}
	m.WebhookID = s.appID
	m.InteractionID = in.ID
	s.addMessageLocked(m)
	in.FollowupIDs = append(in.FollowupIDs, m.ID)
	return 200, s.wireMessageLocked(m, false)
}
