package pool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Warm agents are started ahead of any thread, from a profile whose Warm
// is set: spawned, initialized and with a session made in the profile's
// directory, so that a new thread's first answer does not wait for its
// agent's start. A thread takes one in Acquire; the warmer starts its
// replacement when a slot is free and no Acquire waits for one.
//
// They hold slots as the others do, for the pool and for the profile,
// and give them up first: a thread waiting for a slot stops a warm agent
// (or the start of one) before anyone's idle agent. One unused for
// Config.IdleTimeout is stopped, and replaced.

// ErrNotWarmable: a profile's agents cannot be started ahead of their
// thread (see WarmRefusal).
var ErrNotWarmable = errors.New("no warm agents for this profile")

// WarmRefusal says why prof's agents cannot be warm, or nil if they can.
// An agent is started in its working directory, which its sandbox binds,
// so only a profile whose agents all share one directory can start one
// before its thread is known. A directory per thread (PerThreadDir) or a
// workspace made for it (Workspace: worktrees) is named for the thread
// and found again by that name: by its next agents, by a fork's copy, by
// the worktree's book-keeping, after any restart. A warm agent given a
// fresh directory could not hand it over: renaming it to the thread's
// loses the sessions agents keep by their working directory (and the
// files the broker serves the running agent by path), and keeping it
// would tie the thread's files to a record the book drops with the
// thread's session (state.retention, the in-memory book's bound).
func WarmRefusal(prof *Profile) error {
	switch {
	case prof.Workspace != nil:
		return fmt.Errorf("%w: its agents' workspaces are made for each thread", ErrNotWarmable)
	case prof.PerThreadDir:
		return fmt.Errorf("%w: its agents each work in a directory of their own, named for their thread", ErrNotWarmable)
	}
	return nil
}

// warmRefusal is WarmRefusal for this pool. Agents on agent hosts
// (Config.Remote) are kept warm on the hosts the placement picks, for new
// threads only (see claimWarmLocked).
func (p *Pool) warmRefusal(prof *Profile) error {
	return WarmRefusal(prof)
}

// Bounds of the pause before a profile's next warm agent after one could
// not start or died while waiting: doubled at each failure in a row.
const (
	warmBackoffMin = time.Second
	warmBackoffMax = 5 * time.Minute
	// warmHealthy is how long a warm agent must have waited for its
	// death not to count as one more failure in a row.
	warmHealthy = time.Minute
)

// warmSet is the pool's warm agents, under Pool.mu.
type warmSet struct {
	byProfile map[string][]*warmAgent // ready, oldest first
	starting  map[string][]*warmStart // being started
	ready     int                     // in byProfile, over every profile
	seq       uint64                  // names them
	fails     map[string]int          // failures in a row, by profile
	after     map[string]time.Time    // no start before, by profile
	claims    map[string]uint64       // taken by a thread, by profile
	cold      map[string]uint64       // thread starts without one, by profile
}

func newWarmSet() warmSet {
	return warmSet{byProfile: map[string][]*warmAgent{}, starting: map[string][]*warmStart{},
		fails: map[string]int{}, after: map[string]time.Time{}, claims: map[string]uint64{}, cold: map[string]uint64{}}
}

// warmAgent is one ready warm agent.
type warmAgent struct {
	a     *Agent
	since time.Time
	done  chan struct{} // closed when it leaves the ready list
}

// warmStart is one warm agent being started.
type warmStart struct {
	prof      *Profile // what it is started from
	cancel    context.CancelCauseFunc
	cancelled bool // its slot is wanted: a failure is no failure
}

// Causes of a warm start given up.
var (
	errWarmRoom    = errors.New("a thread needs the slot")
	errWarmChanged = errors.New("its profile changed")
)

// countWarmLocked adds n to profile name's warm agents ready. p.mu must be
// held.
func (p *Pool) countWarmLocked(name string, n int) {
	p.warm.ready += n
	u := p.uses[name]
	u.warm += n
	if u == (use{}) {
		delete(p.uses, name)
	} else {
		p.uses[name] = u
	}
}

// warmer keeps every profile's warm agents started, until the pool
// closes.
func (p *Pool) warmer() {
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		p.mu.Lock()
		retry := p.fillWarmLocked(time.Now())
		changed := p.changed
		p.mu.Unlock()
		var wake <-chan time.Time
		if retry > 0 {
			t.Reset(retry)
			wake = t.C
		}
		select {
		case <-p.stop:
			t.Stop()
			return
		case <-changed:
		case <-wake:
		}
		t.Stop()
	}
}

// fillWarmLocked starts the warm agents missing where a slot is free, and
// returns how long until a profile's pause ends (0: none pauses). A
// thread waiting for a slot goes first: nothing starts while one waits.
// p.mu must be held.
func (p *Pool) fillWarmLocked(now time.Time) (retry time.Duration) {
	if p.closed || len(p.queue) > 0 {
		return 0
	}
	for _, name := range slices.Sorted(maps.Keys(p.profiles.byName)) {
		prof := p.profiles.byName[name]
		if prof.Warm <= 0 || p.warmRefusal(prof) != nil {
			continue
		}
		if at := p.warm.after[name]; now.Before(at) {
			if d := at.Sub(now); retry == 0 || d < retry {
				retry = d
			}
			continue
		}
		for len(p.warm.byProfile[name])+len(p.warm.starting[name]) < prof.Warm &&
			p.used() < p.cfg.MaxSessions && !p.cappedLocked(name) {
			p.startWarmLocked(prof)
		}
	}
	return retry
}

// startWarmLocked starts a warm agent of prof on a goroutine the pool
// owns, in a slot counted as starting. p.mu must be held.
func (p *Pool) startWarmLocked(prof *Profile) {
	p.starting++
	p.countLocked(prof.Name, 0, 1, 0)
	p.warm.seq++
	name := fmt.Sprintf("warm-%s-%d", prof.Name, p.warm.seq)
	ctx, cancel := context.WithCancelCause(p.ctx)
	s := &warmStart{prof: prof, cancel: cancel}
	p.warm.starting[prof.Name] = append(p.warm.starting[prof.Name], s)
	p.wg.Go(func() {
		defer cancel(nil)
		a, err := p.spawn(ctx, name, prof, "", nil, nil)
		p.warmStarted(prof, s, a, err)
	})
}

// warmStarted takes in what a warm start made: a ready agent, or a
// failure that pauses the profile's warming.
func (p *Pool) warmStarted(prof *Profile, s *warmStart, a *Agent, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.signalLocked()
	p.warm.starting[prof.Name] = slices.DeleteFunc(p.warm.starting[prof.Name], func(o *warmStart) bool { return o == s })
	if len(p.warm.starting[prof.Name]) == 0 {
		delete(p.warm.starting, prof.Name)
	}
	p.starting--
	p.countLocked(prof.Name, 0, -1, 0)
	if err != nil {
		if s.cancelled || p.closed {
			return
		}
		p.failed++
		p.warmFailedLocked(prof.Name, err)
		return
	}
	p.spawned++
	if p.closed {
		// Close may already be waiting: stop it here, not on a new goroutine.
		p.retiring[a] = true
		p.mu.Unlock()
		p.shutdown(a, 0)
		p.mu.Lock()
		return
	}
	if now := p.profiles.byName[prof.Name]; !sameDefinition(prof, now) || len(p.warm.byProfile[prof.Name]) >= now.Warm {
		p.stopLocked(a, p.cfg.ExitGrace, StopWarm) // started from a definition changed meanwhile
		return
	}
	w := &warmAgent{a: a, since: time.Now(), done: make(chan struct{})}
	p.warm.byProfile[prof.Name] = append(p.warm.byProfile[prof.Name], w)
	p.countWarmLocked(prof.Name, 1)
	p.log.Info().Str("profile", prof.Name).Str("agent", a.Thread).Str("session", a.SessionID).Int("pid", a.Proc.PID()).Msg("warm agent ready")
	p.wg.Go(func() { p.watchWarm(w) })
	select { // the janitor times its idleness from now
	case p.kick <- struct{}{}:
	default:
	}
}

// warmFailedLocked pauses the warming of profile name after a warm agent
// failed to start or died waiting, the longer the more failures in a row,
// and says why. p.mu must be held.
func (p *Pool) warmFailedLocked(name string, err error) {
	p.warm.fails[name]++
	d := warmBackoffMin << min(p.warm.fails[name]-1, 16)
	d = min(d, warmBackoffMax)
	p.warm.after[name] = time.Now().Add(d)
	p.log.Warn().Err(err).Str("profile", name).Int("failures", p.warm.fails[name]).Dur("retry_in", d).
		Msg("a warm agent failed; warming this profile pauses before trying again")
}

// watchWarm notices a warm agent that exits while it waits, and stops and
// replaces it.
func (p *Pool) watchWarm(w *warmAgent) {
	select {
	case <-w.a.Proc.Exited():
	case <-w.a.Conn.Done():
	case <-w.done:
		return
	case <-p.stop:
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.dropWarmLocked(w) {
		return // taken, or stopped, meanwhile
	}
	name := w.a.Profile.Name
	if time.Since(w.since) >= warmHealthy {
		p.warm.fails[name] = 0
	}
	err := errors.New("the warm agent exited while waiting for a thread")
	if t := strings.TrimSpace(w.a.Proc.StderrTail()); t != "" {
		err = fmt.Errorf("%w; stderr: %s", err, t)
	}
	p.stopLocked(w.a, 0, StopCrashed)
	p.warmFailedLocked(name, err)
	p.signalLocked()
}

// dropWarmLocked takes w off the ready list, if it is still there, and
// reports whether it was. p.mu must be held.
func (p *Pool) dropWarmLocked(w *warmAgent) bool {
	name := w.a.Profile.Name
	list := p.warm.byProfile[name]
	i := slices.Index(list, w)
	if i < 0 {
		return false
	}
	list = slices.Delete(list, i, i+1)
	if len(list) == 0 {
		delete(p.warm.byProfile, name)
	} else {
		p.warm.byProfile[name] = list
	}
	p.countWarmLocked(name, -1)
	close(w.done)
	return true
}

// retireWarmLocked stops a ready warm agent for reason. p.mu must be held.
func (p *Pool) retireWarmLocked(w *warmAgent, reason, why string) {
	if !p.dropWarmLocked(w) {
		return
	}
	p.log.Info().Str("profile", w.a.Profile.Name).Str("agent", w.a.Thread).Int("pid", w.a.Proc.PID()).Str("cause", why).Msg("stopping a warm agent")
	p.stopLocked(w.a, p.cfg.ExitGrace, reason)
}

// claimWarmLocked gives thread a ready warm agent of prof, if there is
// one it can take, marked busy, and remembers its session for the thread.
//
// A thread with a session to take up starts cold when the agent can take
// it up: its session must be loaded (session/load or session/resume) in
// the process that serves it, which then holds the thread's history, and
// a warm agent's own session would stay open beside it for as long as
// the process runs. The load is most of what such a start costs after
// initialize anyway. A session the agent cannot take up is lost either
// way: the thread takes a warm agent, told it lost it.
// p.mu must be held.
func (p *Pool) claimWarmLocked(thread string, prof *Profile, resume string) *Agent {
	for _, w := range p.warm.byProfile[prof.Name] {
		a := w.a
		if resume != "" && resumable(a.Conn.Capabilities()) {
			return nil
		}
		if a.Where != "" && p.cfg.PlacedOn != nil {
			if on := p.cfg.PlacedOn(thread); on != "" && on != a.Where {
				// The thread's workspace is on the host that ran its
				// agent: it goes back there, not to a warm agent elsewhere.
				continue
			}
		}
		select {
		case <-a.Proc.Exited():
			continue // its watcher replaces it
		default:
		}
		p.dropWarmLocked(w)
		p.warm.claims[prof.Name]++
		p.warm.fails[prof.Name] = 0
		a.Thread, a.Lost = thread, resume
		a.busy = true
		a.lastUsed = time.Now()
		p.agents[thread] = a
		p.countLocked(prof.Name, 1, 0, 0)
		p.cfg.Sessions.RememberSession(thread, a.SessionID, resumable(a.Conn.Capabilities()))
		p.log.Info().Str("thread", thread).Str("profile", prof.Name).Str("session", a.SessionID).Str("agent", a.launched).Int("pid", a.Proc.PID()).
			Dur("waited", time.Since(w.since)).Msg("thread takes a warm agent")
		p.signalLocked() // the warmer starts its replacement
		return a
	}
	return nil
}

// warmComingLocked reports whether a warm agent of prof that a thread with
// session resume could take is being started: such a thread waits for it
// rather than make room for a start of its own. p.mu must be held.
func (p *Pool) warmComingLocked(prof *Profile, resume string) bool {
	if resume != "" && resumable(p.caps[prof.Name]) {
		return false
	}
	for _, s := range p.warm.starting[prof.Name] {
		if !s.cancelled {
			return true
		}
	}
	return false
}

// makeRoomWarmLocked stops the oldest ready warm agent of profile ("": of
// any), or else gives up the start of one, for a thread waiting for a
// slot, and reports whether room is being made. A start already being
// given up is room enough. p.mu must be held.
func (p *Pool) makeRoomWarmLocked(profile string) bool {
	var oldest *warmAgent
	for name, list := range p.warm.byProfile {
		if profile != "" && name != profile {
			continue
		}
		if len(list) > 0 && (oldest == nil || list[0].since.Before(oldest.since)) {
			oldest = list[0]
		}
	}
	if oldest != nil {
		p.retireWarmLocked(oldest, StopWarm, "making room for a thread")
		return true
	}
	var give *warmStart
	for name, list := range p.warm.starting {
		if profile != "" && name != profile {
			continue
		}
		for _, s := range list {
			if s.cancelled {
				return true
			}
			give = s
		}
	}
	if give == nil {
		return false
	}
	give.cancelled = true
	give.cancel(errWarmRoom)
	return true
}

// retireIdleWarmLocked stops the warm agents unused for IdleTimeout, and
// returns how long until the next one would be. p.mu must be held.
func (p *Pool) retireIdleWarmLocked(now time.Time) time.Duration {
	next := p.cfg.IdleTimeout
	for _, list := range p.warm.byProfile {
		for _, w := range slices.Clone(list) {
			if idle := now.Sub(w.since); idle >= p.cfg.IdleTimeout {
				p.retireWarmLocked(w, StopIdle, fmt.Sprintf("unused for %s", p.cfg.IdleTimeout))
			} else {
				next = min(next, p.cfg.IdleTimeout-idle)
			}
		}
	}
	return next
}

// retireChangedWarmLocked stops the warm agents, and gives up the warm
// starts, of profiles changed or removed, which were started from the old
// definition, and those past a profile's Warm made lower. p.mu must be
// held.
func (p *Pool) retireChangedWarmLocked() {
	for name, list := range p.warm.byProfile {
		now := p.profiles.byName[name]
		keep := 0
		if now != nil {
			keep = now.Warm
		}
		for i, w := range slices.Clone(list) {
			switch {
			case !sameDefinition(w.a.Profile, now):
				p.retireWarmLocked(w, StopWarm, "its profile changed")
			case i >= keep:
				p.retireWarmLocked(w, StopWarm, "its profile keeps fewer warm agents")
			}
		}
	}
	for name := range p.warm.after {
		if p.profiles.byName[name] == nil {
			delete(p.warm.after, name)
			delete(p.warm.fails, name)
		}
	}
	for name, list := range p.warm.starting {
		now := p.profiles.byName[name]
		for _, s := range list {
			if !sameDefinition(s.prof, now) || now.Warm <= 0 {
				s.cancelled = true
				s.cancel(errWarmChanged)
			}
		}
	}
}

// sameDefinition reports whether agents started from a and from b are the
// same: everything but how many are kept warm. A profile with a hook is
// never the same as another (functions compare only when nil).
func sameDefinition(a, b *Profile) bool {
	if a == nil || b == nil {
		return false
	}
	if a == b {
		return true
	}
	x, y := *a, *b
	x.Warm, y.Warm = 0, 0
	return reflect.DeepEqual(x, y)
}

// shutdownWarmLocked stops every warm agent, as Shutdown stops the
// others. p.mu must be held.
func (p *Pool) shutdownWarmLocked() {
	for _, list := range p.warm.byProfile {
		for _, w := range slices.Clone(list) {
			p.dropWarmLocked(w)
			grace := p.stopGraceLocked(p.cfg.ExitGrace)
			p.countStopLocked(StopShutdown, grace)
			p.retiring[w.a] = true
			p.wg.Go(func() { p.shutdown(w.a, grace) })
		}
	}
}

// tellUnwarmedLocked says in the log, once per change, which profiles ask
// for warm agents they cannot have; before are the profiles as they were
// (nil: none). p.mu must be held.
func (p *Pool) tellUnwarmedLocked(before map[string]*Profile) {
	for name, prof := range p.profiles.byName {
		if prof.Warm <= 0 {
			continue
		}
		err := p.warmRefusal(prof)
		if err == nil {
			continue
		}
		if old := before[name]; old != nil && old.Warm == prof.Warm && p.warmRefusal(old) != nil {
			continue
		}
		p.log.Warn().Err(err).Str("profile", name).Int("warm", prof.Warm).Msg("this profile's warm agents are not kept")
	}
}
