// Package broker wires one broker from its configuration: the state
// store (with recovery), the agents' pool and sandbox, the turn engine,
// the chat platforms, the metrics and health endpoints, the socket that
// answers `broker audit` and `broker status`,
// the sweep of worktrees past retention and systemd's notifications. The
// daemon and every test that needs a whole broker open one here.
//
// A broker is checked, opened, served, reloaded and stopped:
//
//	cfg, err := config.Load(path, os.Environ())
//	err = broker.Check(ctx, cfg, os.Environ()) // what a start needs of the machine
//	b, err := broker.Open(cfg, broker.Options{Environ: os.Environ(), Logger: log})
//	go func() { err = b.Serve(ctx) }() // until ctx ends, or a platform's Run returns
//	b.Reload()                         // at SIGHUP: read the file again, apply what can change
//	b.Stop(graceCtx)                   // once Serve has returned
//
// Each name in cfg.Chat.Platforms is made by its PlatformFunc (Known,
// and Options.Platforms over them) from Parts: the engine and the state
// store's records as that platform sees them, by its own thread ids.
// Everywhere else a thread is known by its ThreadID, "discord:1234…".
package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"acpbroker/adapter"
	"acpbroker/api"
	"acpbroker/cgroup"
	"acpbroker/chat"
	"acpbroker/cluster"
	"acpbroker/config"
	"acpbroker/internal/brokersock"
	"acpbroker/internal/redact"
	"acpbroker/metrics"
	"acpbroker/netproxy"
	"acpbroker/pool"
	"acpbroker/schedule"
	"acpbroker/store"
	"acpbroker/web"
	"acpbroker/workspace"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// Options are what a broker is opened with besides its configuration.
type Options struct {
	// Environ is the broker's environment, as os.Environ gives it:
	// agents' environments are built from it, and systemd's variables
	// (NOTIFY_SOCKET, WATCHDOG_USEC) read there.
	Environ []string
	Logger  zerolog.Logger
	// SetLevel, if set, is given log.level at every reload.
	SetLevel func(level string)
	// Version is the broker's, as agents are told at initialize.
	Version string
	// Stdin and Stdout are the console's.
	Stdin  io.Reader
	Stdout io.Writer
	// Platforms add platforms to those the broker knows (Known), or
	// replace one, by the name chat.platform gives them: for a test's own
	// platform, or one made another way.
	Platforms map[string]PlatformFunc
	// Pool and Engine, if set, change the configurations the pool and
	// the engine are made with, at Open: for tests, what no key says.
	Pool   func(*pool.Config)
	Engine func(*adapter.Config)
}

// Broker is one broker: its parts, in the order they start. Open makes
// it, Serve runs it, Stop ends it; Reload and Kill may be called from
// any goroutine while it serves.
type Broker struct {
	opts    Options
	pid     int
	started time.Time
	cfg     *config.Config                // Serve's goroutine's after Open
	live    atomic.Pointer[config.Config] // cfg, for other goroutines
	log     zerolog.Logger
	redact  *redact.Redactor // secret values, masked in agents' stderr and reload diffs
	notify  *notifier
	store   *store.Store
	sock    *brokersock.Server // nil if its socket could not be made
	pool    *pool.Pool
	cgroups *cgroup.Manager // nil: agents run without resource limits
	proxy   *netproxy.Proxy // the sandboxed agents' way out (nil: none goes through it)
	engine  *adapter.Engine
	chats   []*platform // in chat.platform's order
	metrics *metrics.Metrics
	http    *metrics.Server
	// api serves the HTTP API (nil without api.listen); headless is
	// where its prompts run without a chat. sched runs the schedules.
	api      *api.Server
	headless *api.Headless
	web      *web.Server // the web front end (nil without web.listen)
	// cluster places agents on agent hosts, over nc; embedded is the NATS
	// server the broker serves them (each nil without [cluster]).
	cluster  *cluster.Client
	nc       *nats.Conn
	embedded *cluster.Embedded
	lostTold lostBook // threads told their idle agent's host was lost
	sched    *schedule.Scheduler

	// gitConfine confines the git commands on worktree profiles'
	// repositories (nil: hardened only); it changes with a restart.
	gitConfine workspace.Confiner
	// sandbox is the agents' sandbox as started: what it hides a
	// reload cannot change.
	sandbox pool.Sandbox

	ready     chan struct{} // closed once every platform takes messages
	reloads   chan struct{} // a reload asked for, not yet begun
	readyOnce sync.Once
}

// Open starts everything but the chat platforms' serving: the store
// (with the rename of an earlier broker's thread ids), the pool, the
// engine, the platforms and the HTTP endpoints. It does not check the
// machine (see Check). On error, what was started is stopped again.
func Open(cfg *config.Config, opts Options) (b *Broker, err error) {
	log := opts.Logger
	b = &Broker{opts: opts, pid: os.Getpid(), started: time.Now(), cfg: cfg, log: log, notify: newNotifier(envLookup(opts.Environ), os.Getpid()),
		ready: make(chan struct{}), reloads: make(chan struct{}, 1)}
	b.live.Store(cfg)
	defer func() {
		if err != nil {
			b.Stop(context.Background())
			b = nil
		}
	}()
	m, err := openMachine(cfg, opts, !clustered(cfg))
	b.store, b.redact, b.cgroups, b.proxy, b.sandbox, b.gitConfine = m.store, m.redact, m.cgroups, m.proxy, m.sandbox, m.gitConfine
	if err != nil {
		return b, err
	}
	pc := m.poolConfig(cfg, opts)
	if clustered(cfg) {
		jctx, cancel := context.WithTimeout(context.Background(), joinTimeout)
		err := b.joinCluster(jctx, &pc)
		cancel()
		if err != nil {
			return b, err
		}
	}
	if opts.Pool != nil {
		opts.Pool(&pc)
	}
	b.pool = pool.New(pc)
	if b.cluster != nil {
		b.cluster.Adopt(b.takeUp)
	}
	b.metrics = metrics.New(metrics.Sources{
		Ready:   b.unready,
		Version: opts.Version,
		API: func() metrics.APIStats {
			if b.api == nil {
				return metrics.APIStats{}
			}
			return b.api.Stats()
		},
	})
	b.metrics.Register(b.store)
	b.metrics.Register(b.pool)
	if b.cluster != nil {
		b.metrics.Register(b.cluster)
	}
	if b.proxy != nil {
		b.metrics.Register(b.proxy)
	}
	ec := engineConfig(cfg, b.store, storeAuditor{b.store}, log)
	ec.ThreadProfiles = b.store
	ec.ThreadChoices = b.store
	ec.SessionRecords = storeRecords{b.store}
	if opts.Engine != nil {
		opts.Engine(&ec)
	}
	b.engine = adapter.New(b.pool, ec)
	b.metrics.Register(b.engine)
	if err := b.openPlatforms(); err != nil {
		return b, err
	}
	b.sched = schedule.New(scheduleRunner{b}, b.store, log.With().Str("part", "schedules").Logger())
	b.metrics.Register(b.sched)
	for _, p := range b.chats {
		if p.Threads != nil {
			p.Threads.SetSchedules(platformSchedules{b: b, platform: p.name})
		}
	}
	if err := b.openAPI(); err != nil {
		return b, err
	}
	if err := b.openWeb(); err != nil {
		return b, err
	}
	if b.sock, err = brokersock.Serve(cfg.State.Dir, brokersock.Answers{Decisions: b.store.Decisions, Runs: b.store.ScheduleRuns, Status: func() any { return b.Status() }}, log); err != nil {
		log.Warn().Err(err).Msg("the broker's socket is not served: `broker status` cannot ask it, and `broker audit` can read the audit trail only once it stops")
		err = nil
	}
	if cfg.HTTP.Listen != "" {
		b.http, err = metrics.Listen(cfg.HTTP.Listen, b.metrics, []metrics.Check{{Name: "engine", Func: b.engineAnswers}}, b.readiness(), log)
		if err != nil {
			return b, err
		}
		log.Info().Str("addr", b.http.Addr()).Msg("serving /metrics, /healthz and /readyz")
	}
	return b, nil
}

// Config is the configuration the broker runs with: Open's, with what
// reloads have applied since. It is not to be changed.
func (b *Broker) Config() *config.Config { return b.live.Load() }

// Engine is the broker's turn engine, which knows threads by their
// ThreadID.
func (b *Broker) Engine() *adapter.Engine { return b.engine }

// Pool is the broker's pool of agents, which knows threads by their
// ThreadID.
func (b *Broker) Pool() *pool.Pool { return b.pool }

// Store is the broker's state store, which knows threads by their
// ThreadID.
func (b *Broker) Store() *store.Store { return b.store }

// Metrics is the registry /metrics serves.
func (b *Broker) Metrics() *metrics.Metrics { return b.metrics }

// Addr is the address of /metrics, /healthz and /readyz ("" without
// http.listen).
func (b *Broker) Addr() string {
	if b.http == nil {
		return ""
	}
	return b.http.Addr()
}

// Platform is the chat platform of that name the broker serves, or nil.
func (b *Broker) Platform(name string) chat.Platform {
	if p := b.chat(name); p != nil {
		return p.Platform.Platform
	}
	return nil
}

// Ready is closed once Serve has every platform taking messages.
func (b *Broker) Ready() <-chan struct{} { return b.ready }

// agentList describes the profiles now configured, with their agents'
// counts, for /new and /agents; then those removed whose agents still
// run, marked so.
func (b *Broker) agentList() []chat.AgentInfo {
	profiles := b.live.Load().Profiles
	st := b.pool.Stats()
	out := make([]chat.AgentInfo, 0, len(profiles))
	for _, name := range sortedKeys(profiles) {
		p, ps := profiles[name], st.Profiles[name]
		out = append(out, chat.AgentInfo{Name: name, Description: p.Description, Default: name == st.DefaultProfile,
			Live: ps.Live, Busy: ps.Busy, Max: p.MaxSessions})
	}
	for _, name := range sortedKeys(st.Profiles) {
		if ps := st.Profiles[name]; profiles[name] == nil && ps.Live+ps.Starting+ps.Stopping > 0 {
			out = append(out, chat.AgentInfo{Name: name, Live: ps.Live, Busy: ps.Busy, Removed: true})
		}
	}
	return out
}

func engineConfig(cfg *config.Config, j adapter.Journal, a adapter.Auditor, log zerolog.Logger) adapter.Config {
	return adapter.Config{
		TurnTimeout:       cfg.Turn.Timeout,
		LivenessInterval:  cfg.Turn.LivenessInterval,
		CancelGrace:       cfg.Turn.CancelGrace,
		SlotWait:          cfg.Pool.SlotWait,
		QueueSize:         cfg.Turn.QueueSize,
		Busy:              cfg.Turn.Busy,
		PermissionMode:    cfg.Turn.PermissionMode,
		PermissionTimeout: cfg.Turn.PermissionTimeout,
		ToolTimeout:       cfg.Turn.ToolTimeout,
		WatchdogInterval:  cfg.Watchdog.Interval,
		Journal:           j,
		Auditor:           a,
		Logger:            log,
	}
}

// engineAnswers fails if the engine's lock is wedged.
func (b *Broker) engineAnswers() error {
	b.engine.Stats()
	return nil
}

// readiness: every chat platform is connected and healthy, the store
// writes, and the engine answers.
func (b *Broker) readiness() []metrics.Check {
	var checks []metrics.Check
	for _, p := range b.chats {
		checks = append(checks, metrics.Check{Name: "chat " + p.name, Func: func() error {
			select {
			case <-p.Ready():
				return p.Healthy()
			default:
				return errors.New("not connected yet")
			}
		}})
	}
	return append(checks,
		metrics.Check{Name: "store", Func: func() error {
			if !b.store.Healthy() {
				return errors.New(b.store.Stats().LastError)
			}
			return nil
		}},
		metrics.Check{Name: "engine", Func: b.engineAnswers},
	)
}

// unready says why the broker is not ready (the first readiness check
// that fails), or nil.
func (b *Broker) unready() error {
	for _, c := range b.readiness() {
		if err := c.Func(); err != nil {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
	}
	return nil
}

// Kill stops every agent at once, its process group killed, and removes
// their control groups: for a broker about to exit without a shutdown
// (a second signal). Nothing else of the broker is stopped.
func (b *Broker) Kill() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b.pool.Shutdown(ctx)
	if b.proxy != nil {
		b.proxy.Close()
	}
	if b.cgroups != nil {
		b.cgroups.Close()
	}
}

// Stop shuts down within ctx's deadline, on one clock for every agent
// (see planStop): no new prompts (Serve has returned, and the platforms
// are closing their connections); every busy thread told, and every turn
// ended in parallel, each agent given until answerBy to answer its
// cancel; then the agents stopped, those left killed at goneBy, while
// the last words are posted; then the platforms closed, each within
// what is left and all at once, and the store. Nothing waits past the
// deadline longer than a small constant. Stop is for after Serve has
// returned, or instead of it.
func (b *Broker) Stop(ctx context.Context) {
	if err := b.notify.notify("STOPPING=1"); err != nil {
		b.log.Warn().Err(err).Msg("systemd notification failed")
	}
	deadline, bounded := ctx.Deadline()
	turns, agents := ctx, ctx
	if bounded && b.engine != nil && b.pool != nil {
		plan := planStop(time.Now(), deadline, b.engine.Config().CancelGrace, b.pool.Config().ExitGrace)
		b.log.Info().Time("answer_by", plan.answerBy).Time("gone_by", plan.goneBy).Msg("stopping every agent")
		b.pool.StopBy(plan.goneBy)
		var cancelTurns, cancelAgents context.CancelFunc
		turns, cancelTurns = context.WithDeadline(ctx, plan.answerBy)
		defer cancelTurns()
		agents, cancelAgents = context.WithDeadline(ctx, plan.goneBy)
		defer cancelAgents()
	}
	if b.engine != nil {
		b.engine.Shutdown(turns)
	}
	// The last words are on their way while the agents stop: the
	// platforms are closed after, and wait only for what is left.
	var wg sync.WaitGroup
	if b.pool != nil {
		wg.Go(func() { b.pool.Shutdown(agents) })
	}
	if b.api != nil {
		wg.Go(func() {
			actx, cancel := context.WithTimeout(context.Background(), openEndedWait)
			defer cancel()
			b.api.Close(actx)
		})
	}
	if b.web != nil {
		wg.Go(func() {
			wctx, cancel := context.WithTimeout(context.Background(), openEndedWait)
			defer cancel()
			b.web.Close(wctx)
		})
	}
	if b.http != nil {
		wg.Go(func() {
			hctx, cancel := context.WithTimeout(context.Background(), openEndedWait)
			defer cancel()
			if bounded {
				var cancelDL context.CancelFunc
				hctx, cancelDL = context.WithDeadline(hctx, deadline)
				defer cancelDL()
			}
			b.http.Close(hctx)
		})
	}
	wg.Wait()
	grace := openEndedWait
	if bounded {
		grace = max(time.Until(deadline), 0)
	}
	for _, p := range b.chats {
		wg.Go(func() {
			if err := p.Close(grace); err != nil {
				b.log.Warn().Err(err).Str("platform", p.name).Msg("chat connection did not close cleanly")
			}
		})
	}
	wg.Wait()
	if b.sched != nil {
		b.sched.Wait() // its loop ended with Serve; runs being started give up with it
	}
	b.leaveCluster() // after the agents: their stops went through it
	if b.proxy != nil {
		b.proxy.Close() // the agents are gone: what they left open goes
		os.RemoveAll(netDir(b.cfg))
	}
	if b.cgroups != nil {
		b.cgroups.Close()
	}
	if b.sock != nil {
		b.sock.Close()
	}
	if b.store != nil {
		b.store.Close()
	}
}

// openEndedWait is what a shutdown without a deadline gives the last posts
// and the metrics server's requests (quick scrapes).
const openEndedWait = time.Second

// The state store keeps what each part must not forget; each part says
// what it needs in an interface of its own.
var (
	_ adapter.Journal        = (*store.Store)(nil)
	_ adapter.ThreadProfiles = (*store.Store)(nil)
	_ adapter.ThreadChoices  = (*store.Store)(nil)
	_ pool.SessionBook       = (*store.Store)(nil)
	_ pool.Registry          = (*store.Store)(nil)
)

func interruptions(turns []store.Turn) []chat.Interruption {
	out := make([]chat.Interruption, len(turns))
	for i, t := range turns {
		out[i] = chat.Interruption{ID: t.ID, Thread: t.Thread, Ref: t.Ref, Title: t.Title, Queued: t.Queued, Elsewhere: t.Elsewhere}
		if t.State != store.Interrupted {
			out[i].Outcome = string(t.State)
			out[i].Ended = string(t.State)
			if t.Cause != "" {
				out[i].Ended += ": " + t.Cause
			}
		}
	}
	return out
}

// envLookup looks names up in an os.Environ-style list; later entries win.
func envLookup(environ []string) func(string) (string, bool) {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// sortedKeys are m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
