// Package fakediscord is a fake Discord, a real HTTP and WebSocket server on 127.0.0.1 that speaks enough of the REST v9 API and the gateway for an unmodified discordgo client to run against it in tests.
//
// A test creates a Server with New, points its discordgo session at it
// (session.Client = srv.HTTPClient(), or any client whose transport is
// srv.Transport()), opens the session, and then plays the users' side:
// SendMessage, AddReaction, ClickButton and SlashCommand dispatch gateway
// events, while every REST call the bot makes is answered, recorded and
// applied to a model of the guild (channels, threads, messages with their
// edits, reactions, commands, interactions) that the test inspects with
// the accessors and waits on with WaitFor or Await.
//
// The fake follows Discord where a bot could be caught out by it: message
// content is withheld from sessions without the MESSAGE_CONTENT intent,
// the bot receives its own messages back, messages over 2,000 characters
// and empty messages are refused, a thread started from a message takes
// that message's id, an interaction must be answered within three
// seconds and only once, and every response carries rate-limit headers
// backed by real per-route buckets.
//
// All methods of Server are safe for concurrent use.
package fakediscord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"acpbroker/internal/fakehttp"
)

// Options configures a Server. The zero value is usable.
type Options struct {
	// Token, if set, is the bot token (without the "Bot " prefix) the
	// fake accepts: REST calls must carry "Authorization: Bot <Token>"
	// (else 401) and IDENTIFY and RESUME must present it, with or
	// without the prefix (else close code 4004). Empty accepts any.
	Token string
	// BotID and BotName describe the bot user (defaults: a fresh
	// snowflake and "fakebot"). ApplicationID defaults to BotID, as it is
	// for applications created since 2019.
	BotID         string
	BotName       string
	ApplicationID string

	// HeartbeatInterval is sent in HELLO (default 41.25s). Clients
	// heartbeat at this pace; discordgo gives up on a connection after
	// five intervals without an ACK. With short intervals a discordgo
	// Session.Close (which sleeps a second holding the session's lock)
	// is likely to catch its heartbeat goroutine due, which then fails
	// on the closed connection and starts a reconnect of its own; set
	// ShouldReconnectOnError to false before closing a session for good.
	HeartbeatInterval time.Duration

	// RateLimits overrides bucket sizes by route key (the Route*
	// constants, e.g. RouteCreateMessage). Routes not named use
	// DefaultRateLimit (default 50 per second). DefaultRateLimits lists
	// the routes limited more tightly out of the box: message create and
	// edit, 5 per 5s per channel, and channel edits (renames), 2 per 10
	// minutes per channel, as on Discord. NoRateLimits turns
	// bucket limiting off; the headers are still sent and Inject429
	// still works.
	RateLimits       map[string]RateLimit
	DefaultRateLimit RateLimit
	NoRateLimits     bool

	// InteractionDeadline is how long after INTERACTION_CREATE the
	// initial response is accepted (default 3s, as on Discord). A later
	// callback is recorded with Late set and answered 404 Unknown
	// interaction (code 10062).
	InteractionDeadline time.Duration

	// AttachmentDelay holds each attachment download this long before
	// answering, as a slow CDN would.
	AttachmentDelay time.Duration

	// MaxUploadBytes bounds the files of one request (default 10 MiB);
	// more is answered 413 (code 40005).
	MaxUploadBytes int64

	// NoEcho stops the gateway events that Discord sends a bot about its
	// own actions (MESSAGE_CREATE for its messages, MESSAGE_UPDATE,
	// MESSAGE_DELETE, reactions, THREAD_CREATE).
	NoEcho bool
	// IgnoreIntents delivers every event in full whatever intents the
	// session identified with. By default events outside the intents are
	// not sent and, without MESSAGE_CONTENT, guild messages from others
	// that do not mention the bot arrive without content, embeds,
	// attachments or components.
	IgnoreIntents bool
	// DenyPrivilegedIntents makes IDENTIFY with a privileged intent
	// (GUILD_MEMBERS, GUILD_PRESENCES, MESSAGE_CONTENT) fail with close
	// code 4014, as for a bot whose intents are not enabled in the
	// developer portal.
	DenyPrivilegedIntents bool

	// WaitTimeout bounds Await (default 10s).
	WaitTimeout time.Duration

	// MaxRequests, if set, bounds the requests Requests remembers: past
	// twice that many, only the latest MaxRequests are kept, so that a
	// long run does not hold every request body it ever served.
	MaxRequests int
	// MaxBacklog, if set, bounds the dispatches each gateway session
	// keeps for replay: past twice that many only the latest MaxBacklog
	// are kept, and a RESUME that needs older ones is refused with
	// INVALID_SESSION, as Discord refuses a session gone too long. The
	// sessions of clients that died without closing keep growing
	// otherwise.
	MaxBacklog int
}

// RateLimit is a bucket size: Limit requests per Per window.
type RateLimit struct {
	Limit int
	Per   time.Duration
}

// DefaultRateLimits returns the routes the fake limits more tightly than
// Options.DefaultRateLimit when Options.RateLimits does not say
// otherwise.
func DefaultRateLimits() map[string]RateLimit {
	return map[string]RateLimit{
		RouteCreateMessage: {Limit: 5, Per: 5 * time.Second},
		RouteEditMessage:   {Limit: 5, Per: 5 * time.Second},
		RouteModifyChannel: {Limit: 2, Per: 10 * time.Minute},
	}
}

// Server is a running fake Discord. Create it with New; it is closed by
// the test's cleanup, or earlier by Close.
type Server struct {
	// Injector scripts and draws the requests' failures: SetChaos and
	// ChaosCounts are its; Inject429 and the others script through it.
	fakehttp.Waiting // Changed, WaitFor and Await, over changes
	*fakehttp.Injector[Request, fault]

	tb        testing.TB
	opts      Options
	hs        *httptest.Server
	addr      string
	transport *http.Transport
	wg        sync.WaitGroup // gateway goroutines
	closeOnce sync.Once
	quit      chan struct{} // closed when Close starts: ends stalled requests

	mu      sync.Mutex
	closed  bool
	changes fakehttp.Changes // wakes WaitFor; closed with the server
	lastID  uint64
	bot     User
	appID   string

	users        map[string]*User
	guilds       map[string]*guild
	guildOrder   []string
	channels     map[string]*Channel
	chanMsgs     map[string][]string // message ids by channel, in creation order
	messages     map[string]*message
	commands     []*Command
	interactions map[string]*interaction
	byToken      map[string]*interaction
	requests     []Request
	downloads    []string // names of the attachments fetched, in order
	typing       map[string]int
	buckets      map[string]*bucket
	routeTable   []route

	sessions      []*gwSession
	conns         map[*gwConn]struct{}
	stats         GatewayStats
	rejectResumes int
	noAcks        bool
	gatewayDown   bool
}

// New starts a fake Discord on 127.0.0.1 and registers its Close with
// tb.Cleanup. The helpers that play a user (SendMessage, ClickButton, …)
// report misuse, such as an unknown channel, with tb.Errorf.
func New(tb testing.TB, opts Options) *Server {
	tb.Helper()
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = 41250 * time.Millisecond
	}
	if opts.DefaultRateLimit.Limit <= 0 || opts.DefaultRateLimit.Per <= 0 {
		opts.DefaultRateLimit = RateLimit{Limit: 50, Per: time.Second}
	}
	limits := DefaultRateLimits()
	for k, v := range opts.RateLimits {
		limits[k] = v
	}
	opts.RateLimits = limits
	if opts.InteractionDeadline <= 0 {
		opts.InteractionDeadline = 3 * time.Second
	}
	if opts.MaxUploadBytes <= 0 {
		opts.MaxUploadBytes = 10 << 20
	}
	if opts.WaitTimeout <= 0 {
		opts.WaitTimeout = 10 * time.Second
	}
	s := &Server{
		Injector:     fakehttp.NewInjector[Request](http.StatusBadGateway, func(f fakehttp.Fault) fault { return fault{Fault: f} }),
		tb:           tb,
		opts:         opts,
		quit:         make(chan struct{}),
		users:        map[string]*User{},
		guilds:       map[string]*guild{},
		channels:     map[string]*Channel{},
		chanMsgs:     map[string][]string{},
		messages:     map[string]*message{},
		interactions: map[string]*interaction{},
		byToken:      map[string]*interaction{},
		typing:       map[string]int{},
		buckets:      map[string]*bucket{},
		conns:        map[*gwConn]struct{}{},
	}
	s.Waiting = fakehttp.NewWaiting(&s.changes, ErrClosed, tb, opts.WaitTimeout, "fakediscord")
	s.bot = User{ID: opts.BotID, Username: opts.BotName, Bot: true}
	if s.bot.ID == "" {
		s.bot.ID = s.newIDLocked()
	}
	if s.bot.Username == "" {
		s.bot.Username = "fakebot"
	}
	s.routeTable = s.routes()
	s.appID = opts.ApplicationID
	if s.appID == "" {
		s.appID = s.bot.ID
	}
	bot := s.bot
	s.users[bot.ID] = &bot

	mux := http.NewServeMux()
	mux.HandleFunc("/api/", s.serveAPI)
	mux.HandleFunc("/ws", s.serveGateway)
	mux.HandleFunc("/ws/", s.serveGateway)
	mux.HandleFunc("/resume-ws", s.serveGateway)
	mux.HandleFunc("/resume-ws/", s.serveGateway)
	mux.HandleFunc("/attachments/", s.serveAttachment)
	s.hs = httptest.NewServer(mux)
	s.addr = s.hs.Listener.Addr().String()
	s.transport = &http.Transport{
		Proxy:               nil,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     30 * time.Second,
	}
	tb.Cleanup(s.Close)
	return s
}

// Close stops the server: it closes every gateway connection (a connected
// discordgo session will then try to reconnect for ever, so close the
// session first), the HTTP server and the idle connections of
// HTTPClient/Transport, and returns once all of the server's goroutines
// have ended. It is idempotent.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.quit)
		s.mu.Lock()
		s.closed = true
		for c := range s.conns {
			c.push(outFrame{kind: frameAbort})
		}
		s.changes.Close()
		s.mu.Unlock()
		s.hs.Close()
		s.wg.Wait()
		s.transport.CloseIdleConnections()
	})
}

// URL returns the server's base, http://127.0.0.1:PORT.
func (s *Server) URL() string { return "http://" + s.addr }

// APIURL returns the REST base, http://127.0.0.1:PORT/api/v9/.
func (s *Server) APIURL() string { return s.URL() + "/api/v9/" }

// GatewayURL returns the gateway address that GET /gateway hands out.
func (s *Server) GatewayURL() string { return "ws://" + s.addr + "/ws" }

// Bot returns the bot user.
func (s *Server) Bot() User { return s.bot }

// ApplicationID returns the application id (the bot's id unless
// Options.ApplicationID says otherwise).
func (s *Server) ApplicationID() string { return s.appID }

// Transport returns a RoundTripper that sends requests for Discord's API
// (https://discord.com/api/..., also discordapp.com) to this server,
// version path kept, and passes requests already addressed to the server.
// Anything else fails without leaving the machine. Its connections are
// closed by Close.
func (s *Server) Transport() http.RoundTripper { return rewriter{s} }

// HTTPClient returns a client using Transport, ready to be a discordgo
// Session's Client.
func (s *Server) HTTPClient() *http.Client {
	return &http.Client{Transport: s.Transport(), Timeout: 20 * time.Second}
}

type rewriter struct{ s *Server }

func (rt rewriter) RoundTrip(req *http.Request) (*http.Response, error) {
	host := strings.ToLower(req.URL.Hostname())
	switch {
	case req.URL.Host == rt.s.addr:
		return rt.s.transport.RoundTrip(req)
	case (host == "discord.com" || host == "discordapp.com" || host == "www.discord.com") &&
		strings.HasPrefix(req.URL.Path, "/api/"):
		r := req.Clone(req.Context())
		r.URL.Scheme = "http"
		r.URL.Host = rt.s.addr
		r.Host = rt.s.addr
		return rt.s.transport.RoundTrip(r)
	}
	if req.Body != nil {
		req.Body.Close()
	}
	return nil, fmt.Errorf("fakediscord: %s is not served by the fake", req.URL.Redacted())
}

func (s *Server) notifyLocked() { s.changes.Notify() }

// ErrClosed is returned by WaitFor when the server is closed.
var ErrClosed = errors.New("fakediscord: server closed")

// WaitMessage waits for a message in channelID satisfying match (nil
// matches any) and returns it.
func (s *Server) WaitMessage(ctx context.Context, channelID string, match func(Message) bool) (Message, error) {
	return fakehttp.WaitFirst(ctx, s.WaitFor, func() []Message { return s.Messages(channelID) }, match)
}

// NewID returns a fresh snowflake, larger than every id the server made
// before.
func (s *Server) NewID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.newIDLocked()
}

// discordEpoch is 2015-01-01T00:00:00Z in Unix milliseconds.
const discordEpoch = 1420070400000

func (s *Server) newIDLocked() string {
	id := uint64(time.Now().UnixMilli()-discordEpoch) << 22
	if id <= s.lastID {
		id = s.lastID + 1
	}
	s.lastID = id
	return strconv.FormatUint(id, 10)
}

func (s *Server) errorf(format string, args ...any) {
	s.tb.Helper()
	s.tb.Errorf("fakediscord: "+format, args...)
}

// serveAttachment serves the files of uploaded attachments at the URLs
// put in their "url" field.
func (s *Server) serveAttachment(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/attachments/"), "/")
	if r.Method != http.MethodGet || len(parts) != 3 {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	var data []byte
	var ctype string
	found := false
	for _, mid := range s.chanMsgs[parts[0]] {
		for _, a := range s.messages[mid].Attachments {
			if a.ID == parts[1] {
				data, ctype, found = a.Data, a.ContentType, true
				s.downloads = append(s.downloads, a.Filename)
			}
		}
	}
	s.mu.Unlock()
	if !found {
		http.NotFound(w, r)
		return
	}
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	if d := s.opts.AttachmentDelay; d > 0 {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.Write(data)
}

// Downloads lists the file names of the attachments fetched from the
// server, in order, once per fetch.
func (s *Server) Downloads() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.downloads)
}

func (s *Server) attachmentURL(channelID, id, name string) string {
	return s.URL() + "/attachments/" + channelID + "/" + id + "/" + url.PathEscape(name)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("fakediscord: marshal: " + err.Error())
	}
	return b
}
