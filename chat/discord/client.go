// Package discord is the Discord front end: it connects to Discord's
// gateway and REST API and serves the broker's conversations there
// through package thread, rendering its views as messages, buttons,
// select menus and modals, its status marks as reactions, its commands
// as slash commands, and handing it Discord's messages, reactions and
// interactions.
package discord

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"acpbroker/chat"
	"acpbroker/chat/thread"

	"github.com/bwmarrin/discordgo"
	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"
)

// DefaultAPIURL is Discord's REST base.
const DefaultAPIURL = "https://discord.com/api/v9/"

// DefaultEditInterval is an answer's least time between two message
// calls, as discord.edit_interval's default gives it.
const DefaultEditInterval = thread.DefaultEditInterval

// Config configures a Client. Zero values have usable defaults, except
// Token.
type Config struct {
	Token string
	// APIURL is the REST base that discordgo's requests (and its gateway
	// lookup) go to instead of Discord's.
	APIURL string
	// Access says who may use the bot where; SetAccess changes it.
	Access Access

	// EditInterval is the least time between two message calls of one
	// answer (default 1.25s: at most 4 in Discord's 5 per 5s window).
	EditInterval time.Duration
	// MaxMessages is how many 2,000-character messages an answer may
	// span; a longer one is attached as answer.md (default 6).
	MaxMessages int
	// MaxFileBytes bounds one attached file (default 8 MiB, under the
	// 10 MiB Discord accepts per message): a part of such an answer (a
	// longer one goes as answer-1.md, answer-2.md, … on consecutive
	// messages), or a file the agent shows.
	MaxFileBytes int
	// RetitleInterval is the least time between two renames of a thread
	// after the agent's title for its session (default 1m).
	RetitleInterval time.Duration
	// MaxImageBytes bounds one image attachment (default 8 MiB) and
	// MaxTextBytes one text attachment inlined into the prompt (default
	// 256 KiB).
	MaxImageBytes int64
	MaxTextBytes  int64
	// ForgetAfter is how long a conversation may be idle before the
	// Client drops it from memory (default 24h); the thread's next message
	// adopts it again from Discord, so nothing is lost but a lookup.
	ForgetAfter time.Duration
	// RequestTimeout bounds one REST call (default 15s).
	RequestTimeout time.Duration
	// TypingInterval is how often the typing indicator is renewed while a
	// turn works (default 8s; Discord shows it for 10s).
	TypingInterval time.Duration
	// HTTPClient is used for downloads of attachments (default: one with
	// a 60s timeout).
	HTTPClient *http.Client
	// Memory, if set, keeps conversations across restarts.
	Memory Memory
	// Agents lists the agent profiles for /new and /agents (nil: one
	// agent, and the two commands say so); RefreshCommands takes a new
	// list into the commands' choices.
	Agents func() []chat.AgentInfo
	Logger zerolog.Logger
}

// Access says who may use the bot, and where: roles are Discord's.
type Access = thread.Access

// Memory keeps the conversations across restarts.
type Memory = thread.Memory

func (c *Config) defaults() {
	if c.APIURL == "" {
		c.APIURL = DefaultAPIURL
	}
	// What the answer's view uses (EditInterval, MaxMessages, the byte
	// bounds, ForgetAfter, RetitleInterval, TypingInterval) is defaulted
	// where it is used, by package thread.
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 15 * time.Second
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: httpCallWait}
	}
}

// httpCallWait bounds one HTTP exchange with Discord, the upload of a
// message's files (up to 10 MiB) included: RequestTimeout bounds a REST
// call from the outside, this bounds a connection that stalls below it.
const httpCallWait = 60 * time.Second

// limits are Discord's, as package thread takes them.
var limits = thread.Limits{
	Name:         "Discord",
	MessageRunes: 2000,
	Burst:        5, Window: 5 * time.Second, // message calls in one channel
	Files: 10, FilesBytes: 10 << 20, // files of one message
	InlineDiff:  1500,
	Buttons:     25, // five rows of five
	Menus:       4,  // five rows, one of them the buttons'
	MenuOptions: 25,
	FormFields:  5, // text inputs in one modal
	FieldRunes:  4000,
	LinkRunes:   512,
}

// Client is the Discord platform. Run connects and serves; Close, after
// the engine has ended every turn, waits for the last messages to be
// posted and disconnects.
type Client struct {
	cfg Config
	srv *thread.Server
	log zerolog.Logger
	s   *discordgo.Session

	// ctx bounds every REST call and wait; it ends when Close gives up.
	ctx    context.Context
	cancel context.CancelFunc

	botID atomic.Pointer[string]
	ready chan struct{} // closed at the first READY
	once  sync.Once

	mu      sync.Mutex
	appID   string           // the application the slash commands are registered for
	waiting bool             // Close is waiting for the Client's goroutines
	closing bool             // Close disconnects: not a lost connection
	lanes   map[string]*lane // reaction lanes, by channel
	stats   Stats

	wg        sync.WaitGroup // the Client's own goroutines (the Server has its own)
	gateway   sync.WaitGroup // the gateway's close
	closeOnce sync.Once
	closeErr  error // the gateway's close's, once gateway is done
}

var _ chat.Platform = (*Client)(nil)

// New returns a Client that submits prompts to engine. It does not
// connect until Run.
func New(cfg Config, engine chat.Engine) (*Client, error) {
	cfg.defaults()
	if cfg.Token == "" {
		return nil, errors.New("discord: no token")
	}
	s, err := discordgo.New("Bot " + cfg.Token)
	if err != nil {
		return nil, err
	}
	transport, err := rewriteTransport(cfg.APIURL, http.DefaultTransport)
	if err != nil {
		return nil, err
	}
	s.Client = &http.Client{Transport: transport}
	// 429s are retried here with waits a shutdown can interrupt, not by
	// discordgo's uninterruptible sleep.
	s.ShouldRetryOnRateLimit = false
	s.SyncEvents = true
	s.StateEnabled = true
	s.Identify.Intents = discordgo.IntentsGuilds | discordgo.IntentsGuildMessages |
		discordgo.IntentsGuildMessageReactions | discordgo.IntentsMessageContent
	s.LogLevel = discordgo.LogError
	c := &Client{
		cfg:   cfg,
		log:   cfg.Logger.With().Str("platform", "discord").Logger(),
		s:     s,
		ready: make(chan struct{}),
		lanes: map[string]*lane{},
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	empty := ""
	c.botID.Store(&empty)
	c.srv = thread.New(thread.Config{
		Limits:          limits,
		Access:          cfg.Access,
		EditInterval:    cfg.EditInterval,
		MaxMessages:     cfg.MaxMessages,
		MaxFileBytes:    cfg.MaxFileBytes,
		MaxImageBytes:   cfg.MaxImageBytes,
		MaxTextBytes:    cfg.MaxTextBytes,
		RetitleInterval: cfg.RetitleInterval,
		ForgetAfter:     cfg.ForgetAfter,
		TypingInterval:  cfg.TypingInterval,
		Memory:          cfg.Memory,
		Agents:          cfg.Agents,
		Logger:          c.log,
	}, (*platform)(c), engine)
	s.AddHandler(c.onReady)
	s.AddHandler(c.onResumed)
	s.AddHandler(c.onDisconnect)
	s.AddHandler(c.onMessage)
	s.AddHandler(c.onReaction)
	s.AddHandler(c.onInteraction)
	return c, nil
}

// Run connects to the gateway, registers the slash commands and serves
// messages until ctx ends. It returns once no new prompt will be
// submitted, and the gateway connection is then being closed (nothing
// more is received: messages, reactions, commands and clicks go
// unanswered); REST calls go on until Close.
func (c *Client) Run(ctx context.Context) error {
	defer c.closeGateway()
	if err := c.connect(ctx); err != nil {
		return fmt.Errorf("discord: connect: %w", err)
	}
	select {
	case <-c.ready:
	case <-ctx.Done():
		return nil
	}
	c.srv.Accept(true)
	c.log.Info().Str("bot", c.me()).Msg("connected to Discord")
	<-ctx.Done()
	c.srv.Accept(false)
	return nil
}

// closeGateway starts closing the gateway connection, once, on a
// goroutine Close waits for: discordgo sends the close frame and then
// waits a second for Discord to close the socket, a second that a
// shutdown spends on its turns and agents meanwhile.
func (c *Client) closeGateway() {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closing = true
		c.mu.Unlock()
		c.gateway.Go(func() {
			// A heartbeat due while discordgo closes can start a
			// reconnect that outlives Close; forbid reconnecting first.
			c.s.Lock()
			c.s.ShouldReconnectOnError = false
			c.s.Unlock()
			c.closeErr = c.s.Close()
		})
	})
}

// connect opens the gateway connection. A failure that may pass (a 429,
// a 5xx, a network error, a dropped handshake) is tried again until it
// succeeds or ctx ends, which is no error: the broker is stopping. A
// refusal that will not pass (the token or the bot's intents) is
// returned at once, for the operator to mend.
func (c *Client) connect(ctx context.Context) error {
	return chat.Connect(ctx, c.ctx.Done(), &c.log, "could not connect to Discord; trying again", retryAfter, func() (final bool, err error) {
		err = c.s.Open()
		if err == nil || errors.Is(err, discordgo.ErrWSAlreadyOpen) {
			return false, nil
		}
		return connectRefused(err), err
	})
}

// connectRefused reports whether a failure to connect is Discord's
// refusal of this bot as configured: a token it does not take (401, 403,
// gateway close 4004), or intents, shards or an API version it does not
// allow (closes 4010 to 4014).
func connectRefused(err error) bool {
	if re, ok := errors.AsType[*discordgo.RESTError](err); ok && re.Response != nil {
		return re.Response.StatusCode == http.StatusUnauthorized || re.Response.StatusCode == http.StatusForbidden
	}
	if ce, ok := errors.AsType[*websocket.CloseError](err); ok {
		return ce.Code == 4004 || ce.Code >= 4010 && ce.Code <= 4014
	}
	return false
}

// Ready is closed once the gateway connection is up.
func (c *Client) Ready() <-chan struct{} { return c.ready }

// Close waits up to grace for the answers of ended turns to be posted,
// then abandons what is left and disconnects; status reactions still
// waiting for their channel then are left for the next start, which
// settles them from what the thread shows. Call it after the engine has
// ended every turn. It returns when every goroutine of the Client is
// gone and the gateway connection is closed.
func (c *Client) Close(grace time.Duration) error {
	c.mu.Lock()
	c.waiting = true // no goroutine starts from here on: see spawn
	c.mu.Unlock()
	c.closeGateway() // if Run did not
	// Closing the gateway may take its own time after the posts: leave
	// it that, so that Close as a whole stays within grace.
	c.srv.Close(max(grace-gatewayCloseTime, grace/2))
	c.cancel()
	c.wg.Wait()
	c.gateway.Wait()
	c.s.Client.CloseIdleConnections()
	return c.closeErr
}

// heartbeatStale is how old the last answered gateway heartbeat may be
// before the connection counts as lost: about three missed heartbeats.
const heartbeatStale = 2 * time.Minute

// gatewayCloseTime is what closing the gateway takes: discordgo sends the
// close frame and then waits a second for Discord to close the socket.
// Run starts it as soon as its ctx ends; Close may still have to wait
// for it.
const gatewayCloseTime = 1200 * time.Millisecond

// spawn runs f on a goroutine the Client owns, unless Close is already
// waiting for them.
func (c *Client) spawn(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.waiting {
		c.wg.Go(f)
	}
}

func (c *Client) me() string { return *c.botID.Load() }

func (c *Client) onReady(s *discordgo.Session, r *discordgo.Ready) {
	id := r.User.ID
	c.botID.Store(&id)
	appID := id
	if r.Application != nil && r.Application.ID != "" {
		appID = r.Application.ID
	}
	c.spawn(func() { c.registerCommands(appID) })
	c.once.Do(func() { close(c.ready) })
}

func (c *Client) onResumed(*discordgo.Session, *discordgo.Resumed) {
	c.log.Info().Msg("gateway session resumed")
}

func (c *Client) onDisconnect(*discordgo.Session, *discordgo.Disconnect) {
	c.mu.Lock()
	closing := c.closing
	if !closing {
		c.stats.GatewayReconnects++
	}
	c.mu.Unlock()
	if closing {
		return
	}
	c.log.Warn().Msg("gateway connection lost; reconnecting")
}

// Stats are the Client's counters and gauges: its calls to Discord and
// its gateway's, and its conversations' (its thread.Server's).
type Stats struct {
	RESTCalls         uint64
	RateLimited       uint64
	GatewayReconnects uint64
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

// Healthy implements chat.Platform: the gateway is connected and has
// answered a heartbeat within the last two minutes (Discord asks for one
// every 41 seconds or so).
func (c *Client) Healthy() error {
	c.s.RLock()
	last := c.s.LastHeartbeatAck
	ready := c.s.DataReady
	c.s.RUnlock()
	switch {
	case !ready:
		return errors.New("gateway not connected")
	case time.Since(last) > heartbeatStale:
		return fmt.Errorf("no gateway heartbeat answered for %s", time.Since(last).Round(time.Second))
	}
	return nil
}

// SetAccess changes who may use the bot, from the next message on.
//
// Threads of a channel the new lists no longer allow stop at once: their
// running turns are cancelled, and their later messages, clicks and
// commands are refused.
func (c *Client) SetAccess(a Access) { c.srv.SetAccess(a) }

// Conversation says in which channel thread was opened and who started
// it (see thread.Server.Conversation).
func (c *Client) Conversation(thread string) (channel, starter string, ok bool) {
	return c.srv.Conversation(thread)
}

// Config returns what the client was made with. Its Access is the first
// one; Access gives the lists in force.
func (c *Client) Config() Config { return c.cfg }

// Threads is the Server of the Client's conversations: the broker starts
// turns there itself (schedules, the API) and gives it its schedules.
func (c *Client) Threads() *thread.Server { return c.srv }

// Access returns the access lists in force (SetAccess's, after a
// reload).
func (c *Client) Access() Access { return c.srv.Access() }

// Report implements chat.Platform: once connected, each thread is told
// in words which of its messages the broker did not finish, and that
// message's status reaction shows the failure (see thread.Server.Report).
func (c *Client) Report(turns []chat.Interruption, reported func(uint64)) {
	c.srv.Report(c.ready, turns, reported)
}
