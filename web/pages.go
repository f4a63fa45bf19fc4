package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"acpbroker/acp"
	"acpbroker/chat/thread"
	"acpbroker/web/render"
)

// contentSecurity allows the page's own script and styles alone: no
// inline script or style, no frame around it, forms posted to it alone.
const contentSecurity = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// maxFormBytes bounds a form's body.
const maxFormBytes = 256 << 10

// Handler serves the pages.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /static/render.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		w.Write(render.CSS())
	})
	mux.HandleFunc("GET /{$}", s.home)
	mux.HandleFunc("GET /signin", s.signInPage)
	mux.HandleFunc("POST /signin", s.signInPost)
	mux.HandleFunc("GET /admin/signin", s.adminSignInPage)
	mux.HandleFunc("POST /admin/signin", s.adminSignInPost)
	mux.HandleFunc("POST /signout", s.signed(s.signOut))
	mux.HandleFunc("GET /threads", s.signed(s.list))
	mux.HandleFunc("GET /t/{platform}/{thread}", s.signed(s.threadPage))
	mux.HandleFunc("GET /t/{platform}/{thread}/events", s.signed(s.events))
	mux.HandleFunc("POST /t/{platform}/{thread}/cancel", s.signed(s.cancel))
	mux.HandleFunc("POST /t/{platform}/{thread}/permit", s.signed(s.permit))
	mux.HandleFunc("POST /t/{platform}/{thread}/send", s.signed(s.send))
	mux.HandleFunc("POST /t/{platform}/{thread}/answer", s.signed(s.answer))
	mux.HandleFunc("POST /t/{platform}/{thread}/choose", s.signed(s.choose))
	mux.HandleFunc("POST /t/{platform}/{thread}/queued", s.signed(s.queued))
	mux.HandleFunc("POST /t/{platform}/{thread}/session", s.signed(s.sessionCommand))
	mux.HandleFunc("GET /admin", s.signed(s.admin))
	return headers(mux)
}

// headers sets the security headers of every answer.
func headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurity)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		if !strings.HasPrefix(r.URL.Path, "/static/") {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

// signedHandler serves a signed-in person's request.
type signedHandler func(w http.ResponseWriter, r *http.Request, ss session)

// signed serves h to a signed-in person alone; a request that changes
// anything must carry the session's form token and come from the
// Server's own pages.
func (s *Server) signed(h signedHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Cookie(cookieName)
		var ss session
		ok := false
		if c != nil {
			ss, ok = s.signIn.session(c.Value)
		}
		if !ok {
			if r.Method == http.MethodGet && !strings.HasSuffix(r.URL.Path, "/events") {
				s.show(w, http.StatusUnauthorized, "signedout", nil)
				return
			}
			http.Error(w, "not signed in", http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodGet {
			r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
			if !crossSiteSafe(r) || !sameToken(r.PostFormValue("csrf"), ss.csrf) {
				s.log.Info().Str("path", r.URL.Path).Str("person", ss.person.id()).Msg("web: a request without its form token refused")
				http.Error(w, "this form is stale or was not sent from this site; reload the page", http.StatusForbidden)
				return
			}
		}
		h(w, r, ss)
	}
}

// crossSiteSafe reports whether the browser says r came from this site
// (or says nothing of it).
func crossSiteSafe(r *http.Request) bool {
	site := r.Header.Get("Sec-Fetch-Site")
	return site == "" || site == "same-origin" || site == "none"
}

// show writes page name with data.
func (s *Server) show(w http.ResponseWriter, code int, name string, data any) {
	var b bytes.Buffer
	if err := s.pages.ExecuteTemplate(&b, name, data); err != nil {
		s.log.Error().Err(err).Str("page", name).Msg("web: page not made")
		http.Error(w, "the page could not be made", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	w.Write(b.Bytes())
}

func (s *Server) home(w http.ResponseWriter, r *http.Request) {
	if c, _ := r.Cookie(cookieName); c != nil {
		if ss, ok := s.signIn.session(c.Value); ok {
			to := "/threads"
			if ss.person.Admin != "" {
				to = "/admin"
			}
			http.Redirect(w, r, to, http.StatusSeeOther)
			return
		}
	}
	s.show(w, http.StatusOK, "signedout", nil)
}

// signInPage shows the button that uses a sign-in link: the link is
// used by a POST, so that a preview of the link in the chat does not
// spend it.
func (s *Server) signInPage(w http.ResponseWriter, r *http.Request) {
	if !s.signIn.allow(s.clientAddr(r)) {
		tooMany(w)
		return
	}
	s.show(w, http.StatusOK, "signin", map[string]string{"Token": r.URL.Query().Get("t")})
}

func (s *Server) signInPost(w http.ResponseWriter, r *http.Request) {
	if !s.signIn.allow(s.clientAddr(r)) {
		tooMany(w)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if !crossSiteSafe(r) {
		http.Error(w, "sign in from this site's page", http.StatusForbidden)
		return
	}
	id, l, ok := s.signIn.use(r.PostFormValue("t"))
	if !ok {
		s.show(w, http.StatusForbidden, "signedout", map[string]string{"Problem": "This sign-in link is used, expired or unknown. Ask the chat for a new one with /web."})
		return
	}
	s.setCookie(w, id)
	s.log.Info().Str("person", l.person.id()).Msg("web: signed in")
	to := "/threads"
	if l.thread != "" {
		to = threadPath(l.person.Platform, l.thread)
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

func (s *Server) setCookie(w http.ResponseWriter, id string) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: "/", HttpOnly: true, Secure: s.secure,
		SameSite: http.SameSiteStrictMode, MaxAge: int(s.cfg.SessionTTL / time.Second)})
}

func tooMany(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "60")
	http.Error(w, "too many sign-ins from your address; try again in a minute", http.StatusTooManyRequests)
}

func (s *Server) adminSignInPage(w http.ResponseWriter, r *http.Request) {
	s.show(w, http.StatusOK, "adminsignin", nil)
}

func (s *Server) adminSignInPost(w http.ResponseWriter, r *http.Request) {
	if !s.signIn.allow(s.clientAddr(r)) {
		tooMany(w)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	name, ok := "", false
	if crossSiteSafe(r) && s.cfg.Admin != nil {
		name, ok = s.cfg.Admin(r.PostFormValue("token"))
	}
	if !ok {
		s.show(w, http.StatusForbidden, "adminsignin", map[string]string{"Problem": "That is not the token of an operator (web_admin = true)."})
		return
	}
	s.setCookie(w, s.signIn.start(Person{Admin: name}))
	s.log.Info().Str("person", "admin:"+name).Msg("web: operator signed in")
	http.Redirect(w, r, "/admin", http.StatusSeeOther)
}

func (s *Server) signOut(w http.ResponseWriter, r *http.Request, ss session) {
	if c, _ := r.Cookie(cookieName); c != nil {
		s.signIn.end(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", HttpOnly: true, Secure: s.secure,
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// listPage is the threads list's data.
type listPage struct {
	Person  string
	CSRF    string
	Filter  string
	Threads []listRow
}

type listRow struct {
	ThreadInfo
	Path    string
	Mine    bool
	MayAct  bool
	Channel string
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, ss session) {
	if ss.person.Admin != "" {
		http.Redirect(w, r, "/admin", http.StatusSeeOther)
		return
	}
	filter := r.URL.Query().Get("filter")
	page := listPage{Person: ss.person.name(), CSRF: ss.csrf, Filter: filter}
	t := s.threads(ss.person.Platform)
	u := ss.person.User
	for _, in := range s.hub.list() {
		if t == nil || in.Platform != ss.person.Platform || !t.MaySee(in.Thread, u) {
			continue
		}
		channel, starter, _ := t.Conversation(in.Thread)
		row := listRow{ThreadInfo: in, Path: threadPath(in.Platform, in.Thread), Channel: channel,
			Mine: starter == u.ID || in.StarterID == u.ID, MayAct: t.MayAct(in.Thread, u)}
		switch filter {
		case "mine":
			if !row.Mine {
				continue
			}
		case "waiting":
			if !row.Waiting || !row.MayAct {
				continue
			}
		}
		page.Threads = append(page.Threads, row)
	}
	s.show(w, http.StatusOK, "list", page)
}

// threadData is a thread page's.
type threadData struct {
	Person, CSRF     string
	Platform, Thread string
	Path             string
	Title            string
	MayAct           bool
	Running          bool
	Turns            []turnShot
	Asks             []askShot
	// Queue, Choices: the thread's waiting messages and the agent's
	// options (see Controls); ChatLink, ChatName: the thread in its chat.
	Queue    []thread.WaitingMessage
	Choices  []choiceShot
	ChatLink string
	ChatName string
}

// seen is the thread of r's path, when the signed-in person may see it.
func (s *Server) seen(w http.ResponseWriter, r *http.Request, ss session) (Threads, key, bool) {
	k := key{r.PathValue("platform"), r.PathValue("thread")}
	t := s.threads(k.platform)
	if ss.person.Admin != "" || k.platform != ss.person.Platform || t == nil || !t.MaySee(k.thread, ss.person.User) {
		http.Error(w, "no such thread, or not one you may see", http.StatusNotFound)
		return nil, k, false
	}
	return t, k, true
}

func (s *Server) threadPage(w http.ResponseWriter, r *http.Request, ss session) {
	t, k, ok := s.seen(w, r, ss)
	if !ok {
		return
	}
	snap, _ := s.hub.snapshot(k)
	d := threadData{Person: ss.person.name(), CSRF: ss.csrf, Platform: k.platform, Thread: k.thread,
		Path: threadPath(k.platform, k.thread), MayAct: t.MayAct(k.thread, ss.person.User),
		Running: snap.Running, Turns: snap.Turns, Asks: snap.Asks, Title: k.thread}
	s.controls(t, k, ss.person.User, snap, &d)
	if len(snap.Turns) > 0 {
		d.Title = excerpt(snap.Turns[0].Turn.Prompt, 90)
	}
	s.show(w, http.StatusOK, "thread", d)
}

// The pace of a page's updates: at most one every watchPace, the
// latest state then, so that a turn streaming fast is neither rendered
// nor sent for every chunk (what a page is sent grows with the time the
// turn takes, not with its updates); and a comment every watchBeat to
// keep the connection open. A page that takes longer than watchWrite to
// take an update is dropped.
const (
	watchPace  = 100 * time.Millisecond
	watchBeat  = 25 * time.Second
	watchWrite = 10 * time.Second
)

// events streams a thread's changes to its page (Server-Sent Events):
// each turn that changed, its blocks that changed (a "turn" event, see
// turnEvent), and the controls ("controls": html) when the person may
// act on it.
func (s *Server) events(w http.ResponseWriter, r *http.Request, ss session) {
	t, k, ok := s.seen(w, r, ss)
	if !ok {
		return
	}
	x, err := s.hub.watch(k, ss.person.id())
	if err != nil {
		http.Error(w, err.Error(), http.StatusTooManyRequests)
		return
	}
	defer s.hub.unwatch(x)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// sent is by turn the version the page has, and its blocks when this
	// stream sent them (a page's own are not known: a change to one of
	// those is sent whole).
	type has struct {
		version uint64
		blocks  []render.Block
	}
	sent := map[uint64]has{}
	for _, v := range strings.Split(r.URL.Query().Get("have"), ",") {
		var seq, ver uint64
		if _, err := fmt.Sscanf(v, "%d.%d", &seq, &ver); err == nil && len(sent) < maxTurns {
			sent[seq] = has{version: ver}
		}
	}
	lastControls := ""
	beat := time.NewTicker(watchBeat)
	defer beat.Stop()
	pace := time.NewTimer(0)
	defer pace.Stop()
	select { // what changed since the page was made
	case x.changed <- struct{}{}:
	default:
	}
	for {
		select {
		case <-x.changed:
		case <-beat.C:
			if !s.write(rc, w, ": beat\n\n") {
				return
			}
			continue
		case <-r.Context().Done():
			return
		}
		select {
		case <-pace.C:
		case <-r.Context().Done():
			return
		}
		if !t.MaySee(k.thread, ss.person.User) {
			s.write(rc, w, "event: gone\ndata: {}\n\n")
			return
		}
		snap, _ := s.hub.snapshot(k)
		var out strings.Builder
		for _, ts := range snap.Turns {
			h, ok := sent[ts.Seq]
			if ok && h.version >= ts.Version {
				continue
			}
			x, err := s.rendered.rendering(r.Context(), k, ts)
			if err != nil {
				if r.Context().Err() == nil {
					s.log.Error().Err(err).Msg("web: turn not rendered")
				}
				return
			}
			out.Write(x.eventFor(h.version, h.blocks))
			sent[ts.Seq] = has{x.version, x.blocks}
		}
		gone := false
		for seq := range sent {
			if !hasTurn(snap.Turns, seq) {
				delete(sent, seq)
				gone = true
			}
		}
		if gone {
			s.rendered.forget(k, snap.Turns)
		}
		d := threadData{CSRF: ss.csrf, Path: threadPath(k.platform, k.thread), MayAct: t.MayAct(k.thread, ss.person.User),
			Running: snap.Running, Asks: snap.Asks}
		s.controls(t, k, ss.person.User, snap, &d)
		var b bytes.Buffer
		if err := s.pages.ExecuteTemplate(&b, "controls", d); err == nil && b.String() != lastControls {
			lastControls = b.String()
			data, _ := json.Marshal(map[string]any{"html": lastControls})
			fmt.Fprintf(&out, "event: controls\ndata: %s\n\n", data)
		}
		if out.Len() > 0 && !s.write(rc, w, out.String()) {
			return
		}
		pace.Reset(watchPace)
	}
}

func hasTurn(turns []turnShot, seq uint64) bool {
	for _, t := range turns {
		if t.Seq == seq {
			return true
		}
	}
	return false
}

// write sends text to a page within watchWrite; false if it did not
// take it (the page is dropped).
func (s *Server) write(rc *http.ResponseController, w http.ResponseWriter, text string) bool {
	rc.SetWriteDeadline(time.Now().Add(s.writeWait))
	if _, err := w.Write([]byte(text)); err != nil {
		return false
	}
	return rc.Flush() == nil
}

// acted answers a control's form: back to the thread's page, or, for a
// page's script (which asks for JSON), a word of what happened.
func acted(w http.ResponseWriter, r *http.Request, path string, code int, msg string) {
	if strings.Contains(r.Header.Get("Accept"), "application/json") {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(map[string]string{"message": msg})
		return
	}
	if code >= 400 {
		http.Error(w, msg, code)
		return
	}
	http.Redirect(w, r, path, http.StatusSeeOther)
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request, ss session) {
	t, k, ok := s.seen(w, r, ss)
	if !ok {
		return
	}
	path := threadPath(k.platform, k.thread)
	cancelled, err := t.CancelFor(k.thread, ss.person.User, via)
	switch {
	case err != nil:
		acted(w, r, path, http.StatusForbidden, err.Error())
	case !cancelled:
		acted(w, r, path, http.StatusConflict, "Nothing is running in this thread.")
	default:
		acted(w, r, path, http.StatusOK, "Cancelled.")
	}
}

// asked is the thread an answer's request names, when the person may see
// it, with the open request (permission or question) the page named;
// otherwise it answers the request and ok is false. path is the thread's
// page.
func (s *Server) asked(w http.ResponseWriter, r *http.Request, ss session) (t Threads, path string, a openAsk, ok bool) {
	t, k, ok := s.seen(w, r, ss)
	if !ok {
		return nil, "", a, false
	}
	return t, threadPath(k.platform, k.thread), s.hub.open(k, r.PostFormValue("ask")), true
}

func (s *Server) permit(w http.ResponseWriter, r *http.Request, ss session) {
	t, path, a, ok := s.asked(w, r, ss)
	req := a.req
	if !ok || req == nil {
		if ok {
			acted(w, r, path, http.StatusConflict, "This permission request is no longer open.")
		}
		return
	}
	switch err := t.PermitFor(req, r.PostFormValue("option"), ss.person.User, via); {
	case err == thread.ErrNotAllowed:
		acted(w, r, path, http.StatusForbidden, err.Error())
	case err != nil:
		acted(w, r, path, http.StatusConflict, err.Error())
	default:
		acted(w, r, path, http.StatusOK, "Answered.")
	}
}

// maxMessageBytes bounds a message written on a thread's page.
const maxMessageBytes = 64 << 10

func (s *Server) send(w http.ResponseWriter, r *http.Request, ss session) {
	t, k, ok := s.seen(w, r, ss)
	if !ok {
		return
	}
	path := threadPath(k.platform, k.thread)
	text := strings.TrimSpace(r.PostFormValue("text"))
	switch {
	case text == "":
		acted(w, r, path, http.StatusBadRequest, "Write a message first.")
		return
	case len(text) > maxMessageBytes:
		acted(w, r, path, http.StatusRequestEntityTooLarge, fmt.Sprintf("A message here is at most %d KiB.", maxMessageBytes>>10))
		return
	}
	if err := t.SendFor(r.Context(), k.thread, ss.person.User, via, text); err != nil {
		code := http.StatusConflict
		if err == thread.ErrNotAllowed {
			code = http.StatusForbidden
		}
		acted(w, r, path, code, err.Error())
		return
	}
	acted(w, r, path, http.StatusOK, "Sent.")
}

// adminData is the operator's view's.
type adminData struct {
	Person, CSRF string
	Sections     []Section
	Web          Stats
	// Failures are the turns that failed lately, the newest first.
	Failures []Failure
}

func (s *Server) admin(w http.ResponseWriter, r *http.Request, ss session) {
	if ss.person.Admin == "" {
		http.Error(w, "the operator's view is for an API token with web_admin = true", http.StatusForbidden)
		return
	}
	d := adminData{Person: ss.person.name(), CSRF: ss.csrf, Web: s.Stats(), Failures: s.hub.recentFailures()}
	if s.cfg.Status != nil {
		d.Sections = s.cfg.Status(r.Context())
	}
	s.show(w, http.StatusOK, "admin", d)
}

// answer answers a question of the agent's: its form's fields, read as
// each field reads typed text, or declined.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, ss session) {
	t, path, a, ok := s.asked(w, r, ss)
	q := a.q
	if !ok || q == nil {
		if ok {
			acted(w, r, path, http.StatusConflict, "This question is no longer open.")
		}
		return
	}
	res := acp.ElicitationResult{Action: acp.ActionDecline}
	if r.PostFormValue("action") == acp.ActionAccept {
		res = acp.ElicitationResult{Action: acp.ActionAccept, Content: map[string]any{}}
		if q.Mode == acp.ElicitForm && q.Schema != nil {
			for i := range q.Schema.Fields {
				f := &q.Schema.Fields[i]
				text := strings.Join(r.PostForm["f:"+f.Key], ",")
				if f.Kind == acp.FieldBoolean && text == "" {
					text = "false"
				}
				if strings.TrimSpace(text) == "" {
					continue
				}
				v, err := f.Parse(text)
				if err != nil {
					acted(w, r, path, http.StatusBadRequest, f.Label()+": "+err.Error())
					return
				}
				res.Content[f.Key] = v
			}
		}
	}
	switch err := t.AnswerFor(q, res, ss.person.User, via); {
	case err == thread.ErrNotAllowed:
		acted(w, r, path, http.StatusForbidden, err.Error())
	case err != nil:
		acted(w, r, path, http.StatusConflict, err.Error())
	default:
		acted(w, r, path, http.StatusOK, "Answered.")
	}
}
