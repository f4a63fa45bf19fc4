// Package web is the broker's web front end: people sign in with a link
// the chat gives them, see the threads they may see, follow each turn
// live and act on the threads they may act on, by the thread layer's
// one rule; an operator signs in with an API token.
package web

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"acpbroker/acp"
	"acpbroker/chat/thread"
	"acpbroker/listener"
	"acpbroker/web/render"

	"github.com/rs/zerolog"
)

// Threads is a chat platform's threads as the web sees and acts on them
// (thread.Server): every question is answered by the thread layer's
// rule, against the access lists in force now.
type Threads interface {
	MaySee(thread string, u thread.User) bool
	MayAct(thread string, u thread.User) bool
	CancelFor(thread string, u thread.User, via string) (bool, error)
	PermitFor(req *acp.PermissionRequest, optionID string, u thread.User, via string) error
	AnswerFor(req *acp.ElicitationRequest, res acp.ElicitationResult, u thread.User, via string) error
	SendFor(ctx context.Context, thread string, u thread.User, via, text string) error
	Conversation(thread string) (channel, starter string, ok bool)
}

var _ Threads = (*thread.Server)(nil)

// Config configures a Server.
type Config struct {
	// PublicURL is where people reach the Server, for the links it gives
	// ("": http:// and the listener's address). An https one makes its
	// cookie Secure.
	PublicURL string
	// SessionTTL is how long a sign-in lasts (default 12h).
	SessionTTL time.Duration
	// Admin reports the name of the API token tok, if it may sign in to
	// the operator's view.
	Admin func(tok string) (name string, ok bool)
	// Status, if set, is the operator's view's facts, as `broker status`
	// reads them: a value the page shows as sections of lines.
	Status func(ctx context.Context) []Section
	// State, if set, keeps what the pages show across a restart: New
	// loads it, and the Server gives it the changes.
	State State
	// TrustedProxies are the reverse proxies whose X-Forwarded-For is
	// believed, for the address the sign-in's limit counts by (none: the
	// connection's own address).
	TrustedProxies []netip.Prefix
	// MaxConnections bounds the connections held open (default 256).
	MaxConnections int
	// Now is the clock of the sign-in links and sessions (nil:
	// time.Now).
	Now    func() time.Time
	Logger zerolog.Logger
}

// Section is a part of the operator's view: a heading and its lines.
type Section struct {
	Title string
	Lines []string
}

// via names the web in what the chat says of what was done here.
const via = "on the web"

// Server serves the web front end. Its methods are safe for concurrent
// use.
type Server struct {
	cfg    Config
	log    zerolog.Logger
	now    func() time.Time
	hub    *hub
	signIn *signIns
	secure bool
	pages  *template.Template
	// rendered are the turns' renderings the watching pages share.
	rendered *renders
	// writeWait is how long a watching page may take to take an update
	// before it is dropped (watchWrite).
	writeWait time.Duration

	mu        sync.Mutex
	platforms map[string]Threads
	base      string // PublicURL, or the listener's

	ln   *listener.Limited
	http *http.Server
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup
}

//go:embed assets
var assets embed.FS

// New is a Server of cfg, serving nothing yet (see Listen, Handler).
func New(cfg Config) *Server {
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	s := &Server{cfg: cfg, log: cfg.Logger, now: now, hub: newHub(now), signIn: newSignIns(cfg.SessionTTL, now),
		secure: strings.HasPrefix(cfg.PublicURL, "https://"), platforms: map[string]Threads{}, base: cfg.PublicURL,
		writeWait: watchWrite}
	s.pages = template.Must(template.New("").Funcs(template.FuncMap{
		"turn": render.TurnHTML, "markdown": render.Markdown, "ago": s.ago,
		"askIn": func(path, csrf string, a askShot) questionForm { return questionForm{Path: path, CSRF: csrf, Ask: a} },
	}).ParseFS(assets, "assets/*.html"))
	s.rendered = newRenders()
	s.ctx, s.stop = context.WithCancel(context.Background())
	if cfg.State != nil {
		threads, failures, err := cfg.State.WebState()
		if err != nil {
			s.log.Warn().Err(err).Msg("the pages' threads of the last run not read")
		}
		s.hub.restore(threads, failures)
		s.hub.saving = true
		s.wg.Go(s.saver)
	}
	return s
}

// Platform adds a chat platform's threads, by its name, and returns what
// its thread.Server is given (SetWeb): the sign-in links, the pages'
// addresses and the observer of its turns.
func (s *Server) Platform(name string, t Threads) thread.Web {
	s.mu.Lock()
	s.platforms[name] = t
	s.mu.Unlock()
	return thread.Web{
		SignIn: func(u thread.User, th string) (string, error) {
			return s.SignInLink(Person{Platform: name, User: u}, th)
		},
		ThreadURL: func(th string) string { return s.url(threadPath(name, th)) },
		Observer:  observer{h: s.hub, platform: name},
	}
}

func (s *Server) threads(platform string) Threads {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.platforms[platform]
}

// SignInLink is a link that signs p in, once, within LinkTTL, and then
// shows thread ("": the list).
func (s *Server) SignInLink(p Person, thread string) (string, error) {
	tok, err := s.signIn.link(p, thread)
	if err != nil {
		return "", err
	}
	return s.url("/signin?t=" + tok), nil
}

// url is path on the Server's public address.
func (s *Server) url(path string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.base + path
}

// threadPath is a thread's page.
func threadPath(platform, th string) string {
	return "/t/" + url.PathEscape(platform) + "/" + url.PathEscape(th)
}

// Listen serves on addr until Close.
func (s *Server) Listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("web.listen: %w", err)
	}
	s.mu.Lock()
	if s.base == "" {
		s.base = "http://" + ln.Addr().String()
	}
	s.mu.Unlock()
	max := s.cfg.MaxConnections
	if max <= 0 {
		max = 256
	}
	s.ln = listener.Limit(ln, max)
	s.http = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute, ConnState: s.ln.ConnState(nil), BaseContext: func(net.Listener) context.Context { return s.ctx }}
	s.wg.Go(func() {
		if err := s.http.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error().Err(err).Msg("the web front end stopped serving")
		}
	})
	return nil
}

// Addr is the address the Server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is the Server's public address.
func (s *Server) URL() string { return s.url("") }

// Close stops serving: the pages watching threads end, requests in
// flight get until ctx ends. It returns once the Server's goroutines are
// gone.
func (s *Server) Close(ctx context.Context) {
	s.stop()
	if s.http != nil {
		if err := s.http.Shutdown(ctx); err != nil {
			s.http.Close()
		}
	}
	s.wg.Wait()
}

// Stats are the Server's gauges.
type Stats struct {
	Links, Sessions, Watchers, Threads int
	// Renders, RenderBytes: the turns' renderings the watching pages
	// share, kept, and their bytes.
	Renders, RenderBytes int
}

// Stats reads the gauges.
func (s *Server) Stats() Stats {
	links, sessions := s.signIn.counts()
	s.hub.mu.Lock()
	threads := len(s.hub.threads)
	s.hub.mu.Unlock()
	renders, renderBytes := s.rendered.size()
	return Stats{Links: links, Sessions: sessions, Watchers: s.hub.watching(), Threads: threads,
		Renders: renders, RenderBytes: renderBytes}
}

// ago says how long ago t was, for people.
func (s *Server) ago(t time.Time) string {
	d := s.now().Sub(t)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h ago", int(d/time.Hour))
	}
	return fmt.Sprintf("%d days ago", int(d/(24*time.Hour)))
}

// questionForm is a question's form in a thread's page.
type questionForm struct {
	Path, CSRF string
	Ask        askShot
}
