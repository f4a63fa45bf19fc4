// Package discord is the Discord front end: a mention in an allowed channel
// opens a thread whose messages are prompts for one agent session; answers
// stream into the thread, permission questions become buttons, the agent's
// own questions become forms (menus and a modal) or links, and /cancel,
// /reset, /status and a 🛑 reaction control the turn.
package discord

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"acpbroker/adapter"
	"acpbroker/chat"

	"github.com/bwmarrin/discordgo"
	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"
)

// DefaultAPIURL is Discord's REST base.
const DefaultAPIURL = "https://discord.com/api/v9/"

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

func (c *Config) defaults() {
	if c.APIURL == "" {
		c.APIURL = DefaultAPIURL
	}
	if c.EditInterval <= 0 {
		c.EditInterval = 1250 * time.Millisecond
	}
	if c.MaxMessages <= 0 {
		c.MaxMessages = 6
	}
	if c.MaxFileBytes <= 0 {
		c.MaxFileBytes = 8 << 20
	}
	if c.RetitleInterval <= 0 {
		c.RetitleInterval = time.Minute
	}
	if c.MaxImageBytes <= 0 {
		c.MaxImageBytes = 8 << 20
	}
	if c.MaxTextBytes <= 0 {
		c.MaxTextBytes = 256 << 10
	}
	if c.ForgetAfter <= 0 {
		c.ForgetAfter = 24 * time.Hour
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 15 * time.Second
	}
	if c.TypingInterval <= 0 {
		c.TypingInterval = 8 * time.Second
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: httpCallWait}
	}
}

// httpCallWait bounds one HTTP exchange with Discord, the upload of a
// message's files (up to 10 MiB) included: RequestTimeout bounds a REST
// call from the outside, this bounds a connection that stalls below it.
const httpCallWait = 60 * time.Second

// Access says who may use the bot, and where.
type Access struct {
	AllowedChannels  []string
	AllowAllChannels bool
	// AllowedUsers and AllowedRoles, when both empty, allow everyone who
	// can write in an allowed channel.
	AllowedUsers []string
	AllowedRoles []string
	// Approvers, and members of ApproverRoles, may act on any thread:
	// answer its questions, cancel and reset it.
	Approvers     []string
	ApproverRoles []string
	// AllowedBots are bots whose messages are treated like a user's.
	AllowedBots  []string
	ShowThoughts bool
	// ChannelAgents names the agent profile new threads of a channel get
	// (the default when a channel has none).
	ChannelAgents map[string]string
}

// Client is the Discord platform. Run connects and serves; Close, after
// the engine has ended every turn, waits for the last messages to be
// posted and disconnects.
type Client struct {
	cfg    Config
	engine chat.Engine
	log    zerolog.Logger
	// ignored logs what strangers do that is ignored, sampled: see
	// ignoredCancelBurst.
	ignored zerolog.Logger
	s       *discordgo.Session
	born    time.Time // when this process's Client was made

	// ctx bounds every REST call and wait; it ends when Close gives up.
	ctx    context.Context
	cancel context.CancelFunc
	// decor bounds the status reactions, which a channel takes one per
	// 250ms: Close gives up on them once the messages are out, and the
	// next start settles what they did not show.
	decor     context.Context
	dropDecor context.CancelFunc

	botID atomic.Pointer[string]
	ready chan struct{} // closed at the first READY
	once  sync.Once

	mu        sync.Mutex
	access    Access
	accepting bool
	appID     string                   // the application the slash commands are registered for
	waiting   bool                     // Close is waiting for the Client's goroutines
	closing   bool                     // Close disconnects: not a lost connection
	convs     map[string]*conversation // by thread id
	swept     time.Time                // when convs was last swept
	seen      recentSet                // message ids already handled
	order     map[string]chan struct{} // by thread: closed once its last message is submitted
	perms     map[string]*openPermission
	questions map[string]*openQuestion // the agent's questions, as perms
	permSeq   uint64
	lanes     map[string]*lane      // reaction lanes, by channel
	titles    map[string]*retitling // threads renamed within RetitleInterval, by thread
	stats     Stats

	wg        sync.WaitGroup // every goroutine but the status reactions'
	reactions sync.WaitGroup // the turns' status reactions
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
	c := &Client{born: time.Now(),
		cfg:       cfg,
		access:    cfg.Access,
		engine:    engine,
		log:       cfg.Logger.With().Str("platform", "discord").Logger(),
		s:         s,
		ready:     make(chan struct{}),
		convs:     map[string]*conversation{},
		order:     map[string]chan struct{}{},
		seen:      newRecentSet(4096),
		perms:     map[string]*openPermission{},
		questions: map[string]*openQuestion{},
		lanes:     map[string]*lane{},
		titles:    map[string]*retitling{},
	}
	c.ignored = c.log.Sample(&zerolog.BurstSampler{Burst: ignoredCancelBurst, Period: time.Second})
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.decor, c.dropDecor = context.WithCancel(c.ctx)
	c.recall()
	empty := ""
	c.botID.Store(&empty)
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
	c.mu.Lock()
	c.accepting = true
	c.mu.Unlock()
	c.log.Info().Str("bot", c.me()).Msg("connected to Discord")
	<-ctx.Done()
	c.mu.Lock()
	c.accepting = false
	c.mu.Unlock()
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

// Waits between tries to connect: doubling from the first to the last,
// or what a 429 asks.
const (
	connectRetryFirst = time.Second
	connectRetryMost  = 30 * time.Second
)

// connect opens the gateway connection. A failure that may pass (a 429,
// a 5xx, a network error, a dropped handshake) is tried again until it
// succeeds or ctx ends, which is no error: the broker is stopping. A
// refusal that will not pass (the token or the bot's intents) is
// returned at once, for the operator to mend.
func (c *Client) connect(ctx context.Context) error {
	wait := connectRetryFirst
	for try := 1; ; try++ {
		err := c.s.Open()
		if err == nil || errors.Is(err, discordgo.ErrWSAlreadyOpen) {
			return nil
		}
		if connectRefused(err) {
			return err
		}
		next := wait
		if d, ok := retryAfter(err); ok {
			next = d
		} else {
			wait = min(2*wait, connectRetryMost)
		}
		c.log.Warn().Err(err).Int("try", try).Dur("retry_in", next).Msg("could not connect to Discord; trying again")
		if !c.sleep(ctx, next) {
			return nil
		}
	}
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
	c.accepting = false
	c.waiting = true // no goroutine starts from here on: see spawnLate
	c.mu.Unlock()
	c.closeGateway() // if Run did not
	done := make(chan struct{})
	go func() {
		c.wg.Wait()
		close(done)
	}()
	// Closing the gateway may take its own time after the posts: leave
	// it that, so that Close as a whole stays within grace.
	t := time.NewTimer(max(grace-gatewayCloseTime, grace/2))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		c.log.Warn().Dur("grace", grace).Msg("messages still being posted at shutdown; giving up on them")
	}
	c.mu.Lock()
	queued := len(c.lanes)
	c.mu.Unlock()
	if queued > 0 {
		c.log.Info().Int("channels", queued).Msg("status reactions still queued at shutdown; the next start settles them")
	}
	c.dropDecor()
	c.cancel()
	<-done
	c.reactions.Wait()
	c.stopRetitles()
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

// spawnLate runs f on a goroutine the Client owns, unless Close is
// already waiting for them; it reports whether f runs. For work started
// from outside the Client's own goroutines (an agent's request), which
// may come at any time.
func (c *Client) spawnLate(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waiting {
		return false
	}
	c.wg.Go(f)
	return true
}

// spawn runs f on a goroutine the Client owns.
func (c *Client) spawn(f func()) {
	c.wg.Go(f)
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

// Stats are the Client's counters and gauges.
type Stats struct {
	RESTCalls          uint64
	RateLimited        uint64
	GatewayReconnects  uint64
	OpenPermissions    int
	OpenQuestions      int // the agent's questions waiting for an answer
	Conversations      int
	RefusedUsers       uint64
	RefusedChannels    uint64 // messages in threads of channels no longer allowed
	IgnoredCancels     uint64 // 🛑 reactions of users who may not cancel the thread's turn
	RefusedAttachments uint64
	LostAnswers        uint64 // answers whose final view could not be shown
	Retitling          int    // threads renamed within RetitleInterval
}

// Stats returns a snapshot of the counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.OpenPermissions = len(c.perms)
	s.OpenQuestions = len(c.questions)
	s.Conversations = len(c.convs)
	s.Retitling = len(c.titles)
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
func (c *Client) SetAccess(a Access) {
	c.mu.Lock()
	c.access = a
	var dropped []string
	for id, conv := range c.convs {
		if !a.channel(conv.parent) {
			dropped = append(dropped, id)
		}
	}
	c.mu.Unlock()
	for _, thread := range dropped {
		if c.engine != nil && c.engine.Cancel(thread, errChannelNotServed) {
			c.log.Info().Str("thread", thread).Msg("channel no longer allowed; turn cancelled")
		}
	}
}

// errChannelNotServed ends the turns of a channel removed from the
// allow-list.
var errChannelNotServed = fmt.Errorf("%w: this channel is no longer served by the bot", adapter.ErrCancelled)

// Config returns what the client was made with. Its Access is the first
// one; Access gives the lists in force.
func (c *Client) Config() Config { return c.cfg }

// Access returns the access lists in force (SetAccess's, after a
// reload).
func (c *Client) Access() Access { return c.acl() }

func (c *Client) acl() Access {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.access
}

func (c *Client) allowedChannel(id string) bool { return c.acl().channel(id) }

func (c *Client) allowedUser(userID string, roles []string) bool { return c.acl().user(userID, roles) }

// mayAct is the one rule for who may act on a thread (answer its
// permission requests and questions, cancel it, reset it), checked
// against the lists in force now: in a channel the bot still serves, the
// thread's starter while still allowed to use the bot, an approver, or a
// member of an approver role. A thread whose starter is unknown is left
// to the approvers (fail closed).
func (a Access) mayAct(parent, starter, user string, roles []string) bool {
	if !a.channel(parent) {
		return false
	}
	if slices.Contains(a.Approvers, user) {
		return true
	}
	for _, r := range roles {
		if slices.Contains(a.ApproverRoles, r) {
			return true
		}
	}
	return starter != "" && user == starter && a.user(user, roles)
}

// whoMayAct names, for a refusal, who may act on a thread.
func whoMayAct(starter string) string {
	if starter == "" {
		return "An approver"
	}
	return "<@" + starter + "> or an approver"
}

func (a Access) channel(id string) bool {
	return a.AllowAllChannels || slices.Contains(a.AllowedChannels, id)
}

func (a Access) user(userID string, roles []string) bool {
	if len(a.AllowedUsers) == 0 && len(a.AllowedRoles) == 0 {
		return true
	}
	if slices.Contains(a.AllowedUsers, userID) {
		return true
	}
	for _, r := range roles {
		if slices.Contains(a.AllowedRoles, r) {
			return true
		}
	}
	return false
}

// recentSet remembers the last n ids added.
type recentSet struct {
	ids  map[string]struct{}
	ring []string
	next int
}

func newRecentSet(n int) recentSet {
	return recentSet{ids: make(map[string]struct{}, n), ring: make([]string, n)}
}

// add records id and reports whether it was new.
func (r *recentSet) add(id string) bool {
	if _, ok := r.ids[id]; ok {
		return false
	}
	if old := r.ring[r.next]; old != "" {
		delete(r.ids, old)
	}
	r.ring[r.next] = id
	r.next = (r.next + 1) % len(r.ring)
	r.ids[id] = struct{}{}
	return true
}
