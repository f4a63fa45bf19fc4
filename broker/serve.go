package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"acpbroker/chat"
	"acpbroker/config"
)

// Serve runs the chat platforms until ctx ends or one of them returns
// (its input ended, or it failed; the others are then stopped too), and
// returns what they returned. Before they take messages it tells each
// platform of the turns an earlier broker was working on when it
// stopped. While it serves it sweeps worktrees past retention, applies
// the reloads Reload asks for, and tells systemd it is ready and alive
// (while healthy). Stop follows.
func (b *Broker) Serve(ctx context.Context) error {
	interrupted, err := b.store.Recover()
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	b.report(interruptions(interrupted))
	var bg sync.WaitGroup
	defer bg.Wait() // after stopRun
	ctx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	bg.Go(func() { b.sweepLoop(ctx) })
	runErrs := make(chan error, len(b.chats))
	var runs sync.WaitGroup
	for _, p := range b.chats {
		runs.Go(func() { runErrs <- p.Run(ctx) })
	}
	ready := make(chan struct{})
	bg.Go(func() { b.awaitReady(ctx, ready) })
	b.log.Info().Strs("platforms", b.cfg.Chat.Platforms).Str("agent", b.cfg.Agent.Command).Int("interrupted", len(interrupted)).Msg("broker started")

	// A reload's configuration is read and checked (git included) off
	// this loop, which stays free; a newer Reload supersedes a reload
	// still being checked.
	reloads := make(chan reloadResult)
	var reloadGen uint64
	cancelReload := func() {}
	defer func() { cancelReload() }()

	var ping <-chan time.Time
	if b.notify.watchdog > 0 {
		t := time.NewTicker(b.notify.watchdog / 2)
		defer t.Stop()
		ping = t.C
	}
	// stop ends every platform's Run, and returns what they returned
	// (errs: those returned already).
	stop := func(errs ...error) error {
		stopRun()
		runs.Wait()
		close(runErrs)
		for err := range runErrs {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	for {
		select {
		case <-ready:
			ready = nil
			b.startSchedules(ctx)
			if err := b.notify.notify("READY=1", "STATUS=serving"); err != nil {
				b.log.Warn().Err(err).Msg("systemd notification failed")
			}
		case <-ping:
			b.watchdogPing()
		case <-b.reloads:
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
		case res := <-reloads:
			if res.gen == reloadGen {
				b.applyReload(res)
			}
		case err := <-runErrs:
			return stop(err)
		case <-ctx.Done():
			return stop()
		}
	}
}

// startSchedules starts the schedules once every platform takes
// messages: runs an earlier broker left going are recorded as
// interrupted (their threads are told as every turn's are), and with
// catch_up a run missed meanwhile runs now.
func (b *Broker) startSchedules(ctx context.Context) {
	if left, err := b.store.InterruptScheduleRuns(); err != nil {
		b.log.Warn().Err(err).Msg("the schedules' runs could not be read")
	} else if len(left) > 0 {
		b.log.Info().Int("runs", len(left)).Msg("schedule runs interrupted by the broker's stop")
	}
	b.sched.Start(ctx, b.cfg.Schedules)
	if n := len(b.cfg.Schedules); n > 0 {
		b.log.Info().Int("schedules", n).Msg("schedules started")
	}
}

// Reload has Serve read the configuration again and apply what can change
// while it runs (see prepareReload and applyReload); the log says what
// changed and what needs a restart. It returns at once; a Reload while
// one is being checked supersedes it.
func (b *Broker) Reload() {
	select {
	case b.reloads <- struct{}{}:
	default: // one is asked for already, and will read the file as it is then
	}
}

// report tells each platform of the turns of its threads an earlier
// broker did not finish showing, with its own thread ids. Those of a
// platform not served now are left for a broker that serves it.
func (b *Broker) report(turns []chat.Interruption) {
	byPlatform := map[string][]chat.Interruption{}
	left := 0
	for _, it := range turns {
		platform, thread, ok := SplitThreadID(it.Thread)
		if !ok || b.chat(platform) == nil {
			left++
			continue
		}
		it.Thread = thread
		byPlatform[platform] = append(byPlatform[platform], it)
	}
	if left > 0 {
		b.log.Warn().Int("turns", left).Msg("interrupted turns of chat platforms not served now are not reported")
	}
	for _, p := range b.chats {
		p.Report(byPlatform[p.name], func(id uint64) {
			if err := b.store.MarkReported(id); err != nil {
				b.log.Warn().Err(err).Uint64("turn", id).Msg("interrupted turn not marked as reported")
			}
		})
	}
}

// awaitReady closes ready, and the broker's, once every platform takes
// messages, unless ctx ends first.
func (b *Broker) awaitReady(ctx context.Context, ready chan<- struct{}) {
	for _, p := range b.chats {
		select {
		case <-p.Ready():
		case <-ctx.Done():
			return
		}
	}
	close(ready)
	b.readyOnce.Do(func() { close(b.ready) })
}

// watchdogPing tells systemd the broker is alive only while its parts are
// healthy: a wedged broker stops pinging and is restarted.
func (b *Broker) watchdogPing() {
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

// reloadCheckTimeout bounds reading and checking the configuration at a
// reload, git calls included.
const reloadCheckTimeout = time.Minute

// reloadResult is a configuration read and checked for a reload, or why
// it is refused; gen is the Reload it answers.
type reloadResult struct {
	cfg    *config.Config
	agents *builtProfiles
	err    error
	gen    uint64
}

// prepareReload reads the configuration again and checks it as start
// does: its keys, its profiles' environments, and, where the broker runs
// its agents itself, the programs they start and what checkProfiles asks
// of the machine (git for worktree profiles), within ctx. It
// touches nothing of the running broker; the configuration's path, the
// environment and the logger do not change.
func (b *Broker) prepareReload(ctx context.Context) reloadResult {
	cfg, err := config.Load(b.cfg.Path, b.opts.Environ)
	if err != nil {
		return reloadResult{err: err}
	}
	agentsHere := b.cluster == nil // as started: [cluster] needs a restart
	if err := complete(cfg, b.opts.Environ, agentsHere); err != nil {
		return reloadResult{err: fmt.Errorf("config: %w", err)}
	}
	agents, err := buildProfiles(cfg, b.opts.Environ, b.store.WorktreeMade, b.gitConfine, b.log)
	if err != nil {
		return reloadResult{err: fmt.Errorf("config: %w", err)}
	}
	var problems []error
	if agentsHere {
		problems = checkProfiles(ctx, cfg, b.gitConfine)
		problems = append(problems, checkSandbox(cfg)...)
		if b.sandbox.Enabled() {
			problems = append(problems, checkTokenFilesHidden(cfg, b.sandbox.Hide)...)
		}
	}
	cfg.Warnings = append(cfg.Warnings, machineWarnings(cfg)...)
	if len(problems) > 0 {
		return reloadResult{err: fmt.Errorf("config: %w", errors.Join(problems...))}
	}
	if ctx.Err() != nil {
		return reloadResult{err: context.Cause(ctx)}
	}
	return reloadResult{cfg: cfg, agents: agents}
}

// applyReload applies a configuration prepareReload read: what can change
// while running; it says in the log what changed and what needs a
// restart. A configuration with errors is refused whole.
func (b *Broker) applyReload(res reloadResult) {
	if res.err != nil {
		b.log.Error().Err(res.err).Msg("reload refused: the configuration has errors; nothing changed")
		return
	}
	cfg, agents := res.cfg, res.agents
	for _, w := range cfg.Warnings {
		b.log.Warn().Msg(w)
	}
	applied, restart := config.Diff(b.cfg, cfg, b.redact.String)
	// Profiles change for agents started from now on; the rest, only the
	// live keys: everything else stays as it was started.
	b.redact.Add(append(agents.secrets, cfg.Secrets()...)...)
	b.pool.SetProfiles(agents.profiles, cfg.DefaultProfile)
	live := config.Live(b.cfg, cfg)
	b.cfg = live
	b.live.Store(live)
	if b.opts.SetLevel != nil {
		b.opts.SetLevel(live.Log.Level)
	}
	b.engine.Reconfigure(engineConfig(live, nil, nil, b.log))
	for _, p := range b.chats {
		if p.Reload != nil {
			p.Reload(live)
		}
	}
	b.sched.Set(live.Schedules)
	if b.api != nil {
		b.api.SetConfig(b.apiConfig(live))
	}
	ev := b.log.Info().Strs("applied", applied)
	if len(restart) > 0 {
		ev = b.log.Warn().Strs("applied", applied).Strs("need_restart", restart)
	}
	ev.Msg("configuration reloaded")
}

// chat is the served platform of that name, or nil.
func (b *Broker) chat(name string) *platform {
	i := slices.IndexFunc(b.chats, func(p *platform) bool { return p.name == name })
	if i < 0 {
		return nil
	}
	return b.chats[i]
}
