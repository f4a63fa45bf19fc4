package schedule

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/config"
	"acpbroker/store"

	"github.com/rs/zerolog"
)

// memStore is the state store's schedule records, in memory.
type memStore struct {
	mu     sync.Mutex
	states map[string]store.ScheduleState
	runs   []store.ScheduleRun
}

func newMemStore() *memStore { return &memStore{states: map[string]store.ScheduleState{}} }

func (m *memStore) ScheduleState(name string) (store.ScheduleState, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.states[name]
	return st, ok
}
func (m *memStore) PutScheduleState(st store.ScheduleState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.states[st.Name] = st
}
func (m *memStore) DeleteScheduleState(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.states, name)
}
func (m *memStore) PutScheduleRun(r store.ScheduleRun) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r.ID == 0 {
		r.ID = uint64(len(m.runs) + 1)
		m.runs = append(m.runs, r)
		return r.ID
	}
	m.runs[r.ID-1] = r
	return r.ID
}

// outcomes counts the runs by outcome.
func (m *memStore) outcomes() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for _, r := range m.runs {
		out[r.Outcome]++
	}
	return out
}

// runner starts runs that take took, and keeps what it was asked.
type runner struct {
	took    time.Duration
	mu      sync.Mutex
	started []time.Time
	prompts []string
	notices []string
	wg      sync.WaitGroup
}

type nopSink struct{}

func (nopSink) Status(adapter.Status)                                      {}
func (nopSink) Update(acp.Update)                                          {}
func (nopSink) Notice(adapter.Notice)                                      {}
func (nopSink) Ask(context.Context, *acp.PermissionRequest) adapter.Answer { return adapter.Answer{} }
func (nopSink) Done(adapter.Outcome)                                       {}

func (r *runner) Start(ctx context.Context, sc config.Schedule, run Run, sink func(adapter.Sink) adapter.Sink) (string, string, error) {
	r.mu.Lock()
	r.started = append(r.started, time.Now())
	r.prompts = append(r.prompts, sc.Prompt)
	r.mu.Unlock()
	s := sink(nopSink{})
	r.wg.Go(func() {
		time.Sleep(r.took)
		s.Done(adapter.Outcome{StopReason: acp.StopEndTurn, Text: "ok", Shown: func(string) {}})
	})
	return "discord:" + sc.Name, "", nil
}

func (r *runner) Notice(ctx context.Context, sc config.Schedule, thread, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notices = append(r.notices, thread+": "+text)
}

func (r *runner) count() (started, notices int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.started), len(r.notices)
}

func every(t *testing.T, name, spec, prompt string) config.Schedule {
	t.Helper()
	when, err := config.ParseSchedule(spec)
	if err != nil {
		t.Fatal(err)
	}
	return config.Schedule{Name: name, Spec: spec, When: when, Platform: "discord", Channel: "1", Prompt: prompt, Enabled: true}
}

// A schedule at @every 2s whose runs take 3s runs at 2s, 6s and 10s:
// the runs due at 4s and 8s are skipped, recorded so, and the running
// run's thread is told; never two at once.
func TestScheduler_ARunDueWhileTheLastGoesIsSkipped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, r := newMemStore(), &runner{took: 3 * time.Second}
		s := New(r, st, zerolog.Nop())
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		s.Start(ctx, []config.Schedule{every(t, "often", "@every 2s", "look")})
		time.Sleep(10*time.Second + 500*time.Millisecond)
		synctest.Wait()
		r.mu.Lock()
		var at []time.Duration
		for _, s := range r.started {
			at = append(at, s.Sub(start))
		}
		notices := append([]string(nil), r.notices...)
		r.mu.Unlock()
		if len(at) != 3 || at[0] != 2*time.Second || at[1] != 6*time.Second || at[2] != 10*time.Second {
			t.Errorf("runs started at %v, want 2s 6s 10s", at)
		}
		if len(notices) != 2 || notices[0] != "discord:often: ⏭️ **often**: the run due at 00:00:04 UTC was skipped: this run, started at 00:00:02 UTC, is still going." {
			t.Errorf("notices %q", notices)
		}
		if got := st.outcomes(); got["done"] != 2 || got["skipped"] != 2 || got["running"] != 1 {
			t.Errorf("runs recorded: %v", got)
		}
		list := s.List("discord")
		if len(list) != 1 || !list[0].Running || list[0].Last.Outcome != "done" || !list[0].Next.Equal(start.Add(12*time.Second)) {
			t.Errorf("list: %+v", list)
		}
		cancel()
		r.wg.Wait()
		s.Wait()
	})
}

// A paused schedule does not run when due, and runs again once resumed;
// the pause is kept in the store. Run now runs a paused schedule too,
// and is refused while a run goes on.
func TestScheduler_PauseResumeAndRunNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, r := newMemStore(), &runner{took: time.Second}
		s := New(r, st, zerolog.Nop())
		ctx, cancel := context.WithCancel(context.Background())
		s.Start(ctx, []config.Schedule{every(t, "often", "@every 10s", "look")})
		if err := s.Pause("often", true, "alice"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(25 * time.Second)
		if n, _ := r.count(); n != 0 {
			t.Errorf("a paused schedule ran %d times", n)
		}
		if state, _ := st.ScheduleState("often"); !state.Paused || state.PausedBy != "alice" {
			t.Errorf("state %+v", state)
		}
		if _, err := s.RunNow("often", "bob"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if _, err := s.RunNow("often", "bob"); err != ErrRunning {
			t.Errorf("run now while it runs: %v", err)
		}
		time.Sleep(2 * time.Second)
		s.Pause("often", false, "alice")
		time.Sleep(10 * time.Second) // due at 30s and 40s: one of them past
		if n, _ := r.count(); n != 2 {
			t.Errorf("%d runs, want run now and one after the resume", n)
		}
		if _, err := s.RunNow("nope", "bob"); err != ErrNoSchedule {
			t.Errorf("run now of no schedule: %v", err)
		}
		cancel()
		r.wg.Wait()
		s.Wait()
	})
}

// Runs missed while the broker was down are not replayed: with
// catch_up, one runs at start; without, none does until the next due
// time.
func TestScheduler_CatchUpRunsOneMissedRunAtStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, catchUp := range []bool{true, false} {
			st, r := newMemStore(), &runner{took: time.Second}
			st.PutScheduleState(store.ScheduleState{Name: "hourly", LastDue: time.Now().Add(-5 * time.Hour)})
			sc := every(t, "hourly", "@every 1h", "look")
			sc.CatchUp = catchUp
			s := New(r, st, zerolog.Nop())
			ctx, cancel := context.WithCancel(context.Background())
			s.Start(ctx, []config.Schedule{sc})
			time.Sleep(time.Minute)
			want := 0
			if catchUp {
				want = 1
			}
			if n, _ := r.count(); n != want {
				t.Errorf("catch_up %v: %d runs in the first minute, want %d", catchUp, n, want)
			}
			cancel()
			r.wg.Wait()
			s.Wait()
		}
	})
}

// A reload changes a schedule (its prompt reaches the next run, its
// expression its next time), adds one and removes one: the removed one
// runs no more, and is forgotten.
func TestScheduler_SetAddsChangesAndRemoves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, r := newMemStore(), &runner{took: time.Second}
		s := New(r, st, zerolog.Nop())
		ctx, cancel := context.WithCancel(context.Background())
		s.Start(ctx, []config.Schedule{every(t, "a", "@every 10s", "first"), every(t, "b", "@every 10s", "b")})
		time.Sleep(11 * time.Second) // a and b ran at 10s
		s.Set([]config.Schedule{every(t, "a", "@every 3s", "second"), every(t, "c", "@every 10s", "c")})
		time.Sleep(4 * time.Second) // a at 14s
		r.mu.Lock()
		prompts := append([]string(nil), r.prompts...)
		r.mu.Unlock()
		if len(prompts) != 3 || prompts[2] != "second" {
			t.Errorf("prompts run: %q", prompts)
		}
		if _, ok := st.ScheduleState("b"); ok {
			t.Error("b is still kept")
		}
		names := []string{}
		for _, info := range s.List("") {
			names = append(names, info.Name)
		}
		if len(names) != 2 || names[0] != "a" || names[1] != "c" {
			t.Errorf("listed %v", names)
		}
		cancel()
		r.wg.Wait()
		s.Wait()
	})
}
