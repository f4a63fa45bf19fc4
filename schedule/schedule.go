// Package schedule runs the broker's [[schedules]]: each at the times
// its expression gives, never two runs of one schedule at once (a run
// due while the last still goes is skipped, and its thread is told),
// runs missed while the broker was down not replayed (one at start with
// catch_up), paused and resumed by approvers, its runs kept in the state
// store.
package schedule

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/config"
	"acpbroker/store"

	"github.com/rs/zerolog"
)

// Runner starts runs where a schedule's platform shows them.
type Runner interface {
	// Start starts a run of sc: a new thread of its channel, or its
	// thread, the prompt submitted with sink (which must be the turn's
	// Sink, over the thread's own). It returns the thread and a link to
	// the run, once submitted.
	Start(ctx context.Context, sc config.Schedule, r Run, sink func(adapter.Sink) adapter.Sink) (thread, link string, err error)
	// Notice says text in a thread of sc's platform.
	Notice(ctx context.Context, sc config.Schedule, thread, text string)
}

// Store keeps the schedules' states and runs (the state store is one).
type Store interface {
	ScheduleState(name string) (store.ScheduleState, bool)
	PutScheduleState(st store.ScheduleState)
	DeleteScheduleState(name string)
	PutScheduleRun(r store.ScheduleRun) uint64
}

// Run is a run as it starts: when it was due and what started it.
type Run struct {
	Due time.Time
	By  string
}

// Info is a schedule as /schedules shows it.
type Info struct {
	config.Schedule
	Next          time.Time // zero while paused or disabled
	Paused        bool
	Running       bool
	Last          store.ScheduleRun // ID 0: none yet
	LastLink      string
	RunningSince  time.Time
	RunningThread string
}

// Scheduler runs schedules. Set gives it the schedules, Run runs them
// until its ctx ends; RunNow, Pause and List may be called from any
// goroutine. Close waits for the runs being started.
type Scheduler struct {
	runner Runner
	store  Store
	log    zerolog.Logger
	ctx    context.Context // Run's
	wake   chan struct{}

	mu      sync.Mutex
	entries map[string]*entry
	counts  map[string]uint64 // runs since the start, by outcome
	wg      sync.WaitGroup
}

// entry is one schedule and what is running of it.
type entry struct {
	cfg   config.Schedule
	next  time.Time // zero: not scheduled (disabled)
	state store.ScheduleState
	// running is the run going now (ID 0: none); link links to it.
	running store.ScheduleRun
	link    string
}

// New returns a Scheduler that starts runs with runner.
func New(runner Runner, st Store, log zerolog.Logger) *Scheduler {
	return &Scheduler{runner: runner, store: st, log: log, wake: make(chan struct{}, 1), entries: map[string]*entry{}, counts: map[string]uint64{}, ctx: context.Background()}
}

// Start sets the first schedules (as Set) and starts the loop; with
// catch_up, a schedule whose run was due while the broker was down runs
// once now. The loop runs until ctx ends; Wait waits for it and for the
// runs being started.
func (s *Scheduler) Start(ctx context.Context, list []config.Schedule) {
	s.mu.Lock()
	s.ctx = ctx
	s.mu.Unlock()
	now := time.Now()
	for _, e := range s.set(list, now) {
		if e.cfg.CatchUp && e.cfg.Enabled && !e.state.Paused && !e.state.LastDue.IsZero() {
			if missed := e.cfg.When.Next(e.state.LastDue); !missed.After(now) {
				s.log.Info().Str("schedule", e.cfg.Name).Time("missed", missed).Msg("a run was missed while the broker was down: catching up once")
				s.mu.Lock()
				s.fireLocked(e, missed, "catch-up")
				s.mu.Unlock()
			}
		}
	}
	s.wg.Go(func() { s.loop(ctx) })
}

// Wait returns once the loop has ended (its ctx) and no run is being
// started.
func (s *Scheduler) Wait() { s.wg.Wait() }

// Set changes the schedules (a reload): new ones are scheduled from now,
// changed ones scheduled again (a run going on goes on), removed ones
// dropped and forgotten once no run of theirs goes on.
func (s *Scheduler) Set(list []config.Schedule) {
	s.set(list, time.Now())
	s.poke()
}

// set applies list and returns the entries it added.
func (s *Scheduler) set(list []config.Schedule, now time.Time) []*entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	var added []*entry
	names := map[string]bool{}
	for _, sc := range list {
		names[sc.Name] = true
		e := s.entries[sc.Name]
		if e == nil {
			e = &entry{cfg: sc}
			if st, ok := s.store.ScheduleState(sc.Name); ok {
				e.state = st
			} else {
				e.state = store.ScheduleState{Name: sc.Name, LastDue: now.UTC()}
				s.store.PutScheduleState(e.state)
			}
			s.entries[sc.Name] = e
			added = append(added, e)
		} else if e.cfg.Spec != sc.Spec || e.cfg.Enabled != sc.Enabled {
			e.next = time.Time{}
		}
		e.cfg = sc
		if e.next.IsZero() && sc.Enabled {
			e.next = sc.When.Next(now)
		} else if !sc.Enabled {
			e.next = time.Time{}
		}
	}
	for name, e := range s.entries {
		if !names[name] {
			e.next = time.Time{}
			if e.running.ID == 0 {
				delete(s.entries, name)
				s.store.DeleteScheduleState(name)
			}
			e.cfg.Enabled = false
			e.cfg.Name = name
			e.state.Name = name
			e.removed()
		}
	}
	return added
}

// removed marks an entry no longer configured: it is forgotten once its
// run ends.
func (e *entry) removed() { e.cfg.Spec = "" }

func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// loop fires each schedule when it is due, until ctx ends.
func (s *Scheduler) loop(ctx context.Context) {
	for {
		s.mu.Lock()
		var next time.Time
		for _, e := range s.entries {
			if !e.next.IsZero() && (next.IsZero() || e.next.Before(next)) {
				next = e.next
			}
		}
		s.mu.Unlock()
		var timer <-chan time.Time
		var t *time.Timer
		if !next.IsZero() {
			t = time.NewTimer(time.Until(next))
			timer = t.C
		}
		select {
		case <-ctx.Done():
		case <-s.wake:
		case <-timer:
			s.fireDue(time.Now())
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// fireDue fires every schedule due by now; each is scheduled next from
// now, so that runs a stopped clock (a suspended machine) missed are not
// replayed.
func (s *Scheduler) fireDue(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range s.sortedLocked() {
		e := s.entries[name]
		if e.next.IsZero() || e.next.After(now) {
			continue
		}
		due := e.next
		e.next = e.cfg.When.Next(now)
		if e.state.Paused {
			e.state.LastDue = due.UTC()
			s.store.PutScheduleState(e.state)
			continue
		}
		s.fireLocked(e, due, "schedule")
	}
}

func (s *Scheduler) sortedLocked() []string {
	names := make([]string, 0, len(s.entries))
	for n := range s.entries {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// ErrRunning is RunNow's refusal while a run of the schedule goes on.
var ErrRunning = errors.New("its last run is still going")

// fireLocked starts a run of e, due at due, or skips it while the last
// run goes on, saying so in that run's thread. s.mu must be held.
func (s *Scheduler) fireLocked(e *entry, due time.Time, by string) (store.ScheduleRun, error) {
	now := time.Now().UTC()
	e.state.LastDue = due.UTC()
	s.store.PutScheduleState(e.state)
	if e.running.ID != 0 {
		running := e.running
		skipped := store.ScheduleRun{Schedule: e.cfg.Name, Due: due.UTC(), By: by, Outcome: "skipped", Thread: running.Thread,
			Cause: fmt.Sprintf("the run started %s is still going", running.Started.Format(time.RFC3339))}
		skipped.ID = s.store.PutScheduleRun(skipped)
		s.counts[skipped.Outcome]++
		s.log.Info().Str("schedule", e.cfg.Name).Time("due", due).Msg("schedule run skipped: the last run is still going")
		if running.Thread != "" {
			text := fmt.Sprintf("⏭️ **%s**: the run due at %s was skipped: this run, started at %s, is still going.",
				e.cfg.Name, clock(due), clock(running.Started))
			sc, ctx := e.cfg, s.ctx
			s.wg.Go(func() { s.runner.Notice(ctx, sc, running.Thread, text) })
		}
		return skipped, ErrRunning
	}
	run := store.ScheduleRun{Schedule: e.cfg.Name, Due: due.UTC(), Started: now, By: by, Outcome: "running"}
	run.ID = s.store.PutScheduleRun(run)
	e.running, e.link = run, ""
	sc, ctx := e.cfg, s.ctx
	s.log.Info().Str("schedule", sc.Name).Time("due", due).Str("by", by).Uint64("run", run.ID).Msg("schedule run starting")
	s.wg.Go(func() { s.start(ctx, sc, run) })
	return run, nil
}

// start starts a run on the Runner and records where it runs, or why
// it could not.
func (s *Scheduler) start(ctx context.Context, sc config.Schedule, run store.ScheduleRun) {
	thread, link, err := s.runner.Start(ctx, sc, Run{Due: run.Due, By: run.By}, func(inner adapter.Sink) adapter.Sink {
		return Watch(inner, func(o adapter.Outcome) { s.ended(sc.Name, run.ID, o) })
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[sc.Name]
	if err != nil {
		run.Outcome, run.Ended, run.Cause = "refused", time.Now().UTC(), err.Error()
		s.store.PutScheduleRun(run)
		s.counts[run.Outcome]++
		s.log.Warn().Err(err).Str("schedule", sc.Name).Uint64("run", run.ID).Msg("schedule run not started")
		if e != nil && e.running.ID == run.ID {
			e.running = store.ScheduleRun{}
			e.state.Last = run
			s.store.PutScheduleState(e.state)
			s.forgetRemovedLocked(e)
		}
		return
	}
	run.Thread = thread
	if e != nil && e.running.ID == run.ID && e.running.Outcome == "running" {
		e.running.Thread, e.link = thread, link
		s.store.PutScheduleRun(e.running)
	}
}

// ended records how a run ended.
func (s *Scheduler) ended(name string, id uint64, o adapter.Outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[name]
	if e == nil || e.running.ID != id {
		return
	}
	run := e.running
	run.Outcome, run.Ended = outcomeWord(o), time.Now().UTC()
	if o.Err != nil || run.Outcome != "done" {
		run.Cause = o.Summary()
	}
	s.store.PutScheduleRun(run)
	s.counts[run.Outcome]++
	s.log.Info().Str("schedule", name).Uint64("run", id).Str("outcome", run.Outcome).Msg("schedule run ended")
	e.running = store.ScheduleRun{}
	e.state.Last = run
	s.store.PutScheduleState(e.state)
	s.forgetRemovedLocked(e)
}

// forgetRemovedLocked drops an entry no longer configured once its run
// is over.
func (s *Scheduler) forgetRemovedLocked(e *entry) {
	if e.cfg.Spec == "" && e.running.ID == 0 {
		delete(s.entries, e.cfg.Name)
		s.store.DeleteScheduleState(e.cfg.Name)
	}
}

func outcomeWord(o adapter.Outcome) string {
	switch {
	case errors.Is(o.Err, adapter.ErrCancelled):
		return "cancelled"
	case errors.Is(o.Err, adapter.ErrShutdown):
		return "interrupted"
	case o.Err != nil:
		return "failed"
	}
	return "done"
}

// clock is a time for people: UTC, to the second.
func clock(t time.Time) string { return t.UTC().Format("15:04:05 UTC") }

// ErrNoSchedule: no schedule has that name.
var ErrNoSchedule = errors.New("no such schedule")

// RunNow starts a run of the schedule name now, for by (who asked): the
// thread it runs in, or why not (ErrRunning while a run goes on).
func (s *Scheduler) RunNow(name, by string) (store.ScheduleRun, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[name]
	if e == nil || e.cfg.Spec == "" {
		return store.ScheduleRun{}, ErrNoSchedule
	}
	return s.fireLocked(e, time.Now(), by)
}

// Await waits, within ctx, for the run id of name to know its thread
// (or to end), and returns its link ("" if none).
func (s *Scheduler) Await(ctx context.Context, name string, id uint64) (thread, link string) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		s.mu.Lock()
		e := s.entries[name]
		if e == nil || e.running.ID != id {
			thread, link = "", ""
			if e != nil && e.state.Last.ID == id {
				thread = e.state.Last.Thread
			}
			s.mu.Unlock()
			return thread, link
		}
		if e.running.Thread != "" {
			thread, link = e.running.Thread, e.link
			s.mu.Unlock()
			return thread, link
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return "", ""
		case <-tick.C:
		}
	}
}

// Pause pauses the schedule name (paused) or resumes it, for by; kept
// across restarts.
func (s *Scheduler) Pause(name string, paused bool, by string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[name]
	if e == nil || e.cfg.Spec == "" {
		return ErrNoSchedule
	}
	e.state.Paused, e.state.PausedBy = paused, ""
	if paused {
		e.state.PausedBy = by
	}
	s.store.PutScheduleState(e.state)
	s.log.Info().Str("schedule", name).Bool("paused", paused).Str("by", by).Msg("schedule paused or resumed")
	return nil
}

// Stats are the runs since the start by outcome, and those going on.
func (s *Scheduler) Stats() (runs map[string]uint64, running int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.entries {
		if e.running.ID != 0 {
			running++
		}
	}
	return maps.Clone(s.counts), running
}

// List describes the schedules of platform ("": all), by name.
func (s *Scheduler) List(platform string) []Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Info
	for _, name := range s.sortedLocked() {
		e := s.entries[name]
		if e.cfg.Spec == "" || (platform != "" && e.cfg.Platform != platform) {
			continue
		}
		info := Info{Schedule: e.cfg, Paused: e.state.Paused, Running: e.running.ID != 0, Last: e.state.Last,
			RunningSince: e.running.Started, RunningThread: e.running.Thread}
		if !e.state.Paused {
			info.Next = e.next
		}
		out = append(out, info)
	}
	return out
}

// Watch is a Sink over inner that calls done with the turn's outcome,
// before inner is told; the agent's questions go on to inner.
func Watch(inner adapter.Sink, done func(adapter.Outcome)) adapter.Sink {
	w := watch{Sink: inner, done: done}
	if el, ok := inner.(adapter.Elicitor); ok {
		return watchElicit{w, el}
	}
	return w
}

type watch struct {
	adapter.Sink
	done func(adapter.Outcome)
}

func (w watch) Done(o adapter.Outcome) {
	w.done(o)
	w.Sink.Done(o)
}

type watchElicit struct {
	watch
	el adapter.Elicitor
}

func (w watchElicit) Elicit(ctx context.Context, req *acp.ElicitationRequest) adapter.ElicitAnswer {
	return w.el.Elicit(ctx, req)
}
