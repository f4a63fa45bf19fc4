package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/cgroup"
	"acpbroker/chat"
	"acpbroker/chat/console"
	"acpbroker/chat/discord"
	"acpbroker/internal/redact"
	"acpbroker/metrics"
	"acpbroker/policy"
	"acpbroker/pool"
	"acpbroker/store"
	"acpbroker/workspace"

	"github.com/rs/zerolog"
)

// broker is one running broker: its parts, in the order they start.
type broker struct {
	cfg      *Config
	profiles atomic.Pointer[map[string]*Profile] // cfg's, for goroutines other than serve's
	path     string                              // of the configuration, for reloads
	environ  []string                            // for reloads
	log      zerolog.Logger
	level    *levelWriter
	redact   *redact.Redactor // secret values, masked in agents' stderr and reload diffs
	notify   *notifier
	store    *store.Store
	audit    *auditServer // nil if its socket could not be made
	pool     *pool.Pool
	cgroups  *cgroup.Manager // nil: agents run without resource limits
	engine   *adapter.Engine
	platform chat.Platform
	discord  *discord.Client // the platform, when it is Discord
	metrics  *metrics.Metrics
	http     *metrics.Server
	started  time.Time

	// gitConfine confines the git commands on worktree profiles'
	// repositories (nil: hardened only); it changes with a restart.
	gitConfine workspace.Confiner
}

// open starts everything but the chat platform's serving: the store (with
// recovery), the pool, the engine, the platform client and the HTTP
// endpoints. On error, what was started is stopped again.
func open(cfg *Config, path string, environ []string, log zerolog.Logger, level *levelWriter, stdin io.Reader, stdout io.Writer) (b *broker, err error) {
	lookup := envLookup(environ)
	b = &broker{cfg: cfg, path: path, environ: environ, log: log, level: level, notify: newNotifier(lookup, os.Getpid()), started: time.Now()}
	b.profiles.Store(&cfg.Profiles)
	defer func() {
		if err != nil {
			b.stop(context.Background())
		}
	}()
	b.store, err = store.Open(store.Options{Dir: cfg.State.Dir, Retention: cfg.State.Retention, Logger: log})
	if err != nil {
		return b, err
	}
	if b.audit, err = serveAudit(cfg.State.Dir, b.store.Decisions, log); err != nil {
		log.Warn().Err(err).Msg("the audit trail is not served: `broker audit` can read it only once the broker stops")
		err = nil
	}
	if left, err := b.store.Leftovers(); err != nil {
		log.Warn().Err(err).Msg("could not read the agents an earlier broker left")
	} else if len(left) > 0 {
		list := make([]pool.Leftover, len(left))
		for i, a := range left {
			list[i] = pool.Leftover{PID: a.PID, StartTicks: a.StartTicks}
		}
		pool.KillLeftovers(list, log)
	}
	b.gitConfine = gitConfiner(cfg, path)
	agents, err := buildProfiles(cfg, environ, b.store.WorktreeMade, b.gitConfine, log)
	if err != nil {
		return b, fmt.Errorf("config: %w", err)
	}
	b.redact = redact.New(agents.secrets...)
	b.cgroups = openCgroups(cfg, log)
	b.pool = pool.New(pool.Config{
		Sandbox:        sandboxFor(cfg, path),
		RunAs:          cfg.Agent.RunAs,
		Cgroups:        b.cgroups,
		Redact:         b.redact,
		Profiles:       agents.profiles,
		DefaultProfile: cfg.DefaultProfile,
		MaxSessions:    cfg.Pool.MaxSessions,
		IdleTimeout:    cfg.Pool.IdleTimeout,
		ExitGrace:      cfg.Agent.ExitGrace,
		Sessions:       b.store,
		Registry:       b.store,
		Conn: acp.Options{
			MaxLineBytes:     cfg.Agent.MaxLineBytes,
			MaxReadBytes:     cfg.Agent.MaxReadBytes,
			MaxWriteBytes:    cfg.Agent.MaxWriteBytes,
			MaxAgentRequests: cfg.Agent.MaxRequests,
			MaxTerminals:     cfg.Agent.MaxTerminals,
			MaxTerminalBytes: cfg.Agent.MaxTerminalBytes,
			UpdateQueue:      cfg.Turn.UpdateQueue,
			ClientInfo:       acp.Implementation{Name: "acp-broker", Version: version},
		},
		Logger: log,
	})
	b.metrics = metrics.New(metrics.Sources{
		Engine: func() adapter.Stats { return b.engine.Stats() },
		Store:  b.store.Stats,
		Chat:   b.chatStats,
	})
	ec := engineConfig(cfg, b.store, b.metrics, storeAuditor{b.store}, log)
	ec.ThreadProfiles = b.store
	ec.ThreadChoices = b.store
	b.engine = adapter.New(b.pool, ec)
	switch cfg.Chat.Platform {
	case "console":
		b.platform = &console.Console{Engine: b.engine, In: stdin, Out: stdout, ShowThoughts: cfg.Discord.ShowThoughts, Agents: b.agentList}
	case "discord":
		dc := discordConfig(cfg, b.store, log)
		dc.Agents = b.agentList
		b.discord, err = discord.New(dc, b.engine)
		if err != nil {
			return b, err
		}
		b.platform = b.discord
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

// builtProfiles are the configured profiles as the pool takes them, and
// the secret values they carry.
type builtProfiles struct {
	profiles map[string]*pool.Profile
	secrets  []string
}

// buildProfiles makes each configured profile the pool's: its
// environment built from the broker's (errors name the profile's env
// key), its working directory absolute, and a worktree profile's
// workspace hook, which gives made (if not nil) each worktree it makes
// or finds, its git commands confined by confine. secrets are the token
// and every profile's secret values.
func buildProfiles(cfg *Config, environ []string, made func(store.Worktree), confine workspace.Confiner, log zerolog.Logger) (*builtProfiles, error) {
	lookup := envLookup(environ)
	out := &builtProfiles{profiles: map[string]*pool.Profile{}, secrets: []string{cfg.Discord.Token}}
	var errs []error
	said := map[string]bool{} // an error of [agent]'s env, once for every profile
	for _, name := range sortedKeys(cfg.Profiles) {
		p := cfg.Profiles[name]
		envKey := "agent.env"
		if k := "agents." + name + ".env"; cfg.values[k] != "" {
			envKey = k // written in the profile's own section
		}
		env, err := pool.BuildEnvFor(envKey, lookup, p.Env)
		if err != nil {
			if !said[err.Error()] {
				said[err.Error()] = true
				errs = append(errs, err)
			}
			continue
		}
		cwd, err := filepath.Abs(p.Cwd)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", profileKeyName(cfg, p, "cwd"), err))
			continue
		}
		pp := &pool.Profile{
			Command:            p.Command,
			Args:               p.Args,
			Env:                env,
			MCPServers:         p.MCPServers,
			WorkDir:            cwd,
			PerThreadDir:       p.PerThreadDir,
			AuthMethod:         p.AuthMethod,
			StartTimeout:       p.StartTimeout,
			RestartAfterCancel: p.RestartAfterCancel,
			MaxSessions:        p.MaxSessions,
			MemoryMax:          p.MemoryMax,
			PidsMax:            p.PidsMax,
			SandboxRO:          slices.Clone(p.SandboxRO),
			SandboxRW:          slices.Clone(p.SandboxRW),
			Permissions:        nonNil(p.Permissions),
		}
		abs := *p
		abs.Cwd = cwd
		if wt := worktreesFor(&abs, confine, log); wt != nil {
			pp.SandboxRW = append(pp.SandboxRW, gitDir(p.Repo))
			repo, err := filepath.Abs(p.Repo)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", profileKeyName(cfg, p, "repo"), err))
				continue
			}
			pp.Workspace = func(ctx context.Context, thread string) (string, error) {
				dir, _, err := wt.Prepare(ctx, thread)
				if err == nil && made != nil {
					made(store.Worktree{Dir: dir, Thread: thread, Profile: p.Name, Repo: repo, Root: wt.Dir, DeleteBranches: wt.DeleteBranches})
				}
				return dir, err
			}
		}
		out.profiles[name] = pp
		out.secrets = append(out.secrets, secretValues(p, env)...)
	}
	return out, errors.Join(errs...)
}

// nonNil makes a profile without rules have none: the engine's own do
// not apply to its agents either.
func nonNil(rules []policy.Rule) []policy.Rule {
	if rules == nil {
		return []policy.Rule{}
	}
	return rules
}

// agentList describes the profiles now configured, with their agents'
// counts, for /new and /agents; then those removed whose agents still
// run, marked so.
func (b *broker) agentList() []chat.AgentInfo {
	profiles := *b.profiles.Load()
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

func engineConfig(cfg *Config, j adapter.Journal, o adapter.Observer, a adapter.Auditor, log zerolog.Logger) adapter.Config {
	return adapter.Config{
		TurnTimeout:       cfg.Turn.Timeout,
		LivenessInterval:  cfg.Turn.LivenessInterval,
		CancelGrace:       cfg.Turn.CancelGrace,
		SlotWait:          cfg.Pool.SlotWait,
		QueueSize:         cfg.Turn.QueueSize,
		PermissionMode:    cfg.Turn.PermissionMode,
		PermissionTimeout: cfg.Turn.PermissionTimeout,
		ToolTimeout:       cfg.Turn.ToolTimeout,
		WatchdogInterval:  cfg.Watchdog.Interval,
		Journal:           j,
		Observer:          o,
		Auditor:           a,
		Logger:            log,
	}
}

func discordConfig(cfg *Config, memory discord.Memory, log zerolog.Logger) discord.Config {
	d := cfg.Discord
	return discord.Config{
		Token:         d.Token,
		APIURL:        d.APIURL,
		Access:        discordAccess(cfg),
		EditInterval:  d.EditInterval,
		MaxMessages:   d.MaxMessages,
		MaxFileBytes:  d.MaxFileBytes,
		MaxImageBytes: d.MaxImageBytes,
		MaxTextBytes:  d.MaxTextBytes,
		Memory:        memory,
		Logger:        log,
	}
}

func discordAccess(cfg *Config) discord.Access {
	d := cfg.Discord
	channels := slices.Clone(d.AllowedChannels)
	for _, id := range sortedKeys(cfg.Channels) {
		if !slices.Contains(channels, id) {
			channels = append(channels, id) // a channel with a profile is allowed
		}
	}
	return discord.Access{
		ChannelAgents:    cfg.Channels,
		AllowedChannels:  channels,
		AllowAllChannels: d.AllowAllChannels,
		AllowedUsers:     d.AllowedUsers,
		AllowedRoles:     d.AllowedRoles,
		Approvers:        d.Approvers,
		ApproverRoles:    d.ApproverRoles,
		AllowedBots:      d.AllowedBots,
		ShowThoughts:     d.ShowThoughts,
	}
}

func (b *broker) chatStats() metrics.ChatStats {
	if b.discord == nil {
		return metrics.ChatStats{}
	}
	s := b.discord.Stats()
	return metrics.ChatStats{RESTCalls: s.RESTCalls, RateLimited: s.RateLimited, GatewayReconnects: s.GatewayReconnects,
		OpenPermissions: s.OpenPermissions, OpenQuestions: s.OpenQuestions, Conversations: s.Conversations, RefusedUsers: s.RefusedUsers, RefusedAttachments: s.RefusedAttachments,
		RefusedChannels: s.RefusedChannels, LostAnswers: s.LostAnswers, IgnoredCancels: s.IgnoredCancels, Retitling: s.Retitling}
}

// engineAnswers fails if the engine's lock is wedged.
func (b *broker) engineAnswers() error {
	b.engine.Stats()
	return nil
}

// readiness: the chat connection is up, the store writes, and the broker
// is not stopping.
func (b *broker) readiness() []metrics.Check {
	return []metrics.Check{
		{Name: "chat", Func: func() error {
			select {
			case <-b.platform.Ready():
				return b.platform.Healthy()
			default:
				return errors.New("not connected yet")
			}
		}},
		{Name: "store", Func: func() error {
			if !b.store.Healthy() {
				return errors.New(b.store.Stats().LastError)
			}
			return nil
		}},
		{Name: "engine", Func: b.engineAnswers},
	}
}

// serve runs the platform until ctx ends or its input ends. Signals:
// SIGHUP reloads; SIGTERM or SIGINT stops; a second one forces an
// immediate exit after killing every agent's process group.
func (b *broker) serve(ctx context.Context, signals <-chan os.Signal, forceExit func()) error {
	interrupted, err := b.store.Recover()
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	b.platform.Report(interruptions(interrupted), func(id uint64) {
		if err := b.store.MarkReported(id); err != nil {
			b.log.Warn().Err(err).Uint64("turn", id).Msg("interrupted turn not marked as reported")
		}
	})
	var bg sync.WaitGroup
	defer bg.Wait() // after stopRun
	ctx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	bg.Go(func() { b.sweepLoop(ctx) })
	runErr := make(chan error, 1)
	go func() { runErr <- b.platform.Run(ctx) }()
	b.log.Info().Str("platform", b.cfg.Chat.Platform).Str("agent", b.cfg.Agent.Command).Int("interrupted", len(interrupted)).Msg("broker started")

	// A reload's configuration is read and checked (git included) off
	// this loop, which stays free for signals; a newer SIGHUP supersedes
	// a reload still being checked.
	reloads := make(chan reloadResult)
	var reloadGen uint64
	cancelReload := func() {}
	defer func() { cancelReload() }()

	ready := b.platform.Ready()
	var ping <-chan time.Time
	if b.notify.watchdog > 0 {
		t := time.NewTicker(b.notify.watchdog / 2)
		defer t.Stop()
		ping = t.C
	}
	for {
		select {
		case <-ready:
			ready = nil
			if err := b.notify.notify("READY=1", "STATUS=serving"); err != nil {
				b.log.Warn().Err(err).Msg("systemd notification failed")
			}
		case <-ping:
			b.watchdogPing()
		case sig := <-signals:
			if sig == syscall.SIGHUP {
				cancelReload()
				reloadGen++
				gen := reloadGen
				rctx, cancel := context.WithTimeoutCause(ctx, reloadCheckTimeout,
					fmt.Errorf("the configuration's checks took more than %s", reloadCheckTimeout))
				cancelReload = cancel
				bg.Go(func() {
					res := b.prepareReload(rctx)
					res.gen = gen
					select {
					case reloads <- res:
					case <-ctx.Done():
					}
				})
				continue
			}
			b.log.Info().Str("signal", sig.String()).Msg("stopping")
			stopRun()
			go b.forceOnSecondSignal(signals, time.Now(), forceExit)
			return <-runErr
		case res := <-reloads:
			if res.gen == reloadGen {
				b.applyReload(res)
			}
		case err := <-runErr:
			return err
		}
	}
}

// watchdogPing tells systemd the broker is alive only while its parts are
// healthy: a wedged broker stops pinging and is restarted.
func (b *broker) watchdogPing() {
	for _, c := range b.readiness() {
		if err := c.Func(); err != nil {
			b.log.Warn().Str("check", c.Name).Err(err).Msg("unhealthy: no watchdog ping")
			return
		}
	}
	if err := b.notify.notify("WATCHDOG=1"); err != nil {
		b.log.Warn().Err(err).Msg("systemd watchdog ping failed")
	}
}

// duplicateSignal is how soon after the first a second SIGTERM counts as
// the same signal delivered twice.
const duplicateSignal = 250 * time.Millisecond

// forceOnSecondSignal kills every agent and exits at a second SIGTERM or
// SIGINT. One that comes within 250ms of the first is the same signal
// delivered twice (to the process and to its group, as timeout(1) and
// shells do), not a second request.
func (b *broker) forceOnSecondSignal(signals <-chan os.Signal, first time.Time, forceExit func()) {
	for sig := range signals {
		if sig == syscall.SIGHUP || time.Since(first) < duplicateSignal {
			continue
		}
		b.log.Warn().Str("signal", sig.String()).Msg("second signal: killing every agent and exiting now")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		b.pool.Shutdown(ctx)
		if b.cgroups != nil {
			b.cgroups.Close()
		}
		forceExit()
		return
	}
}

// stop shuts down within ctx's deadline, on one clock for every agent
// (see planStop): no new prompts (Run has returned, and the platform is
// closing its connection); every busy thread told, and every turn ended
// in parallel, each agent given until answerBy to answer its cancel;
// then the agents stopped, those left killed at goneBy, while the last
// words are posted; then the platform closed, and the store. Nothing
// waits past the deadline longer than a small constant.
func (b *broker) stop(ctx context.Context) {
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
	// platform is closed after, and waits only for what is left.
	var wg sync.WaitGroup
	if b.pool != nil {
		wg.Go(func() { b.pool.Shutdown(agents) })
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
	if b.platform != nil {
		grace := openEndedWait
		if bounded {
			grace = max(time.Until(deadline), 0)
		}
		if err := b.platform.Close(grace); err != nil {
			b.log.Warn().Err(err).Msg("chat connection did not close cleanly")
		}
	}
	if b.cgroups != nil {
		b.cgroups.Close()
	}
	if b.audit != nil {
		b.audit.Close()
	}
	if b.store != nil {
		b.store.Close()
	}
}

// stopPlan is when a shutdown gives up waiting on its agents: every
// agent on the same clock, so that the shutdown takes what one agent is
// allowed, however many there are and whatever they do.
type stopPlan struct {
	// answerBy ends the wait for the agents' answers to the cancel of
	// their turns; the turns end then at the latest.
	answerBy time.Time
	// goneBy ends the agents' stop: stdin closed, then SIGTERM, each
	// with half of what is left; every agent still there is killed then.
	goneBy time.Time
}

// planStop plans a shutdown from now to deadline: the last words' share
// of it is kept for posting how each turn ended, and the rest is split
// in three steps of at most agent.exit_grace each (exitGrace): the wait
// for the answer to the cancel (at most turn.cancel_grace, cancelGrace,
// too), the wait after stdin is closed, the wait after SIGTERM. At the
// defaults (15s, 10s, 2s) every agent is gone within 6s.
func planStop(now, deadline time.Time, cancelGrace, exitGrace time.Duration) stopPlan {
	total := deadline.Sub(now)
	step := max(min(exitGrace, (total-lastWordsShare(total))/3), 0)
	answer := min(cancelGrace, step)
	return stopPlan{answerBy: now.Add(answer), goneBy: now.Add(answer + 2*step)}
}

// lastWordsShare is the part of the shutdown time kept from the agents'
// steps for posting how each turn ended and closing the chat connection:
// a quarter, at least 2s and at most 5s, never all of it.
func lastWordsShare(total time.Duration) time.Duration {
	return min(max(total/4, 2*time.Second), 5*time.Second, total/2)
}

// openEndedWait is what a shutdown without a deadline gives the last posts
// and the metrics server's requests (quick scrapes).
const openEndedWait = time.Second

// openCgroups readies the control groups agents run in, under the
// broker's own; where it cannot, it says so and agents run without
// resource limits. Agents started through a launcher get none: their
// limits are the container's or the pod's.
func openCgroups(cfg *Config, log zerolog.Logger) *cgroup.Manager {
	if cfg.Agent.Sandbox == "launcher" {
		log.Info().Msg("agents started through a launcher get no resource limits from the broker (memory_max, pids_max): the container's or pod's own apply")
		return nil
	}
	m, err := cgroup.Open(cgroup.Options{Name: cgroup.NameFor(cfg.State.Dir), Logger: log})
	if err != nil {
		ev := log.Info()
		if limitsSet(cfg) {
			ev = log.Warn()
		}
		ev.Err(err).Msg("agents run without resource limits (memory_max, pids_max)")
		return nil
	}
	log.Info().Str("cgroups", m.String()).Strs("dirs", m.Dirs()).Msg("each agent runs in a control group of its own")
	return m
}

// limitsSet reports whether some profile limits its agents.
func limitsSet(cfg *Config) bool {
	for _, p := range cfg.Profiles {
		if p.MemoryMax > 0 || p.PidsMax > 0 {
			return true
		}
	}
	return false
}

// sandboxCheckTimeout bounds the trial run of the sandbox at start.
const sandboxCheckTimeout = 10 * time.Second

// sandboxFor is the agents' sandbox as configured. What the broker keeps
// out of the agents' sight wherever a path shown to them holds it: its
// state, its configuration and token files and the directories they are
// in (checkSandbox refuses what hiding cannot keep).
func sandboxFor(cfg *Config, configPath string) pool.Sandbox {
	switch cfg.Agent.Sandbox {
	case "launcher":
		return pool.Sandbox{Launcher: cfg.Agent.Launcher, LauncherStop: cfg.Agent.LauncherStop}
	case "bwrap":
	default:
		return pool.Sandbox{}
	}
	var hide []string
	for _, b := range brokerPaths(cfg, configPath) {
		hide = append(hide, b.path)
	}
	return pool.Sandbox{Bwrap: "bwrap",
		NoNetwork: !cfg.Agent.SandboxNetwork, Hide: hide}
}

// secretValues are the values of a profile the broker knows to be
// secret: what its env passes to agents (API keys), and the env and
// header values of its MCP servers, as expanded.
func secretValues(p *Profile, env []string) []string {
	var vals []string
	for name := range p.Env {
		for _, kv := range env {
			if k, v, ok := strings.Cut(kv, "="); ok && k == name {
				vals = append(vals, v)
			}
		}
	}
	for _, s := range p.MCPServers {
		for _, e := range s.Env {
			vals = append(vals, e.Value)
		}
		for _, h := range s.Headers {
			// "Bearer TOKEN": the token alone is a secret too.
			vals = append(vals, h.Value)
			if i := strings.LastIndexByte(h.Value, ' '); i >= 0 {
				vals = append(vals, h.Value[i+1:])
			}
		}
	}
	return vals
}

// reloadCheckTimeout bounds reading and checking the configuration at a
// reload, git calls included.
const reloadCheckTimeout = time.Minute

// reloadResult is a configuration read and checked for a reload, or why
// it is refused; gen is the SIGHUP it answers.
type reloadResult struct {
	cfg    *Config
	read   *reader // what read cfg, to read its live keys again
	agents *builtProfiles
	err    error
	gen    uint64
}

// prepareReload reads the configuration again and checks it as start
// does: its keys, its profiles' environments, and what checkProfiles
// asks of the machine (git for worktree profiles), within ctx. It
// touches nothing of the running broker; b.path, b.environ and b.log do
// not change.
func (b *broker) prepareReload(ctx context.Context) reloadResult {
	cfg, read, err := loadConfig(b.path, b.environ)
	if err != nil {
		return reloadResult{err: err}
	}
	agents, err := buildProfiles(cfg, b.environ, b.store.WorktreeMade, b.gitConfine, b.log)
	if err != nil {
		return reloadResult{err: fmt.Errorf("config: %w", err)}
	}
	problems := checkProfiles(ctx, cfg, b.gitConfine)
	problems = append(problems, checkSandbox(cfg, b.path)...)
	if len(problems) > 0 {
		return reloadResult{err: fmt.Errorf("config: %w", errors.Join(problems...))}
	}
	if ctx.Err() != nil {
		return reloadResult{err: context.Cause(ctx)}
	}
	return reloadResult{cfg: cfg, read: read, agents: agents}
}

// applyReload applies a configuration prepareReload read: what can change
// while running; it says in the log what changed and what needs a
// restart. A configuration with errors is refused whole.
func (b *broker) applyReload(res reloadResult) {
	if res.err != nil {
		b.log.Error().Err(res.err).Msg("reload refused: the configuration has errors; nothing changed")
		return
	}
	cfg, agents := res.cfg, res.agents
	for _, w := range cfg.Warnings {
		b.log.Warn().Msg(w)
	}
	applied, restart := b.changes(cfg)
	// Profiles change for agents started from now on; the rest, only the
	// live keys, each read again onto the running configuration by its
	// own entry of the key table: everything else stays as it was
	// started.
	b.redact.Add(agents.secrets...)
	b.pool.SetProfiles(agents.profiles, cfg.DefaultProfile)
	live := *b.cfg
	for _, k := range keys {
		if k.live {
			k.read(res.read, k.name, &live)
		}
	}
	live.values = map[string]string{}
	for k, v := range b.cfg.values {
		if !profileChange(k) {
			live.values[k] = v
		}
		if slices.Contains(liveKeys, k) {
			live.values[k] = cfg.values[k]
		}
	}
	for k, v := range cfg.values {
		if profileChange(k) {
			live.values[k] = v
		}
	}
	live.Profiles, live.DefaultProfile, live.Channels = cfg.Profiles, cfg.DefaultProfile, cfg.Channels
	b.cfg = &live
	b.profiles.Store(&live.Profiles)
	b.level.set(live.Log.Level)
	b.engine.Reconfigure(engineConfig(&live, nil, nil, nil, b.log))
	if b.discord != nil {
		b.discord.SetAccess(discordAccess(&live))
		b.discord.RefreshCommands()
	}
	ev := b.log.Info().Strs("applied", applied)
	if len(restart) > 0 {
		ev = b.log.Warn().Strs("applied", applied).Strs("need_restart", restart)
	}
	ev.Msg("configuration reloaded")
}

// The state store keeps what each part must not forget; each part says
// what it needs in an interface of its own.
var (
	_ adapter.Journal        = (*store.Store)(nil)
	_ adapter.ThreadProfiles = (*store.Store)(nil)
	_ adapter.ThreadChoices  = (*store.Store)(nil)
	_ discord.Memory         = (*store.Store)(nil)
	_ pool.SessionBook       = (*store.Store)(nil)
	_ pool.Registry          = (*store.Store)(nil)
)

// changes lists how cfg differs from the running configuration, as
// "key: old -> new" (a secret key by its name alone, and known secret
// values masked): those that apply at once, and those that need a
// restart.
func (b *broker) changes(cfg *Config) (applied, restart []string) {
	all := map[string]bool{}
	for k := range cfg.values {
		all[k] = true
	}
	for k := range b.cfg.values {
		all[k] = true // a key gone (a profile removed) is a change too
	}
	for k := range all {
		v, old := cfg.values[k], b.cfg.values[k]
		if v == old {
			continue
		}
		desc := k
		if !secretKey(k) {
			desc = b.redact.String(fmt.Sprintf("%s: %s -> %s", k, old, v))
		}
		if slices.Contains(liveKeys, k) || profileChange(k) {
			applied = append(applied, desc)
		} else {
			restart = append(restart, desc)
		}
	}
	sort.Strings(applied)
	sort.Strings(restart)
	return applied, restart
}

// profileChange reports whether key belongs to the profiles, which a
// reload changes for agents started from then on.
func profileChange(key string) bool {
	if strings.HasPrefix(key, "channels.") {
		return true
	}
	_, field, ok := profileField(key)
	return ok && (knownProfileKey(field) || strings.HasPrefix(field, mcpServersField) || field == permissionsField)
}

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

// checkWritable makes sure a directory exists and the broker can write
// there.
func checkWritable(key, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%s = %q: %w", key, dir, err)
	}
	f, err := os.CreateTemp(dir, ".write-check-*")
	if err != nil {
		return fmt.Errorf("%s = %q is not writable: %w", key, dir, err)
	}
	name := f.Name()
	f.Close()
	os.Remove(name)
	return nil
}
