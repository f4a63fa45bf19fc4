// Package slack is the Slack front end: it connects to Slack over
// Socket Mode (or takes its Events API and interactivity requests over
// HTTP) and serves the broker's conversations there through package
// thread, rendering its views as Block Kit messages, buttons, select
// menus and modals, its status marks as reactions, its commands as text
// written to the app in a thread and the /acp slash command, and handing
// it Slack's messages, reactions and interactions.
package slack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"acpbroker/chat"
	"acpbroker/chat/thread"
	"acpbroker/internal/ttlcache"

	"github.com/rs/zerolog"
	slackapi "github.com/slack-go/slack"
)

// The connection modes.
const (
	// ModeSocket takes events over a Socket Mode WebSocket opened with
	// the app-level token: no public URL is needed.
	ModeSocket = "socket"
	// ModeHTTP serves the Events API and interactivity on a listener of
	// its own, every request verified with the signing secret.
	ModeHTTP = "http"
)

// Defaults of Config.
const (
	// DefaultAPIURL is where Web API calls go.
	DefaultAPIURL = "https://slack.com/api/"
	// DefaultEditInterval is an answer's least time between two message
	// calls, as slack.edit_interval's default gives it.
	DefaultEditInterval = 1500 * time.Millisecond
	// DefaultFilesURL is where Slack keeps the files shared in a
	// workspace: every url_private is under it.
	DefaultFilesURL = "https://files.slack.com/files-pri/"
	// DefaultThreadPrefix starts the engine's name of a Slack thread.
	DefaultThreadPrefix = "slack:"
	// DefaultCommand is the slash command the app manifest registers.
	DefaultCommand = "/acp"
)

// Config configures a Client. Zero values have usable defaults, except
// the tokens (and, in HTTP mode, the signing secret and the listen
// address).
type Config struct {
	// BotToken (xoxb-…) makes every Web API call; AppToken (xapp-…,
	// with connections:write) opens the Socket Mode connections.
	BotToken string
	AppToken string
	// Mode is ModeSocket (the default) or ModeHTTP.
	Mode string
	// SigningSecret verifies what Slack posts in HTTP mode, and Listen is
	// the address its listener serves: events at /slack/events,
	// interactions at /slack/interactivity, the slash command at
	// /slack/commands (each path takes all three).
	SigningSecret string
	Listen        string
	// APIURL is where Web API calls go instead of Slack's (an API proxy,
	// or a fake Slack in tests).
	APIURL string
	// FilesURL is where the files shared with the app are (default
	// DefaultFilesURL): a file whose url_private is anywhere else is not
	// fetched with the bot token. It is https, or http on a loopback
	// address (a fake Slack in tests).
	FilesURL string
	// Access says who may use the app where; SetAccess changes it.
	// Roles are Slack user group ids (S…).
	Access Access
	// ThreadPrefix starts the engine's name of every Slack thread
	// (default "slack:"), so that it never collides with another
	// platform's: "slack:C0123/1700000000.000100".
	ThreadPrefix string
	// BareThreads names threads by their channel and ts alone
	// ("C0123/1700000000.000100"), ThreadPrefix unused: for an engine
	// that knows them as Slack's already (a broker's, which names each
	// platform's threads by it).
	BareThreads bool
	// Command is the slash command the app answers (default "/acp").
	Command string

	// EditInterval is the least time between two message calls of one
	// answer (default 1.5s; chat.update is allowed about 50 a minute
	// in a workspace, shared by every answer).
	EditInterval time.Duration
	// MaxMessages is how many messages an answer may span; a longer one
	// is attached as answer.md (default 6).
	MaxMessages int
	// MaxFileBytes bounds one file attached to an answer (default 8
	// MiB); MaxImageBytes one image a user shares (default 8 MiB) and
	// MaxTextBytes one text file, inlined into the prompt (default 256
	// KiB).
	MaxFileBytes  int
	MaxImageBytes int64
	MaxTextBytes  int64
	// ForgetAfter is how long a conversation may be idle before it is
	// dropped from memory (default 24h); its next message adopts it
	// again.
	ForgetAfter time.Duration
	// RequestTimeout bounds one Web API call (default 15s).
	RequestTimeout time.Duration
	// GroupRefresh is how often the members of the user groups the
	// access lists name are read again (default 5m). Membership not
	// read again within three times that is forgotten: its members
	// count as in no group (fail closed).
	GroupRefresh time.Duration
	// HTTPClient makes the Web API calls and downloads (default: one
	// with a 60s timeout).
	HTTPClient *http.Client
	// Memory, if set, keeps conversations across restarts.
	Memory Memory
	// Agents lists the agent profiles for new and agents (nil: one
	// agent, and the two commands say so).
	Agents func() []chat.AgentInfo
	Logger zerolog.Logger
}

// Access says who may use the app, and where: thread's lists (roles are
// Slack user group ids), and whether direct messages with the app are
// served.
type Access struct {
	thread.Access
	// AllowDMs serves direct messages with the app (a user on no list
	// is refused there as anywhere).
	AllowDMs bool
}

// Memory keeps the conversations across restarts.
type Memory = thread.Memory

func (c *Config) defaults() {
	if c.Mode == "" {
		c.Mode = ModeSocket
	}
	if c.APIURL == "" {
		c.APIURL = DefaultAPIURL
	}
	if !strings.HasSuffix(c.APIURL, "/") {
		c.APIURL += "/"
	}
	if c.FilesURL == "" {
		c.FilesURL = DefaultFilesURL
	}
	if !strings.HasSuffix(c.FilesURL, "/") {
		c.FilesURL += "/"
	}
	switch {
	case c.BareThreads:
		c.ThreadPrefix = ""
	case c.ThreadPrefix == "":
		c.ThreadPrefix = DefaultThreadPrefix
	}
	if c.Command == "" {
		c.Command = DefaultCommand
	}
	if c.EditInterval <= 0 {
		c.EditInterval = DefaultEditInterval
	}
	if c.ForgetAfter <= 0 {
		c.ForgetAfter = thread.DefaultForgetAfter
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 15 * time.Second
	}
	if c.GroupRefresh <= 0 {
		c.GroupRefresh = 5 * time.Minute
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 60 * time.Second}
	}
}

// check names the first setting that cannot work.
func (c *Config) check() error {
	switch {
	case c.BotToken == "":
		return errors.New("slack.bot_token: no bot token")
	case c.Mode != ModeSocket && c.Mode != ModeHTTP:
		return fmt.Errorf("slack.mode: %q is neither %q nor %q", c.Mode, ModeSocket, ModeHTTP)
	case c.Mode == ModeSocket && c.AppToken == "":
		return errors.New("slack.app_token: socket mode needs an app-level token")
	case c.Mode == ModeHTTP && c.SigningSecret == "":
		return errors.New("slack.signing_secret: http mode needs the signing secret")
	case c.Mode == ModeHTTP && c.Listen == "":
		return errors.New("slack.listen: http mode needs an address to listen on")
	case strings.ContainsAny(c.ThreadPrefix, "/ "):
		return fmt.Errorf("slack thread prefix %q may not hold a slash or a space", c.ThreadPrefix)
	case !strings.HasPrefix(c.Command, "/") || strings.ContainsAny(c.Command, " \t"):
		return fmt.Errorf("slack command %q is not a slash command", c.Command)
	}
	if u, err := url.Parse(c.APIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("slack.api_url %q is not an http(s) URL", c.APIURL)
	}
	if _, err := filesBase(c.FilesURL); err != nil {
		return err
	}
	return nil
}

// limits are Slack's, as package thread takes them.
var limits = thread.Limits{
	Name: "Slack",
	// Slack takes 40,000 characters a message and 3,000 a section
	// block; it shows about 4,000 before folding a message away.
	MessageRunes: 3900,
	// chat.postMessage takes about one a second in a channel, with short
	// bursts.
	Burst: 3, Window: 3 * time.Second,
	Files: 10, FilesBytes: 50 << 20,
	InlineDiff:  1500,
	Buttons:     25, // one actions block
	Menus:       5,
	MenuOptions: 100, // a static select
	FormFields:  25,  // inputs of one modal (it holds 100 blocks)
	WholeForms:  true,
	FieldRunes:  3000, // a plain_text_input
	LinkRunes:   3000, // a button's url
}

// identity is the app's bot as auth.test tells it.
type identity struct {
	userID, botID, teamID, name string
	url                         string // the workspace's, for links
}

// Client is the Slack platform. Run connects and serves; Close, after
// the engine has ended every turn, waits for the last messages to be
// posted and disconnects.
type Client struct {
	cfg Config
	api *slackapi.Client
	srv *thread.Server
	log zerolog.Logger
	// refusals logs the HTTP requests refused, at most refusalBurst
	// lines a second: anyone who finds the listener can send them.
	refusals zerolog.Logger

	// ctx bounds every Web API call and wait; it ends when Close gives
	// up.
	ctx    context.Context
	cancel context.CancelFunc

	me     atomic.Pointer[identity]
	ready  chan struct{} // closed once the app takes events
	once   sync.Once
	queue  chan inbound // what Slack sent, in order, for dispatch
	budget *budget
	users  *users
	groups *groups

	mu       sync.Mutex
	access   Access
	waiting  bool                              // Close is waiting for the Client's goroutines
	seen     *ttlcache.Cache[string, struct{}] // event and envelope ids taken, for Slack's retries
	replays  *ttlcache.Cache[string, struct{}] // signatures of HTTP requests taken
	verdicts *ttlcache.Cache[string, bool]     // threads known to be (or not be) conversations
	parents  *ttlcache.Cache[string, string]   // message ts (channel/ts) to the thread it is in
	lookups  map[string]*lookup                // threads being looked up, by name
	gone     *ttlcache.Cache[string, struct{}] // threads (channel/ts) whose first message was deleted before a reply
	online   bool                              // a Socket Mode connection is up (or the listener serves)
	offline  time.Time                         // since when it is not
	addr     net.Addr                          // the HTTP listener's
	regroup  chan struct{}                     // the access lists changed: read the groups again
	stats    Stats

	wg sync.WaitGroup // the Client's own goroutines (the Server has its own)
}

var _ chat.Platform = (*Client)(nil)

// New returns a Client that submits prompts to engine. It does not
// connect until Run. A setting that cannot work is an error naming it.
func New(cfg Config, engine chat.Engine) (*Client, error) {
	cfg.defaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	c := &Client{
		cfg:      cfg,
		log:      cfg.Logger.With().Str("platform", "slack").Logger(),
		ready:    make(chan struct{}),
		queue:    make(chan inbound, queueSize),
		budget:   newBudget(),
		access:   cfg.Access,
		seen:     ttlcache.New[string, struct{}](8192, 30*time.Minute, nil),
		replays:  ttlcache.New[string, struct{}](8192, replayWindow, nil),
		verdicts: ttlcache.New[string, bool](8192, cfg.ForgetAfter, nil),
		parents:  ttlcache.New[string, string](16384, cfg.ForgetAfter, nil),
		lookups:  map[string]*lookup{},
		gone:     ttlcache.New[string, struct{}](1024, time.Hour, nil),
		regroup:  make(chan struct{}, 1),
		offline:  time.Now(),
	}
	c.api = slackapi.New(cfg.BotToken,
		slackapi.OptionAPIURL(cfg.APIURL),
		slackapi.OptionAppLevelToken(cfg.AppToken),
		slackapi.OptionHTTPClient(cfg.HTTPClient),
		slackapi.OptionLog(apiLog{c.log}))
	c.refusals = c.log.Sample(&zerolog.BurstSampler{Burst: refusalBurst, Period: time.Second})
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.me.Store(&identity{})
	c.users = newUsers(c)
	c.groups = newGroups(c)
	c.srv = thread.New(thread.Config{
		Limits:        limits,
		Access:        c.threadAccess(cfg.Access),
		EditInterval:  cfg.EditInterval,
		MaxMessages:   cfg.MaxMessages,
		MaxFileBytes:  cfg.MaxFileBytes,
		MaxImageBytes: cfg.MaxImageBytes,
		MaxTextBytes:  cfg.MaxTextBytes,
		ForgetAfter:   cfg.ForgetAfter,
		CancelButton:  true,
		ChoiceMenus:   true,
		Memory:        cfg.Memory,
		Agents:        cfg.Agents,
		Logger:        c.log,
	}, (*platform)(c), engine)
	return c, nil
}

// queueSize bounds what Slack sent that waits for dispatch.
const queueSize = 1024

// refusalBurst is how many refused requests a second reach the log.
const refusalBurst = 5

// threadAccess is a's lists as package thread takes them: a direct
// message with the app (a D… conversation) is a channel allowed when
// AllowDMs.
func (c *Client) threadAccess(a Access) thread.Access {
	t := a.Access
	t.AllowChannel = nil
	if a.AllowDMs {
		t.AllowChannel = isDM
	}
	return t
}

// isDM reports whether a conversation id is a direct message's.
func isDM(channel string) bool { return strings.HasPrefix(channel, "D") }

// Run connects to Slack and serves until ctx ends: over Socket Mode, or
// on the HTTP listener. It returns once no new prompt will be submitted
// and nothing more is taken from Slack; Web API calls go on until
// Close. A refusal that will not pass (a token Slack does not take, a
// listen address in use) is returned at once.
func (c *Client) Run(ctx context.Context) error {
	if err := c.authenticate(ctx); err != nil {
		return fmt.Errorf("slack: %w", err)
	}
	if ctx.Err() != nil {
		return nil
	}
	c.refreshGroups(ctx)
	c.spawn(c.groupLoop)
	c.spawn(c.dispatch)
	if c.cfg.Mode == ModeHTTP {
		return c.runHTTP(ctx)
	}
	return c.runSocket(ctx)
}

// accept starts taking events once connected, the first time.
func (c *Client) accept() {
	c.once.Do(func() {
		c.srv.Accept(true)
		close(c.ready)
		c.log.Info().Str("bot", c.me.Load().userID).Str("mode", c.cfg.Mode).Msg("connected to Slack")
	})
}

// authenticate learns who the app's bot is (auth.test). A failure that
// may pass is tried again until it succeeds or ctx ends, which is no
// error: the broker is stopping. A token Slack refuses is returned at
// once.
func (c *Client) authenticate(ctx context.Context) error {
	return chat.Connect(ctx, c.ctx.Done(), &c.log, "could not reach Slack; trying again", retryAfter, func() (final bool, err error) {
		var r *slackapi.AuthTestResponse
		err = c.call(ctx, "auth.test", "", false, func(ctx context.Context) (err error) {
			r, err = c.api.AuthTestContext(ctx)
			return err
		})
		if err == nil {
			c.me.Store(&identity{userID: r.UserID, botID: r.BotID, teamID: r.TeamID, name: r.User, url: r.URL})
			return false, nil
		}
		if code := slackError(err); code == "invalid_auth" || code == "not_authed" || code == "account_inactive" || code == "token_revoked" || code == "not_allowed_token_type" {
			return true, fmt.Errorf("auth.test: the bot token was refused: %w", err)
		}
		return false, err
	})
}

// Ready is closed once the app takes events.
func (c *Client) Ready() <-chan struct{} { return c.ready }

// offlineGrace is how long the Socket Mode connection may be down (Slack
// refreshes it every few hours) before the Client counts as unhealthy.
const offlineGrace = time.Minute

// Healthy implements chat.Platform: the Socket Mode connection is up,
// or was lost less than a minute ago and is being opened again; in
// HTTP mode, the listener serves.
func (c *Client) Healthy() error {
	select {
	case <-c.ready:
	default:
		return errors.New("not connected to Slack yet")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.online:
		return nil
	case c.cfg.Mode == ModeHTTP:
		return errors.New("the HTTP listener is not serving")
	case time.Since(c.offline) > offlineGrace:
		return fmt.Errorf("no Socket Mode connection for %s", time.Since(c.offline).Round(time.Second))
	}
	return nil
}

// setOnline records whether the connection is up.
func (c *Client) setOnline(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.online && !on {
		c.offline = time.Now()
	}
	c.online = on
}

// Addr is the HTTP listener's address once it serves (nil before, and in
// Socket Mode).
func (c *Client) Addr() net.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addr
}

// Close waits up to grace for the answers of ended turns to be posted,
// then abandons what is left; status reactions still waiting then are
// left for the next start, which settles them from what the thread
// shows. Call it after the engine has ended every turn (and Run has
// returned). It returns when every goroutine of the Client is gone.
func (c *Client) Close(grace time.Duration) error {
	c.mu.Lock()
	c.waiting = true // no goroutine starts from here on: see spawn
	c.mu.Unlock()
	c.srv.Close(grace)
	c.cancel()
	c.wg.Wait()
	c.cfg.HTTPClient.CloseIdleConnections()
	return nil
}

// spawn runs f on a goroutine the Client owns, unless Close is already
// waiting for them.
func (c *Client) spawn(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.waiting {
		c.wg.Go(f)
	}
}

// sleep waits d; false if ctx or the Client ended first.
func (c *Client) sleep(ctx context.Context, d time.Duration) bool {
	return chat.Sleep(ctx, c.ctx.Done(), d)
}

// Stats are the Client's counters and gauges: its calls to Slack, its
// connections and requests, and its conversations' (its thread.Server's).
type Stats struct {
	// APICalls counts the Web API calls made; RateLimited those Slack
	// answered 429; Throttled those held back because they would have
	// gone past Slack's limits (the call waits, nothing is lost).
	APICalls    uint64
	RateLimited uint64
	Throttled   uint64
	// SocketReconnects counts the Socket Mode connections opened again
	// after the first (Slack refreshes them every few hours, and a
	// dropped one is opened again).
	SocketReconnects uint64
	// Deduplicated counts events, interactions and commands Slack sent
	// again (a retry, a replay) that were taken once; RefusedRequests the HTTP requests refused
	// (a bad or missing signature, a stale timestamp, a replay).
	Deduplicated    uint64
	RefusedRequests uint64

	thread.Stats
}

// Stats returns a snapshot of the counters.
func (c *Client) Stats() Stats {
	t := c.srv.Stats()
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Stats = t
	return s
}

// count adds one to a counter of c.stats.
func (c *Client) count(n *uint64) {
	c.mu.Lock()
	*n++
	c.mu.Unlock()
}

// SetAccess changes who may use the app, from the next event on.
//
// Threads of a channel the new lists no longer allow stop at once: their
// running turns are cancelled, and their later messages, clicks and
// commands are refused. The members of user groups newly named are read
// at once.
func (c *Client) SetAccess(a Access) {
	c.mu.Lock()
	c.access = a
	c.mu.Unlock()
	c.srv.SetAccess(c.threadAccess(a))
	select {
	case c.regroup <- struct{}{}:
	default:
	}
}

// Access returns the access lists in force (SetAccess's, after a
// reload).
func (c *Client) Access() Access {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.access
}

// Config returns what the client was made with, defaults filled in. Its
// Access is the first one; Access gives the lists in force.
func (c *Client) Config() Config { return c.cfg }

// Conversation says in which channel thread was opened and who started
// it, as Slack's ids (see thread.Server.Conversation). It asks Slack
// nothing.
func (c *Client) Conversation(thread string) (channel, starter string, ok bool) {
	return c.srv.Conversation(thread)
}

// Threads is the Server of the Client's conversations: the broker starts
// turns through it (schedules, the HTTP API).
func (c *Client) Threads() *thread.Server { return c.srv }

// Report implements chat.Platform: once connected, each thread is told
// in words which of its messages the broker did not finish, and that
// message's status reaction shows the failure (see thread.Server.Report).
func (c *Client) Report(turns []chat.Interruption, reported func(uint64)) {
	c.srv.Report(c.ready, turns, reported)
}

// apiLog takes slack-go's log lines into the Client's log.
type apiLog struct{ log zerolog.Logger }

func (l apiLog) Output(_ int, s string) error {
	l.log.Debug().Str("from", "slack-go").Msg(strings.TrimSpace(s))
	return nil
}
