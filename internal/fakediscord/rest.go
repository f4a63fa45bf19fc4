package fakediscord

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"acpbroker/internal/fakehttp"
)

// Route keys: the method and the path template of each REST route the
// fake serves. They name routes in Request.Route, Options.RateLimits and
// OnRoute.
const (
	RouteGateway                = "GET /gateway"
	RouteGatewayBot             = "GET /gateway/bot"
	RouteGetCurrentUser         = "GET /users/@me"
	RouteGetUser                = "GET /users/{user_id}"
	RouteGetChannel             = "GET /channels/{channel_id}"
	RouteModifyChannel          = "PATCH /channels/{channel_id}"
	RouteListMessages           = "GET /channels/{channel_id}/messages"
	RouteGetMessage             = "GET /channels/{channel_id}/messages/{message_id}"
	RouteCreateMessage          = "POST /channels/{channel_id}/messages"
	RouteEditMessage            = "PATCH /channels/{channel_id}/messages/{message_id}"
	RouteDeleteMessage          = "DELETE /channels/{channel_id}/messages/{message_id}"
	RouteStartThreadFromMessage = "POST /channels/{channel_id}/messages/{message_id}/threads"
	RouteStartThread            = "POST /channels/{channel_id}/threads"
	RouteJoinThread             = "PUT /channels/{channel_id}/thread-members/@me"
	RouteTyping                 = "POST /channels/{channel_id}/typing"
	RouteAddReaction            = "PUT /channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me"
	RouteDeleteOwnReaction      = "DELETE /channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me"
	RouteDeleteUserReaction     = "DELETE /channels/{channel_id}/messages/{message_id}/reactions/{emoji}/{user_id}"
	RouteGetReactions           = "GET /channels/{channel_id}/messages/{message_id}/reactions/{emoji}"
	RouteGetMember              = "GET /guilds/{guild_id}/members/{user_id}"
	RouteGuildChannels          = "GET /guilds/{guild_id}/channels"
	RouteActiveThreads          = "GET /guilds/{guild_id}/threads/active"
	RouteGetGlobalCommands      = "GET /applications/{application_id}/commands"
	RouteOverwriteGlobalCmds    = "PUT /applications/{application_id}/commands"
	RouteCreateGlobalCommand    = "POST /applications/{application_id}/commands"
	RouteDeleteGlobalCommand    = "DELETE /applications/{application_id}/commands/{command_id}"
	RouteGetGuildCommands       = "GET /applications/{application_id}/guilds/{guild_id}/commands"
	RouteOverwriteGuildCmds     = "PUT /applications/{application_id}/guilds/{guild_id}/commands"
	RouteCreateGuildCommand     = "POST /applications/{application_id}/guilds/{guild_id}/commands"
	RouteDeleteGuildCommand     = "DELETE /applications/{application_id}/guilds/{guild_id}/commands/{command_id}"
	RouteInteractionCallback    = "POST /interactions/{interaction_id}/{interaction_token}/callback"
	RouteGetOriginal            = "GET /webhooks/{application_id}/{interaction_token}/messages/@original"
	RouteEditOriginal           = "PATCH /webhooks/{application_id}/{interaction_token}/messages/@original"
	RouteDeleteOriginal         = "DELETE /webhooks/{application_id}/{interaction_token}/messages/@original"
	RouteCreateFollowup         = "POST /webhooks/{application_id}/{interaction_token}"
	RouteGetFollowup            = "GET /webhooks/{application_id}/{interaction_token}/messages/{message_id}"
	RouteEditFollowup           = "PATCH /webhooks/{application_id}/{interaction_token}/messages/{message_id}"
	RouteDeleteFollowup         = "DELETE /webhooks/{application_id}/{interaction_token}/messages/{message_id}"
)

type handler func(*call) (int, any)

type route struct {
	key    string
	method string
	segs   []string
	noAuth bool
	h      handler
}

// routes lists the routes; the first match wins, so literal segments
// (@me, @original) come before the parameters they would also match.
func (s *Server) routes() []route {
	defs := []struct {
		key    string
		noAuth bool
		h      handler
	}{
		{RouteGateway, true, s.getGateway},
		{RouteGatewayBot, false, s.getGatewayBot},
		{RouteGetCurrentUser, false, s.getCurrentUser},
		{RouteGetUser, false, s.getUser},
		{RouteGetChannel, false, s.getChannel},
		{RouteModifyChannel, false, s.modifyChannel},
		{RouteListMessages, false, s.listMessages},
		{RouteGetMessage, false, s.getMessage},
		{RouteCreateMessage, false, s.createMessage},
		{RouteEditMessage, false, s.editMessage},
		{RouteDeleteMessage, false, s.deleteMessage},
		{RouteStartThreadFromMessage, false, s.startThreadFromMessage},
		{RouteStartThread, false, s.startThread},
		{RouteJoinThread, false, s.joinThread},
		{RouteTyping, false, s.typingRoute},
		{RouteAddReaction, false, s.addOwnReaction},
		{RouteDeleteOwnReaction, false, s.deleteReaction},
		{RouteDeleteUserReaction, false, s.deleteReaction},
		{RouteGetReactions, false, s.getReactions},
		{RouteGetMember, false, s.getMember},
		{RouteGuildChannels, false, s.guildChannels},
		{RouteActiveThreads, false, s.activeThreads},
		{RouteGetGlobalCommands, false, s.getCommands},
		{RouteOverwriteGlobalCmds, false, s.overwriteCommands},
		{RouteCreateGlobalCommand, false, s.createCommand},
		{RouteDeleteGlobalCommand, false, s.deleteCommand},
		{RouteGetGuildCommands, false, s.getCommands},
		{RouteOverwriteGuildCmds, false, s.overwriteCommands},
		{RouteCreateGuildCommand, false, s.createCommand},
		{RouteDeleteGuildCommand, false, s.deleteCommand},
		{RouteInteractionCallback, true, s.interactionCallback},
		{RouteGetOriginal, true, s.getWebhookMessage},
		{RouteEditOriginal, true, s.editWebhookMessage},
		{RouteDeleteOriginal, true, s.deleteWebhookMessage},
		{RouteCreateFollowup, true, s.createFollowup},
		{RouteGetFollowup, true, s.getWebhookMessage},
		{RouteEditFollowup, true, s.editWebhookMessage},
		{RouteDeleteFollowup, true, s.deleteWebhookMessage},
	}
	out := make([]route, len(defs))
	for i, d := range defs {
		method, p, _ := strings.Cut(d.key, " ")
		out[i] = route{key: d.key, method: method, segs: strings.Split(strings.TrimPrefix(p, "/"), "/"), noAuth: d.noAuth, h: d.h}
	}
	return out
}

// match finds the route for a method and path; wrongMethod is set when
// the path matches a route of another method.
func (s *Server) match(method string, segs []string) (rt *route, params map[string]string, wrongMethod bool) {
	for i := range s.routeTable {
		r := &s.routeTable[i]
		if len(r.segs) != len(segs) {
			continue
		}
		p := map[string]string{}
		ok := true
		for j, pat := range r.segs {
			if strings.HasPrefix(pat, "{") {
				if segs[j] == "" {
					ok = false
					break
				}
				p[strings.Trim(pat, "{}")] = segs[j]
			} else if pat != segs[j] {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		if r.method != method {
			wrongMethod = true
			continue
		}
		return r, p, false
	}
	return nil, nil, wrongMethod
}

// call is one REST request being handled, under the Server's lock.
type call struct {
	s      *Server
	req    *Request
	params map[string]string
	query  url.Values
	header http.Header
	stall  time.Duration              // hold the answer this long
	drop   bool                       // cut the connection, no answer
	obj    map[string]json.RawMessage // the body, if a JSON object
	arr    []json.RawMessage          // the body, if a JSON array
	files  []File
	now    time.Time
}

func (c *call) p(name string) string { return c.params[name] }

func apiError(status, code int, msg string) (int, any) {
	return status, map[string]any{"message": msg, "code": code}
}

// formError is Discord's 50035 Invalid Form Body with one field error;
// field is a dotted path such as "content" or "embeds.0.title".
func formError(field, code, msg string) (int, any) {
	var errs any = map[string]any{"_errors": []any{map[string]any{"code": code, "message": msg}}}
	parts := strings.Split(field, ".")
	for i := len(parts) - 1; i >= 0; i-- {
		errs = map[string]any{parts[i]: errs}
	}
	return http.StatusBadRequest, map[string]any{"message": "Invalid Form Body", "code": 50035, "errors": errs}
}

func unknownChannel() (int, any) { return apiError(404, 10003, "Unknown Channel") }
func unknownMessage() (int, any) { return apiError(404, 10008, "Unknown Message") }

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	escaped := r.URL.EscapedPath()
	rest, versionOK := strings.CutPrefix(escaped, "/api/v9/")
	if !versionOK {
		rest, versionOK = strings.CutPrefix(escaped, "/api/v10/")
	}
	limit := s.opts.MaxUploadBytes + 1<<20
	raw, _ := io.ReadAll(io.LimitReader(r.Body, limit+1))
	tooBig := int64(len(raw)) > limit

	segs := strings.Split(rest, "/")
	for i, seg := range segs {
		if u, err := url.PathUnescape(seg); err == nil {
			segs[i] = u
		}
	}
	req := Request{
		At:          now,
		Method:      r.Method,
		Path:        "/" + strings.Join(segs, "/"),
		Query:       r.URL.RawQuery,
		ContentType: r.Header.Get("Content-Type"),
		Body:        raw,
	}
	if !versionOK {
		req.Path = r.URL.Path
	}
	c := &call{s: s, req: &req, query: r.URL.Query(), header: w.Header(), now: now}
	parseErr := c.parseBody(r.Header.Get("Content-Type"), raw)

	s.mu.Lock()
	status, resp := s.handleLocked(c, r, versionOK, segs, tooBig, parseErr)
	req.Status = status
	s.requests = append(s.requests, req)
	if n := s.opts.MaxRequests; n > 0 && len(s.requests) > 2*n {
		s.requests = append(s.requests[:0:0], s.requests[len(s.requests)-n:]...)
	}
	s.notifyLocked()
	s.mu.Unlock()

	fakehttp.Hold(r, c.stall, s.quit)
	if c.drop {
		fakehttp.Cut(w)
		return
	}
	if resp == nil {
		w.WriteHeader(status)
		return
	}
	body := mustJSON(resp)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

func (s *Server) handleLocked(c *call, r *http.Request, versionOK bool, segs []string, tooBig bool, parseErr error) (int, any) {
	req := c.req
	var rt *route
	wrongMethod := false
	if versionOK {
		rt, c.params, wrongMethod = s.match(r.Method, segs)
	}
	if rt == nil {
		req.Unknown = true
		s.takeLocked(c.header, "unmatched "+r.Method+" "+req.Path, "", c.now)
		if wrongMethod {
			return apiError(http.StatusMethodNotAllowed, 0, "405: Method Not Allowed")
		}
		return apiError(http.StatusNotFound, 0, "404: Not Found")
	}
	req.Route = rt.key
	for _, k := range []string{"channel_id", "guild_id", "interaction_token"} {
		if v := c.params[k]; v != "" {
			req.Major = v
			break
		}
	}
	if s.opts.Token != "" && !rt.noAuth && r.Header.Get("Authorization") != "Bot "+s.opts.Token {
		s.takeLocked(c.header, rt.key, req.Major, c.now)
		return apiError(http.StatusUnauthorized, 0, "401: Unauthorized")
	}
	if f, hit := s.Next(*req); hit {
		req.Injected = true
		switch {
		case f.Stall > 0:
			c.stall = f.Stall
		case f.Drop:
			c.drop = true
			return 0, nil
		case f.Status != http.StatusTooManyRequests:
			return apiError(f.Status, 0, http.StatusText(f.Status))
		default:
			req.RateLimited = true
			lim := s.limitFor(rt.key)
			h := c.header
			h.Set("X-RateLimit-Limit", strconv.Itoa(lim.Limit))
			h.Set("X-RateLimit-Remaining", "0")
			h.Set("X-RateLimit-Reset", strconv.FormatFloat(float64(c.now.Add(f.RetryAfter).UnixMilli())/1000, 'f', 3, 64))
			h.Set("X-RateLimit-Reset-After", secs(f.RetryAfter))
			h.Set("X-RateLimit-Bucket", bucketHash(rt.key))
			scope := "user"
			if f.global {
				h.Set("X-RateLimit-Global", "true")
				scope = "global"
			}
			setRetryAfter(h, f.RetryAfter, scope)
			return http.StatusTooManyRequests, rateLimitedBody(f.RetryAfter, f.global)
		}
	}
	if wait := s.takeLocked(c.header, rt.key, req.Major, c.now); wait > 0 {
		req.RateLimited = true
		setRetryAfter(c.header, wait, "user")
		return http.StatusTooManyRequests, rateLimitedBody(wait, false)
	}
	if tooBig {
		return apiError(http.StatusRequestEntityTooLarge, 40005, "Request entity too large")
	}
	if parseErr != nil {
		return apiError(http.StatusBadRequest, 50109, "The request body contains invalid JSON.")
	}
	total := 0
	for _, f := range c.files {
		total += f.Size
	}
	if int64(total) > s.opts.MaxUploadBytes {
		return apiError(http.StatusRequestEntityTooLarge, 40005, "Request entity too large")
	}
	if len(c.files) > 10 {
		return formError("attachments", "BASE_TYPE_MAX_LENGTH", "Must be 10 or fewer in length.")
	}
	return rt.h(c)
}

// parseBody decodes a JSON body or a multipart one (payload_json plus
// files[n]).
func (c *call) parseBody(ctype string, raw []byte) error {
	if len(raw) == 0 {
		return nil
	}
	mt, params, _ := mime.ParseMediaType(ctype)
	payload := raw
	if mt == "multipart/form-data" {
		payload = nil
		mr := multipart.NewReader(bytes.NewReader(raw), params["boundary"])
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			data, err := io.ReadAll(part)
			if err != nil {
				return err
			}
			name := part.FormName()
			switch {
			case name == "payload_json":
				payload = data
			case part.FileName() != "":
				c.files = append(c.files, File{
					Field:       name,
					Name:        part.FileName(),
					ContentType: part.Header.Get("Content-Type"),
					Size:        len(data),
					Data:        data,
				})
			}
		}
		c.req.Files = c.files
		if payload == nil {
			return nil
		}
	}
	var v any
	if err := json.Unmarshal(payload, &v); err != nil {
		return err
	}
	c.req.JSON = v
	switch v.(type) {
	case map[string]any:
		return json.Unmarshal(payload, &c.obj)
	case []any:
		return json.Unmarshal(payload, &c.arr)
	}
	return nil
}

// Field access on a JSON object held as raw values.

func has(o map[string]json.RawMessage, k string) bool {
	_, ok := o[k]
	return ok
}

func isNull(v json.RawMessage) bool { return len(v) == 0 || string(v) == "null" }

func str(o map[string]json.RawMessage, k string) string {
	var v string
	json.Unmarshal(o[k], &v)
	return v
}

func integer(o map[string]json.RawMessage, k string) int {
	var v float64
	json.Unmarshal(o[k], &v)
	return int(v)
}

func raws(o map[string]json.RawMessage, k string) []json.RawMessage {
	var v []json.RawMessage
	json.Unmarshal(o[k], &v)
	return v
}

func object(r json.RawMessage) map[string]json.RawMessage {
	var o map[string]json.RawMessage
	json.Unmarshal(r, &o)
	return o
}

// ---- gateway and users ----

func (s *Server) getGateway(c *call) (int, any) {
	return 200, map[string]any{"url": s.GatewayURL()}
}

func (s *Server) getGatewayBot(c *call) (int, any) {
	return 200, map[string]any{
		"url":    s.GatewayURL(),
		"shards": 1,
		"session_start_limit": map[string]any{
			"total":           1000,
			"remaining":       max(0, 1000-s.stats.Identifies),
			"reset_after":     86400000,
			"max_concurrency": 1,
		},
	}
}

func (s *Server) getCurrentUser(c *call) (int, any) { return 200, s.wireBotSelf() }

func (s *Server) getUser(c *call) (int, any) {
	u, ok := s.users[c.p("user_id")]
	if !ok {
		return apiError(404, 10013, "Unknown User")
	}
	return 200, s.wireUser(*u)
}

// ---- channels and messages ----

func (s *Server) getChannel(c *call) (int, any) {
	ch := s.channels[c.p("channel_id")]
	if ch == nil {
		return unknownChannel()
	}
	return 200, s.wireChannelLocked(ch, false)
}

// modifyChannel renames a thread the bot owns (the only change the fake
// takes), as Discord does, with THREAD_UPDATE.
func (s *Server) modifyChannel(c *call) (int, any) {
	ch := s.channels[c.p("channel_id")]
	if ch == nil {
		return unknownChannel()
	}
	if !ch.IsThread() || ch.OwnerID != s.bot.ID {
		return apiError(403, 50013, "Missing Permissions")
	}
	if has(c.obj, "name") {
		name := str(c.obj, "name")
		if n := len([]rune(name)); n < 1 || n > 100 {
			return formError("name", "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length.")
		}
		ch.Name = name
		ch.Renames++
	}
	if !s.opts.NoEcho {
		s.dispatchLocked("THREAD_UPDATE", IntentGuilds, func(*gwSession) any { return s.wireChannelLocked(ch, true) })
	}
	return 200, s.wireChannelLocked(ch, false)
}

func (s *Server) listMessages(c *call) (int, any) {
	ch := s.channels[c.p("channel_id")]
	if ch == nil {
		return unknownChannel()
	}
	limit := 50
	if l := c.query.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			return formError("limit", "NUMBER_TYPE_MAX", "Int value should be between 1 and 100.")
		}
		limit = n
	}
	before, after := c.query.Get("before"), c.query.Get("after")
	out := []any{}
	ids := s.chanMsgs[ch.ID]
	for i := len(ids) - 1; i >= 0 && len(out) < limit; i-- {
		m := s.messages[ids[i]]
		if m.Deleted || m.Ephemeral() {
			continue
		}
		if before != "" && !idLess(m.ID, before) || after != "" && !idLess(after, m.ID) {
			continue
		}
		out = append(out, s.wireMessageLocked(m, false))
	}
	return 200, out
}

// visibleMessage returns a message of the channel that the channel
// routes can reach (not deleted, not ephemeral).
func (s *Server) visibleMessage(channelID, messageID string) *message {
	m := s.messages[messageID]
	if m == nil || m.ChannelID != channelID || m.Deleted || m.Ephemeral() {
		return nil
	}
	return m
}

func (s *Server) getMessage(c *call) (int, any) {
	if s.channels[c.p("channel_id")] == nil {
		return unknownChannel()
	}
	m := s.visibleMessage(c.p("channel_id"), c.p("message_id"))
	if m == nil {
		return unknownMessage()
	}
	return 200, s.wireMessageLocked(m, false)
}

// msgInput is a message body: what create, edit, interaction responses
// and follow-ups carry.
type msgInput struct {
	hasContent, hasEmbeds, hasComponents, hasAttachments, hasFlags bool

	content     string
	embeds      []json.RawMessage
	components  []json.RawMessage
	keep        []string          // attachment ids to keep on edit
	meta        map[int]attachRef // metadata for new files, by index
	flags       int
	referenceID string
	stickers    int
	poll        bool
}

type attachRef struct{ filename, description string }

func parseMsgInput(o map[string]json.RawMessage) msgInput {
	var in msgInput
	if o == nil {
		return in
	}
	if v, ok := o["content"]; ok {
		in.hasContent = true
		json.Unmarshal(v, &in.content)
	}
	if v, ok := o["embeds"]; ok {
		in.hasEmbeds = true
		json.Unmarshal(v, &in.embeds)
	}
	if v, ok := o["components"]; ok {
		in.hasComponents = true
		json.Unmarshal(v, &in.components)
	}
	if v, ok := o["flags"]; ok && !isNull(v) {
		in.hasFlags = true
		in.flags = integer(o, "flags")
	}
	if v, ok := o["attachments"]; ok {
		in.hasAttachments = true
		in.meta = map[int]attachRef{}
		var list []map[string]json.RawMessage
		json.Unmarshal(v, &list)
		for _, a := range list {
			id := a["id"]
			var sid string
			if json.Unmarshal(id, &sid) == nil {
				if n, err := strconv.Atoi(sid); err == nil && n < 1000 {
					in.meta[n] = attachRef{str(a, "filename"), str(a, "description")}
				} else {
					in.keep = append(in.keep, sid)
				}
				continue
			}
			var n int
			if json.Unmarshal(id, &n) == nil {
				in.meta[n] = attachRef{str(a, "filename"), str(a, "description")}
			}
		}
	}
	if ref := object(o["message_reference"]); ref != nil {
		in.referenceID = str(ref, "message_id")
	}
	var stickers []json.RawMessage
	json.Unmarshal(o["sticker_ids"], &stickers)
	in.stickers = len(stickers)
	in.poll = has(o, "poll") && !isNull(o["poll"])
	return in
}

// attachmentsLocked turns uploaded files into attachments of a message in
// channelID.
func (s *Server) attachmentsLocked(channelID string, files []File, meta map[int]attachRef) []Attachment {
	var out []Attachment
	for i, f := range files {
		idx := i
		if n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(f.Field, "files["), "]")); err == nil {
			idx = n
		}
		name := f.Name
		ref := meta[idx]
		if ref.filename != "" {
			name = ref.filename
		}
		ctype := f.ContentType
		if ctype == "" || ctype == "application/octet-stream" {
			ctype = mime.TypeByExtension(path.Ext(name))
		}
		id := s.newIDLocked()
		out = append(out, Attachment{
			ID:          id,
			Filename:    name,
			ContentType: ctype,
			Description: ref.description,
			Size:        f.Size,
			Data:        f.Data,
			URL:         s.attachmentURL(channelID, id, name),
		})
	}
	return out
}

// validateContent checks what Discord checks of a message's parts.
func validateContent(content string, embeds, components []json.RawMessage, flags int) (int, any, bool) {
	if n := len([]rune(content)); n > 2000 {
		st, b := formError("content", "BASE_TYPE_MAX_LENGTH", "Must be 2000 or fewer in length.")
		return st, b, false
	}
	if st, b, ok := validateEmbeds(embeds); !ok {
		return st, b, false
	}
	if flags&FlagComponentsV2 == 0 {
		if st, b, ok := validateComponents(components); !ok {
			return st, b, false
		}
	}
	return 0, nil, true
}

func validateEmbeds(embeds []json.RawMessage) (int, any, bool) {
	fail := func(field, code, msg string) (int, any, bool) {
		st, b := formError(field, code, msg)
		return st, b, false
	}
	if len(embeds) > 10 {
		return fail("embeds", "BASE_TYPE_MAX_LENGTH", "Must be 10 or fewer in length.")
	}
	total := 0
	length := func(o map[string]json.RawMessage, k string) int { return len([]rune(str(o, k))) }
	for i, e := range embeds {
		o := object(e)
		if o == nil {
			return fail("embeds."+strconv.Itoa(i), "MODEL_TYPE_CONVERT", "Only dictionaries may be used in a ModelType")
		}
		pre := "embeds." + strconv.Itoa(i) + "."
		for k, lim := range map[string]int{"title": 256, "description": 4096} {
			if n := length(o, k); n > lim {
				return fail(pre+k, "BASE_TYPE_MAX_LENGTH", "Must be "+strconv.Itoa(lim)+" or fewer in length.")
			} else {
				total += n
			}
		}
		fields := raws(o, "fields")
		if len(fields) > 25 {
			return fail(pre+"fields", "BASE_TYPE_MAX_LENGTH", "Must be 25 or fewer in length.")
		}
		for j, f := range fields {
			fo := object(f)
			if length(fo, "name") > 256 || length(fo, "value") > 1024 || length(fo, "name") == 0 || length(fo, "value") == 0 {
				return fail(pre+"fields."+strconv.Itoa(j), "BASE_TYPE_BAD_LENGTH", "Field name must be 1-256 and value 1-1024 in length.")
			}
			total += length(fo, "name") + length(fo, "value")
		}
		if ft := object(o["footer"]); ft != nil {
			if length(ft, "text") > 2048 {
				return fail(pre+"footer.text", "BASE_TYPE_MAX_LENGTH", "Must be 2048 or fewer in length.")
			}
			total += length(ft, "text")
		}
		if au := object(o["author"]); au != nil {
			if length(au, "name") > 256 {
				return fail(pre+"author.name", "BASE_TYPE_MAX_LENGTH", "Must be 256 or fewer in length.")
			}
			total += length(au, "name")
		}
	}
	if total > 6000 {
		return fail("embeds", "MAX_EMBED_SIZE_EXCEEDED", "Embed size exceeds maximum size of 6000")
	}
	return 0, nil, true
}

// validateComponents checks classic (action row based) components.
func validateComponents(comps []json.RawMessage) (int, any, bool) {
	fail := func(field, code, msg string) (int, any, bool) {
		st, b := formError(field, code, msg)
		return st, b, false
	}
	if len(comps) > 5 {
		return fail("components", "BASE_TYPE_MAX_LENGTH", "Must be 5 or fewer in length.")
	}
	seen := map[string]bool{}
	for i, r := range comps {
		row := object(r)
		pre := "components." + strconv.Itoa(i)
		if integer(row, "type") != 1 {
			return fail(pre+".type", "UNION_TYPE_CHOICES", "Value of field \"type\" must be 1 (ACTION_ROW) at the top level.")
		}
		children := raws(row, "components")
		if len(children) == 0 || len(children) > 5 {
			return fail(pre+".components", "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 5 in length.")
		}
		for j, ch := range children {
			co := object(ch)
			cp := pre + ".components." + strconv.Itoa(j)
			typ := integer(co, "type")
			id := str(co, "custom_id")
			switch typ {
			case 2:
				style := integer(co, "style")
				if style == 5 {
					if str(co, "url") == "" || id != "" {
						return fail(cp, "BUTTON_COMPONENT_URL_REQUIRED", "A link button needs a url and no custom_id.")
					}
				} else if style >= 1 && style <= 4 {
					if id == "" {
						return fail(cp+".custom_id", "BASE_TYPE_REQUIRED", "This field is required")
					}
				} else if style != 6 {
					return fail(cp+".style", "BASE_TYPE_CHOICES", "Value must be one of {1, 2, 3, 4, 5, 6}.")
				}
				if len([]rune(str(co, "label"))) > 80 {
					return fail(cp+".label", "BASE_TYPE_MAX_LENGTH", "Must be 80 or fewer in length.")
				}
				if str(co, "label") == "" && isNull(co["emoji"]) && style != 6 {
					return fail(cp, "BUTTON_COMPONENT_LABEL_OR_EMOJI_REQUIRED", "A button needs a label or an emoji.")
				}
			case 3, 5, 6, 7, 8:
				if len(children) != 1 {
					return fail(pre+".components", "COMPONENT_LAYOUT_WIDTH_EXCEEDED", "The specified component exceeds the maximum width")
				}
				if id == "" {
					return fail(cp+".custom_id", "BASE_TYPE_REQUIRED", "This field is required")
				}
				opts := raws(co, "options")
				if typ == 3 {
					if n := len(opts); n < 1 || n > 25 {
						return fail(cp+".options", "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 25 in length.")
					}
					for k, o := range opts {
						om := object(o)
						for _, f := range []string{"label", "value"} {
							if n := len([]rune(str(om, f))); n < 1 || n > 100 {
								return fail(cp+".options."+strconv.Itoa(k)+"."+f, "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length.")
							}
						}
					}
				}
				lo, hi := 1, 1
				if _, ok := co["min_values"]; ok {
					lo = integer(co, "min_values")
				}
				if _, ok := co["max_values"]; ok {
					hi = integer(co, "max_values")
				}
				if lo < 0 || lo > 25 || hi < 1 || hi > 25 || lo > hi || typ == 3 && hi > len(opts) {
					return fail(cp+".max_values", "SELECT_COMPONENT_VALUES_INVALID", "min_values and max_values must be 0-25 and 1-25, min not over max, max not over the options.")
				}
				if len([]rune(str(co, "placeholder"))) > 150 {
					return fail(cp+".placeholder", "BASE_TYPE_MAX_LENGTH", "Must be 150 or fewer in length.")
				}
			default:
				return fail(cp+".type", "UNION_TYPE_CHOICES", "Value of field \"type\" is not a component allowed in an action row.")
			}
			if id != "" {
				if len([]rune(id)) > 100 {
					return fail(cp+".custom_id", "BASE_TYPE_MAX_LENGTH", "Must be 100 or fewer in length.")
				}
				if seen[id] {
					return fail(cp+".custom_id", "COMPONENT_CUSTOM_ID_DUPLICATED", "Component custom id cannot be duplicated")
				}
				seen[id] = true
			}
		}
	}
	return 0, nil, true
}

func emptyMessage(content string, embeds, components []json.RawMessage, atts int, in msgInput) bool {
	return content == "" && len(embeds) == 0 && len(components) == 0 && atts == 0 && in.stickers == 0 && !in.poll
}

// newBotMessageLocked builds a message the bot sends in ch from a body,
// or the error answer.
func (s *Server) newBotMessageLocked(c *call, ch *Channel, in msgInput, allowedFlags int) (*message, int, any) {
	if in.referenceID != "" {
		if ref := s.visibleMessage(ch.ID, in.referenceID); ref == nil {
			st, b := formError("message_reference", "MESSAGE_REFERENCE_UNKNOWN_MESSAGE", "Unknown message")
			return nil, st, b
		}
	}
	if st, b, ok := validateContent(in.content, in.embeds, in.components, in.flags); !ok {
		return nil, st, b
	}
	if emptyMessage(in.content, in.embeds, in.components, len(c.files), in) {
		st, b := apiError(400, 50006, "Cannot send an empty message")
		return nil, st, b
	}
	m := &message{Message: Message{
		ID:          s.newIDLocked(),
		ChannelID:   ch.ID,
		GuildID:     ch.GuildID,
		Author:      s.bot,
		Content:     in.content,
		Embeds:      in.embeds,
		Components:  in.components,
		Flags:       in.flags & allowedFlags,
		ReferenceID: in.referenceID,
		Created:     c.now,
	}}
	if m.ReferenceID != "" {
		m.Type = 19
	}
	m.Attachments = s.attachmentsLocked(ch.ID, c.files, in.meta)
	return m, 0, nil
}

const createFlags = FlagSuppressEmbeds | 1<<12 | FlagComponentsV2

func (s *Server) createMessage(c *call) (int, any) {
	ch := s.channels[c.p("channel_id")]
	if ch == nil {
		return unknownChannel()
	}
	m, st, b := s.newBotMessageLocked(c, ch, parseMsgInput(c.obj), createFlags)
	if m == nil {
		return st, b
	}
	s.addMessageLocked(m)
	return 200, s.wireMessageLocked(m, false)
}

// addMessageLocked stores a new message and dispatches MESSAGE_CREATE;
// it reports whether any session got the event.
func (s *Server) addMessageLocked(m *message) bool {
	parseMentions(&m.Message)
	m.revisions = []Revision{m.snapshot()}
	s.messages[m.ID] = m
	s.chanMsgs[m.ChannelID] = append(s.chanMsgs[m.ChannelID], m.ID)
	if ch := s.channels[m.ChannelID]; ch != nil {
		ch.MessageCount++
		ch.Archived = false
	}
	if g, ok := s.guilds[m.GuildID]; ok && m.WebhookID == "" {
		s.memberLocked(g, m.Author.ID)
	}
	return s.messageEventLocked("MESSAGE_CREATE", m)
}

// messageEventLocked dispatches MESSAGE_CREATE or MESSAGE_UPDATE,
// withholding content from sessions that may not see it.
func (s *Server) messageEventLocked(event string, m *message) bool {
	if m.Ephemeral() {
		return false
	}
	own := m.Author.ID == s.bot.ID
	if own && s.opts.NoEcho {
		return false
	}
	mentioned := false
	for _, id := range m.Mentions {
		mentioned = mentioned || id == s.bot.ID
	}
	return s.dispatchLocked(event, IntentGuildMessages, func(sess *gwSession) any {
		w := s.wireMessageLocked(m, true)
		if !s.opts.IgnoreIntents && sess.intents&IntentMessageContent == 0 && !own && !mentioned {
			w["content"] = ""
			w["embeds"] = []any{}
			w["attachments"] = []any{}
			w["components"] = []any{}
			delete(w, "poll")
		}
		return w
	})
}

// parseMentions fills the mention fields from the content, as Discord
// does.
func parseMentions(m *Message) {
	m.Mentions, m.MentionRoles, m.MentionEveryone = nil, nil, false
	text := m.Content
	for {
		i := strings.Index(text, "<@")
		if i < 0 {
			break
		}
		text = text[i+2:]
		j := strings.IndexByte(text, '>')
		if j < 0 {
			break
		}
		id := text[:j]
		role := strings.HasPrefix(id, "&")
		id = strings.TrimLeft(id, "!&")
		if id == "" || strings.Trim(id, "0123456789") != "" {
			continue
		}
		if role {
			m.MentionRoles = appendUnique(m.MentionRoles, id)
		} else {
			m.Mentions = appendUnique(m.Mentions, id)
		}
	}
	m.MentionEveryone = strings.Contains(m.Content, "@everyone") || strings.Contains(m.Content, "@here")
}

func appendUnique(list []string, v string) []string {
	for _, x := range list {
		if x == v {
			return list
		}
	}
	return append(list, v)
}

// applyEditLocked applies an edit body to m, or returns the error answer.
func (s *Server) applyEditLocked(c *call, m *message, in msgInput) (int, any, bool) {
	content, embeds, comps, flags := m.Content, m.Embeds, m.Components, m.Flags
	if in.hasContent {
		content = in.content
	}
	if in.hasEmbeds {
		embeds = in.embeds
	}
	if in.hasComponents {
		comps = in.components
	}
	if in.hasFlags {
		flags = flags&^(FlagSuppressEmbeds|FlagComponentsV2) | in.flags&(FlagSuppressEmbeds|FlagComponentsV2)
	}
	atts := m.Attachments
	if in.hasAttachments {
		atts = nil
		for _, a := range m.Attachments {
			for _, k := range in.keep {
				if a.ID == k {
					atts = append(atts, a)
				}
			}
		}
	}
	atts = append(atts[:len(atts):len(atts)], s.attachmentsLocked(m.ChannelID, c.files, in.meta)...)
	if st, b, ok := validateContent(content, embeds, comps, flags); !ok {
		return st, b, false
	}
	if emptyMessage(content, embeds, comps, len(atts), in) {
		st, b := apiError(400, 50006, "Cannot send an empty message")
		return st, b, false
	}
	m.Content, m.Embeds, m.Components, m.Flags, m.Attachments = content, embeds, comps, flags&^FlagLoading, atts
	m.EditedAt = c.now
	m.Edits++
	parseMentions(&m.Message)
	rev := m.snapshot()
	rev.At = c.now
	m.revisions = append(m.revisions, rev)
	s.messageEventLocked("MESSAGE_UPDATE", m)
	return 0, nil, true
}

func (s *Server) editMessage(c *call) (int, any) {
	if s.channels[c.p("channel_id")] == nil {
		return unknownChannel()
	}
	m := s.visibleMessage(c.p("channel_id"), c.p("message_id"))
	if m == nil {
		return unknownMessage()
	}
	if m.Author.ID != s.bot.ID {
		return apiError(403, 50005, "Cannot edit a message authored by another user")
	}
	if st, b, ok := s.applyEditLocked(c, m, parseMsgInput(c.obj)); !ok {
		return st, b
	}
	return 200, s.wireMessageLocked(m, false)
}

func (s *Server) deleteMessage(c *call) (int, any) {
	if s.channels[c.p("channel_id")] == nil {
		return unknownChannel()
	}
	m := s.visibleMessage(c.p("channel_id"), c.p("message_id"))
	if m == nil {
		return unknownMessage()
	}
	s.deleteMessageLocked(m)
	return http.StatusNoContent, nil
}

func (s *Server) deleteMessageLocked(m *message) {
	m.Deleted = true
	if m.Ephemeral() || m.Author.ID == s.bot.ID && s.opts.NoEcho {
		return
	}
	s.dispatchLocked("MESSAGE_DELETE", IntentGuildMessages, func(*gwSession) any {
		return map[string]any{"id": m.ID, "channel_id": m.ChannelID, "guild_id": m.GuildID}
	})
}

// ---- threads ----

func validThreadBody(o map[string]json.RawMessage) (name string, archive int, st int, body any, ok bool) {
	name = str(o, "name")
	if n := len([]rune(name)); n < 1 || n > 100 {
		st, body = formError("name", "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length.")
		return
	}
	archive = integer(o, "auto_archive_duration")
	switch archive {
	case 0:
		archive = 4320
	case 60, 1440, 4320, 10080:
	default:
		st, body = formError("auto_archive_duration", "BASE_TYPE_CHOICES", "Value must be one of {60, 1440, 4320, 10080}.")
		return
	}
	return name, archive, 0, nil, true
}

func (s *Server) newThreadLocked(id string, parent *Channel, name string, typ, archive int, now time.Time) *Channel {
	th := &Channel{
		ID:                  id,
		GuildID:             parent.GuildID,
		Name:                name,
		Type:                typ,
		ParentID:            parent.ID,
		OwnerID:             s.bot.ID,
		AutoArchiveDuration: archive,
		Created:             now,
	}
	s.channels[id] = th
	if !s.opts.NoEcho {
		s.dispatchLocked("THREAD_CREATE", IntentGuilds, func(*gwSession) any {
			w := s.wireChannelLocked(th, true)
			w["newly_created"] = true
			return w
		})
	}
	return th
}

func (s *Server) startThreadFromMessage(c *call) (int, any) {
	parent := s.channels[c.p("channel_id")]
	if parent == nil {
		return unknownChannel()
	}
	m := s.visibleMessage(parent.ID, c.p("message_id"))
	if m == nil {
		return unknownMessage()
	}
	if parent.Type != ChannelText && parent.Type != ChannelAnnouncement {
		return apiError(400, 50024, "Cannot execute action on this channel type")
	}
	if m.ThreadID != "" {
		return apiError(400, 160004, "A thread has already been created for this message")
	}
	name, archive, st, b, ok := validThreadBody(c.obj)
	if !ok {
		return st, b
	}
	th := s.newThreadLocked(m.ID, parent, name, ChannelPublicThread, archive, c.now)
	th.StarterMessageID = m.ID
	m.ThreadID = th.ID
	return http.StatusCreated, s.wireChannelLocked(th, false)
}

func (s *Server) startThread(c *call) (int, any) {
	parent := s.channels[c.p("channel_id")]
	if parent == nil {
		return unknownChannel()
	}
	if parent.Type != ChannelText && parent.Type != ChannelAnnouncement {
		return apiError(400, 50024, "Cannot execute action on this channel type")
	}
	name, archive, st, b, ok := validThreadBody(c.obj)
	if !ok {
		return st, b
	}
	// In API v9 a thread started without a message is private unless
	// the type says otherwise.
	typ := ChannelPrivateThread
	if t := integer(c.obj, "type"); t != 0 {
		if t != ChannelPublicThread && t != ChannelPrivateThread {
			return formError("type", "BASE_TYPE_CHOICES", "Value must be one of {11, 12}.")
		}
		typ = t
	}
	th := s.newThreadLocked(s.newIDLocked(), parent, name, typ, archive, c.now)
	return http.StatusCreated, s.wireChannelLocked(th, false)
}

func (s *Server) joinThread(c *call) (int, any) {
	ch := s.channels[c.p("channel_id")]
	if ch == nil {
		return unknownChannel()
	}
	if !ch.IsThread() {
		return apiError(400, 50024, "Cannot execute action on this channel type")
	}
	return http.StatusNoContent, nil
}

func (s *Server) typingRoute(c *call) (int, any) {
	if s.channels[c.p("channel_id")] == nil {
		return unknownChannel()
	}
	s.typing[c.p("channel_id")]++
	return http.StatusNoContent, nil
}

// ---- reactions ----

func splitCustomEmoji(e string) (name, id string, ok bool) {
	name, id, ok = strings.Cut(strings.TrimPrefix(e, "a:"), ":")
	if !ok || name == "" || id == "" || strings.Trim(id, "0123456789") != "" {
		return "", "", false
	}
	return name, id, true
}

// validEmoji accepts a name:id custom emoji or something that is not
// plain ASCII (a unicode emoji); Discord refuses names like "thumbsup".
func validEmoji(e string) bool {
	if _, _, ok := splitCustomEmoji(e); ok {
		return true
	}
	for _, r := range e {
		if r > 127 {
			return true
		}
	}
	return false
}

func (s *Server) reactionTarget(c *call) (*message, string, int, any) {
	if s.channels[c.p("channel_id")] == nil {
		st, b := unknownChannel()
		return nil, "", st, b
	}
	m := s.visibleMessage(c.p("channel_id"), c.p("message_id"))
	if m == nil {
		st, b := unknownMessage()
		return nil, "", st, b
	}
	e := c.p("emoji")
	if !validEmoji(e) {
		st, b := apiError(400, 10014, "Unknown Emoji")
		return nil, "", st, b
	}
	return m, e, 0, nil
}

func (s *Server) addOwnReaction(c *call) (int, any) {
	m, e, st, b := s.reactionTarget(c)
	if m == nil {
		return st, b
	}
	s.addReactionLocked(m, s.bot.ID, e, c.now)
	return http.StatusNoContent, nil
}

func (s *Server) addReactionLocked(m *message, userID, emoji string, now time.Time) bool {
	for _, r := range m.reactions {
		if r.UserID == userID && r.Emoji == emoji {
			return false
		}
	}
	m.reactions = append(m.reactions, Reaction{Emoji: emoji, UserID: userID, At: now})
	if userID == s.bot.ID && s.opts.NoEcho {
		return false
	}
	return s.dispatchLocked("MESSAGE_REACTION_ADD", IntentGuildMessageReactions, func(*gwSession) any {
		d := map[string]any{
			"user_id":           userID,
			"channel_id":        m.ChannelID,
			"message_id":        m.ID,
			"guild_id":          m.GuildID,
			"emoji":             wireEmoji(emoji),
			"message_author_id": m.Author.ID,
			"burst":             false,
			"burst_colors":      []any{},
			"type":              0,
		}
		if g, ok := s.guilds[m.GuildID]; ok {
			d["member"] = s.wireMemberLocked(g, userID, true, false)
		}
		return d
	})
}

func (s *Server) removeReactionLocked(m *message, userID, emoji string) bool {
	for i, r := range m.reactions {
		if r.UserID == userID && r.Emoji == emoji {
			m.reactions = append(m.reactions[:i:i], m.reactions[i+1:]...)
			if userID == s.bot.ID && s.opts.NoEcho {
				return false
			}
			return s.dispatchLocked("MESSAGE_REACTION_REMOVE", IntentGuildMessageReactions, func(*gwSession) any {
				return map[string]any{
					"user_id":    userID,
					"channel_id": m.ChannelID,
					"message_id": m.ID,
					"guild_id":   m.GuildID,
					"emoji":      wireEmoji(emoji),
					"burst":      false,
					"type":       0,
				}
			})
		}
	}
	return false
}

func (s *Server) deleteReaction(c *call) (int, any) {
	m, e, st, b := s.reactionTarget(c)
	if m == nil {
		return st, b
	}
	user := c.p("user_id")
	if user == "" {
		user = s.bot.ID
	}
	s.removeReactionLocked(m, user, e)
	return http.StatusNoContent, nil
}

func (s *Server) getReactions(c *call) (int, any) {
	m, e, st, b := s.reactionTarget(c)
	if m == nil {
		return st, b
	}
	out := []any{}
	for _, r := range m.reactions {
		if r.Emoji == e {
			out = append(out, s.wireUser(s.userByIDLocked(r.UserID)))
		}
	}
	return 200, out
}

// ---- guilds ----

func (s *Server) getMember(c *call) (int, any) {
	g, ok := s.guilds[c.p("guild_id")]
	if !ok {
		return apiError(404, 10004, "Unknown Guild")
	}
	if _, ok := g.members[c.p("user_id")]; !ok {
		return apiError(404, 10007, "Unknown Member")
	}
	return 200, s.wireMemberLocked(g, c.p("user_id"), true, false)
}

func (s *Server) guildChannels(c *call) (int, any) {
	g, ok := s.guilds[c.p("guild_id")]
	if !ok {
		return apiError(404, 10004, "Unknown Guild")
	}
	return 200, s.wireGuildLocked(g)["channels"]
}

func (s *Server) activeThreads(c *call) (int, any) {
	g, ok := s.guilds[c.p("guild_id")]
	if !ok {
		return apiError(404, 10004, "Unknown Guild")
	}
	threads := s.wireGuildLocked(g)["threads"].([]any)
	members := []any{}
	for _, t := range threads {
		id := t.(map[string]any)["id"]
		members = append(members, map[string]any{"id": id, "user_id": s.bot.ID, "join_timestamp": ts(s.channels[id.(string)].Created), "flags": 1})
	}
	return 200, map[string]any{"threads": threads, "members": members}
}
