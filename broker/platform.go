package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"acpbroker/adapter"
	"acpbroker/chat"
	"acpbroker/chat/console"
	"acpbroker/chat/thread"
	"acpbroker/config"
	"acpbroker/store"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Platform is one chat platform as a broker runs it: the front end, and
// what the broker asks of it besides serving.
type Platform struct {
	chat.Platform
	// Reload, if set, takes the live keys of a reloaded configuration
	// (who may use the bot, where) and the profiles now offered.
	Reload func(cfg *config.Config)
	// Metrics, if set, collects its metrics, for /metrics; the broker
	// labels each with the platform's name. thread.StatsMetrics and
	// thread.CallsMetrics are those every platform may have; one that
	// describes a metric of the broker's otherwise is a bug, and Open
	// panics.
	Metrics prometheus.Collector
	// Conversation, if set, says for `broker status` in which channel
	// one of its threads (by its own id) was opened and who started it,
	// as the platform's ids; ok false for a thread it does not know. It
	// must answer at once, asking the platform nothing:
	// thread.Server.Conversation does.
	Conversation func(thread string) (channel, starter string, ok bool)
	// Threads, if set, is the Server of its conversations: the broker
	// starts turns there itself (its schedules' runs, the API's prompts)
	// and gives it the schedules it shows. A platform without it takes
	// neither.
	Threads *thread.Server
	// Web, if set, is the Server whose threads the web front end shows
	// where Threads is not set (the console's: the API and the
	// schedules start no turns in it).
	Web *thread.Server
}

// PlatformFunc makes the platform chat.platform names from the broker's
// parts, as the platform sees them. It must not serve: Serve runs it.
type PlatformFunc func(p Parts) (Platform, error)

// Parts are what a platform is made from.
type Parts struct {
	// Name is the platform's, as chat.platform gives it: the first part
	// of its threads' ids in the engine, the pool and the store.
	Name   string
	Config *config.Config
	// Engine is the broker's engine, by the platform's own thread ids.
	Engine chat.Engine
	// Memory keeps the platform's records of its conversations in the
	// state store, by its own thread ids.
	Memory Memory
	// Agents lists the agent profiles now configured, with their agents'
	// counts, for people choosing one.
	Agents func() []chat.AgentInfo
	// Logger logs with the platform's name.
	Logger zerolog.Logger
	// Stdin and Stdout are the broker's (the console's).
	Stdin  io.Reader
	Stdout io.Writer
}

// Memory keeps a platform's record of each of its conversations across
// restarts, opaque to the broker.
type Memory interface {
	PutThreadChat(thread string, record json.RawMessage)
	ThreadChat(thread string) (json.RawMessage, bool)
	ThreadChats() map[string]json.RawMessage
}

// Known are the platforms a broker can serve, by the name chat.platform
// gives them: every one of config.Platforms.
func Known() map[string]PlatformFunc {
	return map[string]PlatformFunc{
		config.Console: Console,
		"discord":      Discord(nil),
		"slack":        Slack(nil),
	}
}

// platform is a platform the broker serves.
type platform struct {
	name string
	Platform
}

// openPlatforms makes each platform chat.platform names, in its order.
func (b *Broker) openPlatforms() error {
	makers := Known()
	for name, f := range b.opts.Platforms {
		makers[name] = f
	}
	for _, name := range b.cfg.Chat.Platforms {
		newPlatform := makers[name]
		if newPlatform == nil {
			return fmt.Errorf("chat.platform: %q is not a platform this broker can serve", name)
		}
		p, err := newPlatform(Parts{
			Name:   name,
			Config: b.cfg,
			Engine: platformEngine{e: b.engine, platform: name},
			Memory: platformMemory{s: b.store, platform: name},
			Agents: b.agentList,
			Logger: b.log.With().Str("platform", name).Logger(),
			Stdin:  b.opts.Stdin,
			Stdout: b.opts.Stdout,
		})
		if err != nil {
			return err // a platform's errors name it
		}
		if p.Platform == nil {
			return fmt.Errorf("%s: no platform made", name)
		}
		b.chats = append(b.chats, &platform{name: name, Platform: p})
		if p.Metrics != nil {
			b.metrics.Register(prometheus.WrapCollectorWith(prometheus.Labels{"platform": name}, p.Metrics))
		}
	}
	return nil
}

// Console is the terminal the broker runs on, one conversation at a
// time.
func Console(p Parts) (Platform, error) {
	c := console.New(console.Config{Engine: p.Engine, In: p.Stdin, Out: p.Stdout, ShowThoughts: p.Config.Discord.ShowThoughts,
		Agents: p.Agents, Memory: p.Memory, Logger: p.Logger})
	return Platform{Platform: c, Web: c.Threads()}, nil
}

// platformEngine is the engine as one platform sees it: by its own thread
// ids.
type platformEngine struct {
	e        *adapter.Engine
	platform string
}

var (
	_ chat.QueueEngine   = platformEngine{}
	_ chat.SessionEngine = platformEngine{}
)

func (v platformEngine) id(thread string) string { return ThreadID(v.platform, thread) }

func (v platformEngine) Submit(thread string, p *adapter.Prompt) error {
	return v.e.Submit(v.id(thread), p)
}

func (v platformEngine) Cancel(thread string, cause error) bool {
	return v.e.Cancel(v.id(thread), cause)
}
func (v platformEngine) Reset(thread string, cause error) { v.e.Reset(v.id(thread), cause) }

func (v platformEngine) Status(thread string) adapter.ThreadStatus { return v.e.Status(v.id(thread)) }

func (v platformEngine) Options(thread string) adapter.ThreadOptions {
	return v.e.Options(v.id(thread))
}

func (v platformEngine) SetOption(ctx context.Context, thread, id, value string) (adapter.ThreadOptions, error) {
	return v.e.SetOption(ctx, v.id(thread), id, value)
}

func (v platformEngine) SetMode(ctx context.Context, thread, mode string) (adapter.ThreadOptions, error) {
	return v.e.SetMode(ctx, v.id(thread), mode)
}

func (v platformEngine) SendNow(thread string, p *adapter.Prompt, by string) error {
	return v.e.SendNow(v.id(thread), p, by)
}

func (v platformEngine) Withdraw(thread string, p *adapter.Prompt, cause error) error {
	return v.e.Withdraw(v.id(thread), p, cause)
}

func (v platformEngine) Waiting(thread string) []adapter.Waiting { return v.e.Waiting(v.id(thread)) }

// Sessions names the threads the records give by the platform's own
// ids; a thread of another platform is not named.
func (v platformEngine) Sessions(ctx context.Context, thread string) (adapter.SessionList, error) {
	list, err := v.e.Sessions(ctx, v.id(thread))
	for i, s := range list.Sessions {
		list.Sessions[i].Thread, _ = strings.CutPrefix(s.Thread, v.platform+":")
		if list.Sessions[i].Thread == s.Thread {
			list.Sessions[i].Thread = ""
		}
	}
	return list, err
}

func (v platformEngine) Resume(ctx context.Context, thread, id string) (adapter.Resumed, error) {
	return v.e.Resume(ctx, v.id(thread), id)
}

func (v platformEngine) CanFork(ctx context.Context, thread string) error {
	return v.e.CanFork(ctx, v.id(thread))
}

func (v platformEngine) Fork(ctx context.Context, parent, child string) (adapter.Forked, error) {
	return v.e.Fork(ctx, v.id(parent), v.id(child))
}

// platformMemory is the state store's records of one platform's
// conversations, by its own thread ids.
type platformMemory struct {
	s        *store.Store
	platform string
}

var _ Memory = platformMemory{}

func (m platformMemory) PutThreadChat(thread string, record json.RawMessage) {
	m.s.PutThreadChat(ThreadID(m.platform, thread), record)
}

func (m platformMemory) ThreadChat(thread string) (json.RawMessage, bool) {
	return m.s.ThreadChat(ThreadID(m.platform, thread))
}

func (m platformMemory) ThreadChats() map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for id, record := range m.s.ThreadChats() {
		if thread, ok := strings.CutPrefix(id, m.platform+":"); ok {
			out[thread] = record
		}
	}
	return out
}
