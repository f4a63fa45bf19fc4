package fakeslack

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"acpbroker/internal/fakehttp"
)

// Call is a request the fake received: a Web API call, or a request to
// an upload URL ("upload"), a file's url_private ("file") or a
// response_url ("response_url").
type Call struct {
	At     time.Time
	Method string
	// Args are the arguments, from the query, the form or the JSON body,
	// without the token; JSON objects and arrays are kept as JSON text.
	Args map[string]string
	// JSON tells a JSON body from a form.
	JSON bool
	// Token is the kind of token presented: "bot", "app", "" (none) or
	// "invalid".
	Token string
	// Status is the HTTP status answered; OK and Error the body's ok and
	// error.
	Status int
	OK     bool
	Error  string
	// RateLimited is set when the call was answered 429, RetryAfter to
	// the wait it was told; Injected when the answer came from a fault
	// or Chaos.
	RateLimited bool
	RetryAfter  time.Duration
	Injected    bool
	// Size is the length of the request body.
	Size int
}

// Channel returns the conversation the call is about (its channel or
// channel_id argument).
func (c Call) Channel() string {
	if v := c.Args["channel"]; v != "" {
		return v
	}
	return c.Args["channel_id"]
}

type tokenKind int

const (
	tokBot tokenKind = iota
	tokApp
	tokAny // either
)

type method struct {
	name       string
	token      tokenKind
	perChannel bool // rate limited per channel
	h          func(*call) reply
}

// reply is a Web API answer body; "ok" is added when absent.
type reply map[string]any

func okReply(kv ...any) reply {
	r := reply{"ok": true}
	for i := 0; i+1 < len(kv); i += 2 {
		r[kv[i].(string)] = kv[i+1]
	}
	return r
}

func fail(code string) reply { return reply{"ok": false, "error": code} }

// failMessages is an error with the Block Kit style messages Slack puts
// in response_metadata (and, for invalid_blocks, in errors).
func failMessages(code string, problems []problem) reply {
	var msgs, errs []string
	for _, p := range problems {
		errs = append(errs, p.String())
		msgs = append(msgs, "[ERROR] "+p.String())
	}
	r := reply{"ok": false, "error": code, "response_metadata": map[string]any{"messages": msgs}}
	if code == "invalid_blocks" {
		r["errors"] = errs
	}
	return r
}

// call is one Web API request being handled, under the Server's lock.
type call struct {
	rec  *Call
	args map[string]string
	raw  map[string]json.RawMessage // values of a JSON body
	now  time.Time
}

func (c *call) str(k string) string { return c.args[k] }

// flag reads a boolean argument: nil when absent.
func (c *call) flag(k string) *bool {
	v, ok := c.args[k]
	if !ok {
		return nil
	}
	b := v == "true" || v == "1"
	return &b
}

// jsonArg returns an argument holding JSON: an object or array in a JSON
// body as it is, or a string (form value or JSON string) as the JSON text
// it holds. ok is false when absent; the value may be invalid JSON.
func (c *call) jsonArg(k string) (json.RawMessage, bool) {
	if r, ok := c.raw[k]; ok {
		var str string
		if json.Unmarshal(r, &str) == nil {
			return json.RawMessage(str), true
		}
		return r, true
	}
	v, ok := c.args[k]
	if !ok {
		return nil, false
	}
	return json.RawMessage(v), true
}

const maxAPIBody = 8 << 20

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	name := strings.TrimPrefix(r.URL.Path, "/api/")
	raw, _ := io.ReadAll(io.LimitReader(r.Body, maxAPIBody+1))
	rec := &Call{At: now, Method: name, Args: map[string]string{}, Size: len(raw)}
	c := &call{rec: rec, args: rec.Args, now: now}
	token, warning, perr := c.parse(r, raw)
	if len(raw) > maxAPIBody {
		perr = errTooBig
	}

	s.mu.Lock()
	resp, act := s.handleLocked(c, r, token, perr)
	if resp != nil {
		if warning != "" {
			resp["warning"] = warning
			md, _ := resp["response_metadata"].(map[string]any)
			if md == nil {
				md = map[string]any{}
				resp["response_metadata"] = md
			}
			md["warnings"] = []string{warning}
		}
		rec.OK, _ = resp["ok"].(bool)
		rec.Error, _ = resp["error"].(string)
	}
	rec.Status = act.status
	s.recordLocked(*rec)
	s.mu.Unlock()

	s.answer(w, r, act, resp)
}

// action is how a request is answered besides its body.
type action struct {
	status     int
	retryAfter time.Duration
	drop       bool          // cut the connection without an answer
	stall      time.Duration // answer only after this long
}

// answer writes a Web API answer.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, act action, resp reply) {
	body, _ := json.Marshal(resp)
	s.respond(w, r, act, "application/json; charset=utf-8", body)
}

// respond writes an answer once its stall is over: cut the connection,
// or 429 ratelimited with Retry-After, or an error status with an HTML
// body as Slack's front ends give, or the body.
func (s *Server) respond(w http.ResponseWriter, r *http.Request, act action, ctype string, body []byte) {
	fakehttp.Hold(r, act.stall, s.quit)
	switch {
	case act.drop:
		fakehttp.Cut(w)
		return
	case act.status == http.StatusTooManyRequests:
		secs := int64((act.retryAfter + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
		ctype, body = "application/json; charset=utf-8", []byte(`{"ok":false,"error":"ratelimited"}`)
	case act.status >= 500:
		ctype, body = "text/html; charset=utf-8", []byte("<html><body>"+http.StatusText(act.status)+"</body></html>")
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(act.status)
	w.Write(body)
}

func (s *Server) recordLocked(rec Call) {
	s.calls = append(s.calls, rec)
	if n := s.opts.MaxCalls; n > 0 && len(s.calls) > 2*n {
		s.calls = append(s.calls[:0:0], s.calls[len(s.calls)-n:]...)
	}
	s.notifyLocked()
}

var errTooBig = errors.New("request too large")

// parse reads the arguments of a request: the query, then a form or a
// JSON object. It returns the token presented and the warning Slack
// gives about the request's form.
func (c *call) parse(r *http.Request, raw []byte) (token, warning string, err error) {
	for k, v := range r.URL.Query() {
		c.args[k] = v[0]
	}
	ctype := r.Header.Get("Content-Type")
	mt, params, _ := mime.ParseMediaType(ctype)
	switch {
	case len(raw) == 0:
	case mt == "application/x-www-form-urlencoded":
		vals, perr := url.ParseQuery(string(raw))
		if perr != nil {
			return "", "", perr
		}
		for k, v := range vals {
			c.args[k] = v[0]
		}
	case mt == "multipart/form-data":
		mr := multipart.NewReader(bytes.NewReader(raw), params["boundary"])
		for {
			part, perr := mr.NextPart()
			if errors.Is(perr, io.EOF) {
				break
			}
			if perr != nil {
				return "", "", perr
			}
			data, _ := io.ReadAll(part)
			c.args[part.FormName()] = string(data)
		}
	case mt == "application/json":
		c.rec.JSON = true
		if err := json.Unmarshal(raw, &c.raw); err != nil {
			return "", "", err
		}
		for k, v := range c.raw {
			var str string
			if json.Unmarshal(v, &str) == nil {
				c.args[k] = str
			} else {
				c.args[k] = string(v)
			}
		}
		if !strings.EqualFold(params["charset"], "utf-8") {
			warning = "missing_charset"
		}
	}
	token = c.args["token"]
	delete(c.args, "token")
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		token = strings.TrimPrefix(h, "Bearer ")
	}
	return token, warning, nil
}

func (s *Server) handleLocked(c *call, r *http.Request, token string, perr error) (reply, action) {
	ok := action{status: http.StatusOK}
	m := s.methods[c.rec.Method]
	if m == nil {
		return reply{"ok": false, "error": "unknown_method", "req_method": c.rec.Method}, ok
	}
	switch token {
	case "":
		c.rec.Token = ""
	case s.opts.BotToken:
		c.rec.Token = "bot"
	case s.opts.AppToken:
		c.rec.Token = "app"
	default:
		c.rec.Token = "invalid"
	}
	switch {
	case c.rec.Token == "":
		return fail("not_authed"), ok
	case c.rec.Token == "invalid":
		return fail("invalid_auth"), ok
	case m.token != tokAny && (m.token == tokApp) != (c.rec.Token == "app"):
		return fail("not_allowed_token_type"), ok
	}
	if act, resp, hit := s.injectLocked(c.rec); hit {
		if act.stall == 0 {
			return resp, act
		}
		ok.stall = act.stall
	}
	key := m.name
	if m.perChannel {
		key += "|" + c.rec.Channel()
	}
	if wait := s.takeLocked(m.name, key, c.now); wait > 0 {
		c.rec.RateLimited = true
		c.rec.RetryAfter = wait
		return fail("ratelimited"), action{status: http.StatusTooManyRequests, retryAfter: wait}
	}
	switch {
	case errors.Is(perr, errTooBig):
		return fail("request_timeout"), ok
	case perr != nil && c.rec.JSON:
		return fail("invalid_json"), ok
	case perr != nil:
		return fail("invalid_form_data"), ok
	}
	if r.Method != http.MethodPost && r.Method != http.MethodGet {
		return fail("invalid_post_type"), ok
	}
	return m.h(c), ok
}

// methodTable lists the Web API methods the fake serves.
func (s *Server) methodTable() map[string]*method {
	list := []*method{
		{name: "auth.test", token: tokAny, h: s.authTest},
		{name: "apps.connections.open", token: tokApp, h: s.connectionsOpen},
		{name: "chat.postMessage", perChannel: true, h: s.postMessage},
		{name: "chat.update", h: s.updateMessage},
		{name: "chat.delete", h: s.deleteMessage},
		{name: "chat.postEphemeral", h: s.postEphemeral},
		{name: "chat.getPermalink", h: s.getPermalink},
		{name: "chat.startStream", h: s.startStream},
		{name: "chat.appendStream", h: s.appendStream},
		{name: "chat.stopStream", h: s.stopStream},
		{name: "reactions.add", h: s.addReaction},
		{name: "reactions.remove", h: s.removeReaction},
		{name: "reactions.get", h: s.getReactions},
		{name: "conversations.info", h: s.conversationInfo},
		{name: "conversations.replies", h: s.conversationReplies},
		{name: "conversations.history", h: s.conversationHistory},
		{name: "conversations.open", h: s.conversationOpen},
		{name: "users.info", h: s.userInfo},
		{name: "usergroups.list", h: s.userGroupsList},
		{name: "usergroups.users.list", h: s.userGroupUsers},
		{name: "views.open", h: s.viewsOpen},
		{name: "views.push", h: s.viewsPush},
		{name: "views.update", h: s.viewsUpdate},
		{name: "files.getUploadURLExternal", h: s.getUploadURL},
		{name: "files.completeUploadExternal", h: s.completeUpload},
		{name: "files.info", h: s.fileInfo},
		{name: "files.upload", h: func(*call) reply { return fail("method_deprecated") }},
		{name: "assistant.threads.setStatus", h: s.setThreadStatus},
		{name: "assistant.threads.setTitle", h: s.setThreadTitle},
		{name: "assistant.threads.setSuggestedPrompts", h: s.setSuggestedPrompts},
	}
	out := map[string]*method{}
	for _, m := range list {
		out[m.name] = m
	}
	return out
}

// Methods returns the names of the Web API methods the fake serves.
func (s *Server) Methods() []string {
	return slices.Sorted(maps.Keys(s.methods))
}

// Calls returns every request received, in order (only the latest ones
// with Options.MaxCalls).
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Call, len(s.calls))
	for i, c := range s.calls {
		c.Args = maps.Clone(c.Args)
		out[i] = c
	}
	return out
}

// CallsTo returns the calls of one method.
func (s *Server) CallsTo(method string) []Call {
	var out []Call
	for _, c := range s.Calls() {
		if c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// RateLimited returns the calls answered 429.
func (s *Server) RateLimited() []Call {
	var out []Call
	for _, c := range s.Calls() {
		if c.RateLimited {
			out = append(out, c)
		}
	}
	return out
}

// authTest answers auth.test: who the token is.
func (s *Server) authTest(c *call) reply {
	r := okReply(
		"url", "https://"+s.team.Domain+".slack.com/",
		"team", s.team.Name,
		"team_id", s.team.ID,
		"is_enterprise_install", false,
	)
	if c.rec.Token == "bot" {
		r["user"] = s.bot.Name
		r["user_id"] = s.bot.UserID
		r["bot_id"] = s.bot.BotID
	} else {
		r["app_id"] = s.bot.AppID
	}
	return r
}
