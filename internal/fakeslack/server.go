package fakeslack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"acpbroker/internal/fakehttp"
)

// Options configures a Server. The zero value is usable.
type Options struct {
	// BotToken is the bot token (xoxb-…) Web API calls must carry, as
	// "Authorization: Bearer" or as the token argument; AppToken the
	// app-level token (xapp-…) apps.connections.open must carry. They
	// default to DefaultBotToken and DefaultAppToken.
	BotToken string
	AppToken string
	// SigningSecret signs what the fake POSTs in HTTP mode (default
	// DefaultSigningSecret). VerificationToken is the deprecated token
	// put in payloads (default DefaultVerificationToken).
	SigningSecret     string
	VerificationToken string

	// The workspace and the app's bot: ids are made up when empty.
	TeamID     string
	TeamDomain string // default "fake"
	TeamName   string // default "Fake Workspace"
	BotUserID  string
	BotID      string
	AppID      string
	BotName    string // default "fakebot"

	// AckTimeout is how long an envelope, or an HTTP delivery, may go
	// unanswered (default 3s, as on Slack). An Events API event not
	// acknowledged in time is sent again after each of RetryDelays
	// (default 0, 1 minute, 5 minutes: three retries, as on Slack; an
	// empty list: none), with retry_attempt (X-Slack-Retry-Num) counting
	// them; interactions and slash commands are not sent again.
	AckTimeout  time.Duration
	RetryDelays []time.Duration

	// PingInterval is how often a Socket Mode connection is pinged
	// (default 10s). slack-go's socketmode client reconnects after 30s
	// without a ping (socketmode.OptionPingInterval).
	PingInterval time.Duration
	// MaxConnections bounds the Socket Mode connections open at once
	// (default 10, as on Slack); one more is told to disconnect with
	// reason too_many_websockets.
	MaxConnections int
	// DisconnectGrace is how long a connection told to disconnect is
	// kept before the fake closes it (default 10s).
	DisconnectGrace time.Duration

	// Events lists the event subscriptions of the app (default
	// DefaultEvents): a message event goes out only if message.channels,
	// message.groups, message.im or message.mpim names its kind of
	// conversation.
	Events []string
	// NoEcho stops the events Slack sends an app about what its own bot
	// did (its messages, their edits and deletions, its reactions).
	NoEcho bool

	// RateLimits overrides the limit of a method (by name, e.g.
	// "chat.update"); DefaultRateLimits lists the others. NoRateLimits
	// turns limiting off; Inject429 and Chaos still answer 429.
	RateLimits   map[string]RateLimit
	NoRateLimits bool
	// NonMarketplace models an app distributed outside the Slack
	// Marketplace: conversations.history and conversations.replies are
	// limited to one call a minute and 15 messages a page.
	NonMarketplace bool

	// TriggerLifetime is how long a trigger_id can open a modal (default
	// 3s). StreamLifetime is how long a streamed message accepts appends
	// (default 5 minutes).
	TriggerLifetime time.Duration
	StreamLifetime  time.Duration
	// MaxTextLength bounds a message's text (default 40,000 characters);
	// more is answered msg_too_long. Slack's documentation advises 4,000.
	MaxTextLength int
	// MaxFileSize bounds an upload (default 1 GiB, as on Slack; the fake
	// holds the bytes in memory).
	MaxFileSize int64

	// WaitTimeout bounds Await (default 10s).
	WaitTimeout time.Duration
	// MaxCalls, if set, bounds the calls Calls remembers: past twice that
	// many only the latest MaxCalls are kept. MaxEnvelopes does the same
	// for the settled envelopes Envelopes remembers.
	MaxCalls     int
	MaxEnvelopes int
}

// Default credentials.
const (
	DefaultBotToken          = "xoxb-1-fake-bot-token"
	DefaultAppToken          = "xapp-1-A1-fake-app-token"
	DefaultSigningSecret     = "8f742231b10e8888abcd99yyyzzz85a5"
	DefaultVerificationToken = "fakeVerificationToken"
)

// DefaultEvents are the event subscriptions of an app unless
// Options.Events says otherwise.
var DefaultEvents = []string{
	"app_mention", "message.channels", "message.groups", "message.im", "message.mpim",
	"reaction_added", "reaction_removed", "file_shared",
}

// Server is a running fake Slack. Create it with New; it is closed by the
// test's cleanup, or earlier by Close. All its methods are safe for
// concurrent use.
type Server struct {
	// Injector scripts and draws the calls' failures: SetChaos and
	// ChaosCounts are its; Inject429 and the others script through it.
	fakehttp.Waiting // Changed, WaitFor and Await, over changes
	*fakehttp.Injector[Call, fault]

	tb        testing.TB
	opts      Options
	hs        *httptest.Server
	addr      string
	methods   map[string]*method
	wg        sync.WaitGroup // connections, deliveries, the scheduler
	closeOnce sync.Once
	quit      chan struct{} // closed when Close starts
	ctx       context.Context
	cancel    context.CancelCauseFunc
	wake      chan struct{} // the scheduler's
	client    *http.Client  // HTTP mode deliveries
	transport *http.Transport

	mu      sync.Mutex
	closed  bool
	changes fakehttp.Changes // wakes WaitFor; closed with the server
	seq     uint64
	lastTS  int64 // microseconds of the newest ts handed out

	team   Team
	bot    Bot
	users  map[string]*User
	uorder []string
	groups map[string]*UserGroup
	gorder []string

	channels   map[string]*channel
	corder     []string
	messages   map[string]*message // by channel + "/" + ts
	ephemerals []*Ephemeral
	files      map[string]*file
	forder     []string
	uploads    map[string]*upload // upload tickets not yet completed
	views      map[string]*view
	vorder     []string
	stacks     map[string][]string // open view ids by user, root first
	triggers   map[string]*trigger
	responses  map[string]*responseURL
	statuses   map[string]*ThreadStatus // by channel + "/" + thread_ts
	statusLog  []ThreadStatus

	calls     []Call
	buckets   map[string]*bucket
	envelopes []*envelope
	envByID   map[string]*envelope
	active    map[string]*envelope // not yet acknowledged nor given up
	queue     []*envelope          // the same, oldest first

	endpoints *Endpoints // nil: Socket Mode
	tickets   map[string]time.Time
	conns     []*smConn
	connSeq   int
	rr        int
	noPings   bool
	sockStats SocketStats
}

// New starts a fake Slack on 127.0.0.1 and registers its Close with
// tb.Cleanup. The helpers that act as users report misuse, such as an
// unknown channel, with tb.Errorf.
func New(tb testing.TB, opts Options) *Server {
	tb.Helper()
	if opts.BotToken == "" {
		opts.BotToken = DefaultBotToken
	}
	if opts.AppToken == "" {
		opts.AppToken = DefaultAppToken
	}
	if opts.SigningSecret == "" {
		opts.SigningSecret = DefaultSigningSecret
	}
	if opts.VerificationToken == "" {
		opts.VerificationToken = DefaultVerificationToken
	}
	if opts.AckTimeout <= 0 {
		opts.AckTimeout = 3 * time.Second
	}
	if opts.RetryDelays == nil {
		opts.RetryDelays = []time.Duration{0, time.Minute, 5 * time.Minute}
	}
	if opts.PingInterval <= 0 {
		opts.PingInterval = 10 * time.Second
	}
	if opts.MaxConnections <= 0 {
		opts.MaxConnections = 10
	}
	if opts.DisconnectGrace <= 0 {
		opts.DisconnectGrace = 10 * time.Second
	}
	if opts.Events == nil {
		opts.Events = DefaultEvents
	}
	if opts.TriggerLifetime <= 0 {
		opts.TriggerLifetime = 3 * time.Second
	}
	if opts.StreamLifetime <= 0 {
		opts.StreamLifetime = 5 * time.Minute
	}
	if opts.MaxTextLength <= 0 {
		opts.MaxTextLength = 40000
	}
	if opts.MaxFileSize <= 0 {
		opts.MaxFileSize = 1 << 30
	}
	if opts.WaitTimeout <= 0 {
		opts.WaitTimeout = 10 * time.Second
	}
	limits := DefaultRateLimits()
	if opts.NonMarketplace {
		limits["conversations.history"] = RateLimit{Limit: 1, Per: time.Minute, Burst: 1}
		limits["conversations.replies"] = RateLimit{Limit: 1, Per: time.Minute, Burst: 1}
	}
	for k, v := range opts.RateLimits {
		limits[k] = v
	}
	opts.RateLimits = limits

	s := &Server{
		Injector:  fakehttp.NewInjector[Call](http.StatusServiceUnavailable, func(f fakehttp.Fault) fault { return fault{Fault: f} }),
		tb:        tb,
		opts:      opts,
		quit:      make(chan struct{}),
		wake:      make(chan struct{}, 1),
		users:     map[string]*User{},
		groups:    map[string]*UserGroup{},
		channels:  map[string]*channel{},
		messages:  map[string]*message{},
		files:     map[string]*file{},
		uploads:   map[string]*upload{},
		views:     map[string]*view{},
		stacks:    map[string][]string{},
		triggers:  map[string]*trigger{},
		responses: map[string]*responseURL{},
		statuses:  map[string]*ThreadStatus{},
		buckets:   map[string]*bucket{},
		envByID:   map[string]*envelope{},
		active:    map[string]*envelope{},
		tickets:   map[string]time.Time{},
	}
	s.Waiting = fakehttp.NewWaiting(&s.changes, ErrClosed, tb, opts.WaitTimeout, "fakeslack")
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	s.team = Team{ID: opts.TeamID, Domain: opts.TeamDomain, Name: opts.TeamName}
	if s.team.ID == "" {
		s.team.ID = s.newIDLocked("T")
	}
	if s.team.Domain == "" {
		s.team.Domain = "fake"
	}
	if s.team.Name == "" {
		s.team.Name = "Fake Workspace"
	}
	s.bot = Bot{UserID: opts.BotUserID, BotID: opts.BotID, AppID: opts.AppID, Name: opts.BotName}
	if s.bot.UserID == "" {
		s.bot.UserID = s.newIDLocked("U")
	}
	if s.bot.BotID == "" {
		s.bot.BotID = s.newIDLocked("B")
	}
	if s.bot.AppID == "" {
		s.bot.AppID = s.newIDLocked("A")
	}
	if s.bot.Name == "" {
		s.bot.Name = "fakebot"
	}
	botUser := &User{ID: s.bot.UserID, Name: s.bot.Name, RealName: s.bot.Name, IsBot: true}
	s.users[botUser.ID] = botUser
	s.uorder = append(s.uorder, botUser.ID)
	s.methods = s.methodTable()

	mux := http.NewServeMux()
	mux.HandleFunc("/api/", s.serveAPI)
	mux.HandleFunc("/link/", s.serveSocket)
	mux.HandleFunc("/upload/", s.serveUpload)
	mux.HandleFunc("/files-pri/", s.serveFile)
	mux.HandleFunc("/signin", s.serveSignin)
	mux.HandleFunc("/response/", s.serveResponseURL)
	s.hs = httptest.NewServer(mux)
	s.addr = s.hs.Listener.Addr().String()
	s.client = &http.Client{
		Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second},
		Timeout:   opts.AckTimeout,
		// Slack does not follow redirects from a Request URL.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	s.transport = &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 8, IdleConnTimeout: 30 * time.Second}
	s.wg.Add(1)
	go s.schedule()
	tb.Cleanup(s.Close)
	return s
}

// Close stops the server: it closes every Socket Mode connection (a
// running socketmode client then tries to reconnect, so stop it first),
// cancels the deliveries in flight and the HTTP server, and returns once
// all of the server's goroutines have ended. It is idempotent.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.quit)
		s.cancel(ErrClosed)
		s.mu.Lock()
		s.closed = true
		for _, c := range s.conns {
			c.push(outFrame{kind: frameAbort})
		}
		s.changes.Close()
		s.mu.Unlock()
		s.hs.Close()
		s.wg.Wait()
		s.client.CloseIdleConnections()
		s.transport.CloseIdleConnections()
	})
}

// URL returns the server's base, http://127.0.0.1:PORT.
func (s *Server) URL() string { return "http://" + s.addr }

// APIURL returns the Web API base for slack.OptionAPIURL,
// http://127.0.0.1:PORT/api/.
func (s *Server) APIURL() string { return s.URL() + "/api/" }

// FilesURL returns where the fake serves files (their url_private),
// http://127.0.0.1:PORT/files-pri/, as Slack serves them from
// https://files.slack.com/files-pri/.
func (s *Server) FilesURL() string { return s.URL() + "/files-pri/" }

// HTTPClient returns a client for the bot's slack.OptionHTTPClient whose
// idle connections Close closes, so that no goroutine of the client's
// transport outlives the test.
func (s *Server) HTTPClient() *http.Client {
	return &http.Client{Transport: s.transport, Timeout: 30 * time.Second}
}

// Team returns the workspace.
func (s *Server) Team() Team { return s.team }

// Bot returns the app's bot.
func (s *Server) Bot() Bot { return s.bot }

// BotToken returns the bot token the fake accepts.
func (s *Server) BotToken() string { return s.opts.BotToken }

// AppToken returns the app-level token apps.connections.open accepts.
func (s *Server) AppToken() string { return s.opts.AppToken }

// SigningSecret returns the secret the fake signs its requests with.
func (s *Server) SigningSecret() string { return s.opts.SigningSecret }

func (s *Server) notifyLocked() { s.changes.Notify() }

// ErrClosed is returned by WaitFor when the server is closed.
var ErrClosed = errors.New("fakeslack: server closed")

// WaitMessage waits for a message in a conversation (replies included)
// that satisfies match (nil matches any), as it now stands, and returns
// it.
func (s *Server) WaitMessage(ctx context.Context, channelID string, match func(Message) bool) (Message, error) {
	return fakehttp.WaitFirst(ctx, s.WaitFor, func() []Message { return s.Messages(channelID) }, match)
}

func (s *Server) errorf(format string, args ...any) {
	s.tb.Helper()
	s.tb.Errorf("fakeslack: "+format, args...)
}

// newIDLocked returns a fresh Slack-style id: prefix and nine or more
// upper-case hex digits.
func (s *Server) newIDLocked(prefix string) string {
	s.seq++
	return fmt.Sprintf("%s%09X", prefix, s.seq)
}

// newTSLocked returns a fresh message timestamp, seconds.microseconds,
// later than every one handed out before.
func (s *Server) newTSLocked(now time.Time) string {
	us := now.UnixMicro()
	if us <= s.lastTS {
		us = s.lastTS + 1
	}
	s.lastTS = us
	return formatTS(us)
}

func formatTS(us int64) string {
	return fmt.Sprintf("%d.%06d", us/1e6, us%1e6)
}

// parseTS reads a message timestamp; ok is false unless it is
// digits.six-digits.
func parseTS(ts string) (us int64, ok bool) {
	sec, frac, found := strings.Cut(ts, ".")
	if !found || len(frac) != 6 || sec == "" {
		return 0, false
	}
	a, err1 := strconv.ParseInt(sec, 10, 64)
	b, err2 := strconv.ParseInt(frac, 10, 64)
	if err1 != nil || err2 != nil || a < 0 || b < 0 {
		return 0, false
	}
	return a*1e6 + b, true
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newTriggerLocked hands out a trigger_id for userID, valid for
// Options.TriggerLifetime and one use.
func (s *Server) newTriggerLocked(userID string, now time.Time) string {
	s.pruneTriggersLocked(now)
	s.seq++
	id := fmt.Sprintf("%d.%d.%s", now.Unix(), s.seq, randomHex(16))
	s.triggers[id] = &trigger{user: userID, issued: now}
	return id
}

// pruneTriggersLocked forgets triggers long expired, so that the map
// returns to zero; a trigger forgotten is answered invalid_trigger_id
// rather than expired_trigger_id.
func (s *Server) pruneTriggersLocked(now time.Time) {
	for id, t := range s.triggers {
		if now.Sub(t.issued) > s.opts.TriggerLifetime+time.Minute {
			delete(s.triggers, id)
		}
	}
}

type trigger struct {
	user   string
	issued time.Time
	used   bool
}
