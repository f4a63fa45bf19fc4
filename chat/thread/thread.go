// Package thread serves conversations between chat threads and agents,
// whatever the chat platform: a mention in an allowed channel opens a
// thread whose messages are prompts for one agent session; answers
// stream into it, permission requests become buttons, the agent's
// questions become menus, forms or links, and commands (slash commands,
// or written to the bot in the thread) and a stop mark control the turn.
// One rule says who may act on a thread. A platform (see Platform)
// renders and delivers what the Server says, and hands it what people do
// (Message, Reaction, Click, FormAnswer, Command).
package thread

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"acpbroker/adapter"
	"acpbroker/chat"

	"github.com/rs/zerolog"
)

// Config configures a Server. Zero values have usable defaults, except
// Limits, which the platform gives.
type Config struct {
	Limits Limits
	// Access says who may use the bot where; SetAccess changes it.
	Access Access
	// EditInterval is the least time between two message calls of one
	// answer while it streams (default 1.25s).
	EditInterval time.Duration
	// MaxMessages is how many messages an answer may span; a longer one
	// is attached as answer.md (default 6).
	MaxMessages int
	// MaxFileBytes bounds one attached file (default 8 MiB): a part of
	// such an answer (a longer one goes as answer-1.md, answer-2.md, …
	// on consecutive messages), or a file the agent shows.
	MaxFileBytes int
	// MaxImageBytes bounds one image a user attaches (default 8 MiB) and
	// MaxTextBytes one text file, inlined into the prompt (default 256
	// KiB).
	MaxImageBytes int64
	MaxTextBytes  int64
	// RetitleInterval is the least time between two renames of a thread
	// after the agent's title for its session (default 1m), on a
	// platform that renames (Renamer).
	RetitleInterval time.Duration
	// ForgetAfter is how long a conversation may be idle before the
	// Server drops it from memory (default 24h); the thread's next
	// message adopts it again (Platform.Thread).
	ForgetAfter time.Duration
	// TypingInterval is how often the typing indicator is renewed while
	// a turn works (default 8s), on a platform that shows one (Typer).
	TypingInterval time.Duration
	// CancelButton puts a Cancel button on the last message of a running
	// turn, for a platform whose threads take no slash commands (Slack):
	// one who may act on the thread cancels the turn with it.
	CancelButton bool
	// ChoiceMenus offers the choices of model, mode and config (given
	// without a value) in a menu under their list, for a platform that
	// does not suggest values as they are typed (Slack): a choice made
	// there changes the option as the command would.
	ChoiceMenus bool
	// Memory, if set, keeps conversations across restarts.
	Memory Memory
	// Agents lists the agent profiles for new and agents (nil: one
	// agent, and the two commands say so).
	Agents func() []chat.AgentInfo
	Logger zerolog.Logger
}

// DefaultEditInterval is the least time between two message calls of
// one answer when a platform names none: at most 4 calls in Discord's
// window of 5 per 5s.
const DefaultEditInterval = 1250 * time.Millisecond

// DefaultForgetAfter is how long a conversation may be idle before the
// Server forgets it, when the platform names no time.
const DefaultForgetAfter = 24 * time.Hour

func (c *Config) defaults() {
	if c.EditInterval <= 0 {
		c.EditInterval = DefaultEditInterval
	}
	if c.MaxMessages <= 0 {
		c.MaxMessages = 6
	}
	if c.MaxFileBytes <= 0 {
		c.MaxFileBytes = 8 << 20
	}
	if c.MaxImageBytes <= 0 {
		c.MaxImageBytes = 8 << 20
	}
	if c.MaxTextBytes <= 0 {
		c.MaxTextBytes = 256 << 10
	}
	if c.RetitleInterval <= 0 {
		c.RetitleInterval = time.Minute
	}
	if c.ForgetAfter <= 0 {
		c.ForgetAfter = DefaultForgetAfter
	}
	if c.TypingInterval <= 0 {
		c.TypingInterval = 8 * time.Second
	}
	l := &c.Limits
	if l.Name == "" {
		l.Name = "this chat"
	}
	if l.MessageRunes <= 0 {
		l.MessageRunes = 2000
	}
	if l.Burst <= 0 || l.Window <= 0 {
		l.Burst, l.Window = 1, time.Second
	}
	if l.Files <= 0 {
		l.Files = 1
	}
	if l.FilesBytes <= 0 {
		l.FilesBytes = int64(c.MaxFileBytes)
	}
	if l.InlineDiff <= 0 {
		l.InlineDiff = 1500
	}
	if l.Buttons <= 0 {
		l.Buttons = 5
	}
	if l.Menus <= 0 {
		l.Menus = 4
	}
	if l.MenuOptions <= 0 {
		l.MenuOptions = 25
	}
	if l.FieldRunes <= 0 {
		l.FieldRunes = 2000
	}
	if l.LinkRunes <= 0 {
		l.LinkRunes = 512
	}
}

// Server serves one platform's conversations: it takes what people do
// there, submits prompts to the engine and shows the turns. Its event
// methods never wait on the platform or on an agent: Message, Click,
// Answer and Command hand the work to goroutines the Server owns, which
// Close waits for; Reaction and Suggest ask the engine only what it
// answers at once (Cancel, Options). They are safe to call from any
// goroutine.
type Server struct {
	cfg    Config
	lim    Limits
	p      Platform
	typer  Typer     // nil: the platform shows no typing
	rename Renamer   // nil: its threads are not renamed
	whisp  Whisperer // nil: private answers to text commands are replies
	engine chat.Engine
	// queue and sessions are engine when it is one (nil otherwise): the
	// queue's notes and commands, and the session commands, need them.
	queue    chat.QueueEngine
	sessions chat.SessionEngine
	log      zerolog.Logger
	// ignored logs what strangers do that is ignored, sampled: see
	// ignoredCancelBurst.
	ignored zerolog.Logger
	born    time.Time // when this process's Server was made

	// ctx bounds every platform call and wait; it ends when Close gives
	// up.
	ctx    context.Context
	cancel context.CancelFunc
	// decor bounds the status marks, which a platform may take slowly
	// (Discord: one per 250ms in a channel): Close gives up on them once
	// the messages are out, and the next start settles what they did
	// not show.
	decor     context.Context
	dropDecor context.CancelFunc

	mu        sync.Mutex
	access    Access
	accepting bool
	waiting   bool                     // Close is waiting for the Server's goroutines
	convs     map[string]*conversation // by thread
	swept     time.Time                // when convs was last swept
	seen      recentSet                // messages already handled
	order     map[string]chan struct{} // by thread: closed once its last message is submitted
	perms     map[string]*openPermission
	questions map[string]*openQuestion // the agent's questions, as perms
	stops     map[string]*turnSink     // turns with a Cancel button, by its action id, while they run
	notes     map[string]*turnSink     // waiting messages whose note offers Send now, by its key, while it is up
	permSeq   uint64
	titles    map[string]*retitling // threads renamed within RetitleInterval, by thread
	schedules Schedules             // nil: none shown here
	web       Web                   // the web front end's: see SetWeb
	marking   int                   // turns whose status marks are still being set
	stats     Stats

	// wg counts every goroutine but the turns' views', and each turn's
	// messages until they are out (see newTurnSink); views counts the
	// turns' views and their workers, which also set the status marks.
	wg    sync.WaitGroup
	views sync.WaitGroup
}

// New returns a Server of platform p's conversations, which submits
// prompts to engine. It takes no event until Accept(true).
func New(cfg Config, p Platform, engine chat.Engine) *Server {
	cfg.defaults()
	s := &Server{
		cfg:       cfg,
		lim:       cfg.Limits,
		p:         p,
		engine:    engine,
		log:       cfg.Logger,
		born:      time.Now(),
		access:    cfg.Access,
		convs:     map[string]*conversation{},
		order:     map[string]chan struct{}{},
		seen:      newRecentSet(4096),
		perms:     map[string]*openPermission{},
		questions: map[string]*openQuestion{},
		stops:     map[string]*turnSink{},
		notes:     map[string]*turnSink{},
		titles:    map[string]*retitling{},
	}
	s.queue, _ = engine.(chat.QueueEngine)
	s.sessions, _ = engine.(chat.SessionEngine)
	s.typer, _ = p.(Typer)
	s.rename, _ = p.(Renamer)
	s.whisp, _ = p.(Whisperer)
	s.ignored = s.log.Sample(&zerolog.BurstSampler{Burst: ignoredCancelBurst, Period: time.Second})
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.decor, s.dropDecor = context.WithCancel(s.ctx)
	s.recall()
	return s
}

// Accept starts (on) or stops taking events: messages and reactions
// before, and after, are ignored; clicks and commands are told the
// broker is shutting down. A platform accepts once connected, and stops
// when no new prompt may be submitted.
func (s *Server) Accept(on bool) {
	s.mu.Lock()
	s.accepting = on
	s.mu.Unlock()
}

// Close waits up to grace for the answers of ended turns to be shown,
// then abandons what is left; status marks still waiting then are left
// for the next start, which settles them from what the thread shows.
// Call it after the engine has ended every turn. It returns when every
// goroutine of the Server is gone; it stops taking events first.
func (s *Server) Close(grace time.Duration) {
	s.mu.Lock()
	s.accepting = false
	s.waiting = true // no goroutine starts from here on: see spawnLate
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.log.Warn().Dur("grace", grace).Msg("messages still being posted at shutdown; giving up on them")
	}
	s.mu.Lock()
	marking := s.marking
	s.mu.Unlock()
	if marking > 0 {
		s.log.Info().Int("turns", marking).Msg("status marks still being set at shutdown; the next start settles them")
	}
	s.dropDecor()
	s.cancel()
	<-done
	s.views.Wait()
	s.stopRetitles()
}

// spawnLate runs f on a goroutine the Server owns, unless Close is
// already waiting for them; it reports whether f runs. For work started
// from outside the Server's own goroutines (an agent's request), which
// may come at any time.
func (s *Server) spawnLate(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waiting {
		return false
	}
	s.wg.Go(f)
	return true
}

// Stats are the Server's counters and gauges.
type Stats struct {
	OpenPermissions    int
	OpenQuestions      int // the agent's questions waiting for an answer
	Conversations      int
	RefusedUsers       uint64
	RefusedChannels    uint64 // messages in threads of channels no longer allowed
	IgnoredCancels     uint64 // stop marks of users who may not cancel the thread's turn
	RefusedAttachments uint64
	LostAnswers        uint64 // answers whose final view could not be shown
	Retitling          int    // threads renamed within RetitleInterval
	// Waiting is the number of waiting messages whose note offers Send
	// now.
	Waiting int
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.OpenPermissions = len(s.perms)
	st.OpenQuestions = len(s.questions)
	st.Conversations = len(s.convs)
	st.Retitling = len(s.titles)
	st.Waiting = len(s.notes)
	return st
}

// count adds one to a counter of s.stats.
func (s *Server) count(c *uint64) {
	s.mu.Lock()
	*c++
	s.mu.Unlock()
}

// Agents is the configured profiles (none when the broker was given no
// list), for a platform that lists them with its commands.
func (s *Server) Agents() []chat.AgentInfo {
	var out []chat.AgentInfo
	for _, a := range s.allAgents() {
		if !a.Removed {
			out = append(out, a)
		}
	}
	return out
}

// allAgents is the configured profiles and those removed whose agents
// still run.
func (s *Server) allAgents() []chat.AgentInfo {
	if s.cfg.Agents == nil {
		return nil
	}
	return s.cfg.Agents()
}

// errClosing: the Server is closing and starts nothing more.
var errClosing = errors.New("the chat server is closing")

// retryAfter reports how long a rate-limited call asks to wait.
func retryAfter(err error) (time.Duration, bool) {
	rl, ok := errors.AsType[*RateLimited](err)
	if !ok {
		return 0, false
	}
	return max(rl.After, chat.MinRetryAfter), true
}

// try makes a platform call, waiting out its rate limits (a wait ctx and
// the Server's end interrupt) up to tries calls in all.
func (s *Server) try(ctx context.Context, tries int, f func(ctx context.Context) error) error {
	return chat.Retry(ctx, s.ctx.Done(), tries, retryAfter, f)
}

// post posts v in where, waiting out rate limits.
func (s *Server) post(ctx context.Context, where string, v View) (string, error) {
	var id string
	err := s.try(ctx, 20, func(ctx context.Context) (err error) {
		id, err = s.p.Post(ctx, where, v)
		return err
	})
	return id, err
}

// sleep waits d; false if ctx or the Server ended first.
func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	return chat.Sleep(ctx, s.ctx.Done(), d)
}

// notFound reports whether a platform's error says what it named does
// not exist.
func notFound(err error) bool { return errors.Is(err, ErrNotFound) }

// errChannelNotServed ends the turns of a channel removed from the
// allow-list.
var errChannelNotServed = fmt.Errorf("%w: this channel is no longer served by the bot", adapter.ErrCancelled)
