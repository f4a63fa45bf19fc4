package adapter

import (
	"errors"
	"strings"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/pool"
	"acpbroker/store"

	"github.com/rs/zerolog"
)

// profiles are two fake agents that say who they are in their
// environment: main, the default, and reviewer.
func profiles(t *testing.T) map[string]*pool.Profile {
	return map[string]*pool.Profile{
		"main":     {Command: fakeAgent, Args: []string{"--load-session"}, Env: []string{"WHO=main"}, WorkDir: t.TempDir(), PerThreadDir: true},
		"reviewer": {Command: fakeAgent, Args: []string{"--load-session"}, Env: []string{"WHO=reviewer"}, WorkDir: t.TempDir(), PerThreadDir: true},
	}
}

// newProfileRig is a rig whose pool serves profs, main the default, and
// whose engine keeps threads' profiles in st. Closing it is the caller's
// (a restart closes it before the test ends); the test's end closes it
// too.
func newProfileRig(t *testing.T, profs map[string]*pool.Profile, st *store.Store) *rig {
	t.Helper()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	p := pool.New(pool.Config{Profiles: profs, DefaultProfile: "main", MaxSessions: 4,
		ExitGrace: 500 * time.Millisecond, Sessions: st, Logger: log})
	e := New(p, Config{Journal: st, ThreadProfiles: st, CancelGrace: 2 * time.Second, Logger: log})
	r := &rig{t: t, pool: p, engine: e}
	t.Cleanup(r.close)
	return r
}

func (r *rig) close() {
	r.engine.Close()
	r.pool.Close()
}

// promptAgent submits a prompt that asks for an agent profile.
func (r *rig) promptAgent(thread, agent, text string) *recorder {
	r.t.Helper()
	rec := newRecorder()
	if err := r.engine.Submit(thread, &Prompt{Ref: thread, Agent: agent, Blocks: []acp.ContentBlock{acp.TextBlock(text)}, Sink: rec}); err != nil {
		r.t.Fatalf("Submit(%q): %v", text, err)
	}
	return rec
}

// who runs "env" in thread and returns the agent's WHO.
func (r *rig) who(thread, agent string) string {
	r.t.Helper()
	o := r.promptAgent(thread, agent, "env").wait(r.t, 20*time.Second)
	if o.Err != nil {
		r.t.Fatalf("env in %s: %v", thread, o.Err)
	}
	for _, l := range strings.Split(o.Text, "\n") {
		if v, ok := strings.CutPrefix(l, "WHO="); ok {
			return v
		}
	}
	return ""
}

func openStore(t *testing.T, dir string) *store.Store {
	t.Helper()
	st, err := store.Open(store.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// A thread's profile is chosen at its first prompt (the prompt's Agent,
// or the default) and kept for life: later prompts asking for another
// do not change it, nor does a restart of the broker.
func TestEngine_ThreadKeepsItsProfileAcrossARestart(t *testing.T) {
	dir := t.TempDir()
	profs := profiles(t)
	st := openStore(t, dir)
	r := newProfileRig(t, profs, st)
	if got := r.who("rev", "reviewer"); got != "reviewer" {
		t.Fatalf("first prompt asking for reviewer ran on %q", got)
	}
	if got := r.who("plain", ""); got != "main" {
		t.Fatalf("first prompt asking for nothing ran on %q, want the default", got)
	}
	if got := r.who("plain", "reviewer"); got != "main" {
		t.Fatalf("a later prompt moved the thread to %q", got)
	}
	if s := r.engine.Status("rev"); s.Profile != "reviewer" || s.Dir != r.pool.Lookup("rev").Dir || s.Dir == "" {
		t.Fatalf("status = %+v", s)
	}

	r.close()
	st.Close()
	st = openStore(t, dir)
	r = newProfileRig(t, profs, st)
	if s := r.engine.Status("rev"); s.Profile != "reviewer" || s.PID != 0 {
		t.Fatalf("status after the restart, before a prompt = %+v", s)
	}
	if got := r.who("rev", ""); got != "reviewer" {
		t.Fatalf("after a restart the thread ran on %q", got)
	}
	if got := r.who("plain", "reviewer"); got != "main" {
		t.Fatalf("after a restart the default thread ran on %q", got)
	}
}

// A thread whose profile was removed keeps its running agent; once it
// needs a new one, its turn fails in words and nothing is started. A
// prompt asking a new thread for a profile that does not exist fails in
// words too, and gives the thread nothing.
func TestEngine_ARemovedProfileFailsTheTurnInWords(t *testing.T) {
	profs := profiles(t)
	st := openStore(t, t.TempDir())
	r := newProfileRig(t, profs, st)
	if got := r.who("rev", "reviewer"); got != "reviewer" {
		t.Fatalf("ran on %q", got)
	}
	r.pool.SetProfiles(map[string]*pool.Profile{"main": profs["main"]}, "main")
	if got := r.who("rev", ""); got != "reviewer" {
		t.Fatalf("the running agent was not kept: ran on %q", got)
	}

	r.pool.Discard("rev") // the agent is gone (idle stop, crash, restart)
	spawned := r.pool.Stats().Spawned
	o := r.promptAgent("rev", "", "hello").wait(t, 20*time.Second)
	want := `the agent profile "reviewer" this thread uses is no longer configured; start a new thread`
	if !errors.Is(o.Err, ErrProfileGone) || o.Err.Error() != want || o.Class() != "profile_gone" {
		t.Fatalf("outcome = %v (%s), want %q", o.Err, o.Class(), want)
	}
	if !strings.Contains(o.Summary(), want) {
		t.Fatalf("summary %q lacks the words", o.Summary())
	}
	if s := r.pool.Stats(); s.Spawned != spawned || s.SpawnFailed != 0 || s.Live != 0 {
		t.Fatalf("pool after the refused turn = %+v; want nothing started", s)
	}
	if got := st.ThreadProfile("rev"); got != "reviewer" {
		t.Fatalf("the thread's profile became %q", got)
	}

	o = r.promptAgent("new", "nope", "hello").wait(t, 20*time.Second)
	if !errors.Is(o.Err, ErrNoProfile) || o.Err.Error() != `there is no agent profile "nope"` {
		t.Fatalf("outcome for an unknown profile = %v", o.Err)
	}
	if got := st.ThreadProfile("new"); got != "" {
		t.Fatalf("a thread refused its first prompt was given %q", got)
	}
	if got := r.who("new", ""); got != "main" {
		t.Fatalf("the refused thread's next prompt ran on %q", got)
	}
}

// When every turn has ended and every agent stopped, each profile's
// counts are back to zero.
func TestEngine_ProfileCountsReturnToZero(t *testing.T) {
	profs := profiles(t)
	profs["reviewer"].MaxSessions = 1
	st := openStore(t, t.TempDir())
	r := newProfileRig(t, profs, st)
	var recs []*recorder
	for _, th := range []string{"a", "b", "c"} {
		recs = append(recs, r.promptAgent(th, "reviewer", "stream 2 100ms"), r.promptAgent("m-"+th, "", "stream 2 100ms"))
	}
	for _, rec := range recs {
		if o := rec.wait(t, 30*time.Second); o.Err != nil {
			t.Fatalf("outcome = %v", o.Err)
		}
	}
	for _, th := range []string{"a", "b", "c", "m-a", "m-b", "m-c"} {
		r.engine.Reset(th, CancelledBy("tester"))
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := r.engine.Stats().Pool
		zero := s.Live == 0 && s.Busy == 0 && s.Starting == 0 && s.Stopping == 0 && s.Waiting == 0
		for _, ps := range s.Profiles {
			zero = zero && ps.Live == 0 && ps.Busy == 0 && ps.Starting == 0 && ps.Stopping == 0 && ps.Waiting == 0
		}
		if zero && len(s.Profiles) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool after every agent stopped = %+v", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A profile's restart_after_cancel replaces its agents after a cancel
// they answered; another profile's agents are kept.
func TestEngine_RestartAfterCancelIsPerProfile(t *testing.T) {
	profs := profiles(t)
	profs["reviewer"].RestartAfterCancel = true
	r := newProfileRig(t, profs, openStore(t, t.TempDir()))
	for thread, restarts := range map[string]bool{"m": false, "rev": true} {
		agent := ""
		if restarts {
			agent = "reviewer"
		}
		rec := r.promptAgent(thread, agent, "hang")
		rec.waitWorking(t)
		first := r.pool.Lookup(thread)
		r.engine.Cancel(thread, CancelledBy("tester"))
		if o := rec.wait(t, 10*time.Second); !errors.Is(o.Err, ErrCancelled) {
			t.Fatalf("%s: outcome = %v", thread, o.Err)
		}
		if restarts {
			waitGone(t, first.Proc.PID())
		}
		if o := r.promptAgent(thread, "", "next").wait(t, 20*time.Second); o.Err != nil {
			t.Fatalf("%s: next turn = %v", thread, o.Err)
		}
		if again := r.pool.Lookup(thread); (again.Proc.PID() != first.Proc.PID()) != restarts || again.SessionID != first.SessionID {
			t.Fatalf("%s: after a cancel the agent went from pid %d to %d (restart wanted: %v)", thread, first.Proc.PID(), again.Proc.PID(), restarts)
		}
	}
}

// A thread from when [agent] was the one profile (stored as "default")
// goes on with the default of the named profiles that replaced it, and
// keeps that one from then on.
func TestEngine_AThreadOfTheOldSingleProfileGetsTheNewDefault(t *testing.T) {
	st := openStore(t, t.TempDir())
	st.SetThreadProfile("old", pool.DefaultProfileName)
	r := newProfileRig(t, profiles(t), st)
	if got := r.who("old", "reviewer"); got != "main" {
		t.Fatalf("the old thread ran on %q, want the default, main", got)
	}
	if got := st.ThreadProfile("old"); got != "main" {
		t.Fatalf("the old thread's profile is now %q", got)
	}
}
