package adapter

import (
	"context"
	"errors"
	"testing"
	"time"

	"acpbroker/pool"
	"acpbroker/store"

	"github.com/rs/zerolog"
)

// settings asks the fake agent what it runs with.
func (r *rig) settings(thread string) string {
	r.t.Helper()
	o := r.prompt(thread, "settings").wait(r.t, 20*time.Second)
	if o.Err != nil {
		r.t.Fatalf("settings in %s: %v", thread, o.Err)
	}
	return o.Text
}

func (r *rig) set(thread, id, value string) ThreadOptions {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o, err := r.engine.SetOption(ctx, thread, id, value)
	if err != nil {
		r.t.Fatalf("SetOption(%s, %s, %s): %v", thread, id, value, err)
	}
	return o
}

// newChoiceRig is a rig whose engine and pool keep threads in st, with a
// fake agent that offers options and commands and can resume sessions.
func newChoiceRig(t *testing.T, dir string, st *store.Store) *rig {
	t.Helper()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	p := pool.New(pool.Config{Command: fakeAgent, Args: []string{"--load-session", "--config-options", "--commands"}, WorkDir: dir,
		MaxSessions: 4, ExitGrace: 500 * time.Millisecond, Sessions: st, Logger: log})
	e := New(p, Config{Journal: st, ThreadProfiles: st, ThreadChoices: st, CancelGrace: 2 * time.Second, Logger: log})
	r := &rig{t: t, pool: p, engine: e}
	t.Cleanup(r.close)
	return r
}

// What the agent offers is the thread's to see; a choice reaches the
// agent at once and is what the thread shows; after a restart of the
// broker, the thread's new agent is given the same choices before its
// next prompt.
func TestOptions_ChoicesReachTheAgentAndOutliveARestart(t *testing.T) {
	dir, workDir := t.TempDir(), t.TempDir()
	st := openStore(t, dir)
	r := newChoiceRig(t, workDir, st)
	if _, err := r.engine.SetOption(context.Background(), "t1", "model", "fake-large"); !errors.Is(err, ErrNoOptionsYet) {
		t.Fatalf("a choice before the thread's agent said anything = %v, want ErrNoOptionsYet", err)
	}
	if got := r.settings("t1"); got != "model=fake-small mode=ask fast=false" {
		t.Fatalf("first settings = %q", got)
	}
	o := r.engine.Options("t1")
	model, ok := o.Model()
	if !o.Live || !ok || model.Value != "fake-small" || len(model.Choices) != 3 || len(o.ModeChoices()) != 3 {
		t.Fatalf("options = %+v", o)
	}
	if _, ok := o.Option("palette"); ok || len(o.Options) != 3 {
		t.Fatalf("an option of unknown type is offered: %+v", o.Options)
	}
	if n := r.engine.Stats().Pool.Conn.UnknownConfigOptions; n == 0 {
		t.Fatal("the option of unknown type was not counted")
	}
	if len(o.Commands) != 2 || o.Commands[0].Name != "review" {
		t.Fatalf("commands = %+v", o.Commands)
	}

	o = r.set("t1", "model", "Fake Large") // a choice's name will do
	if m, _ := o.Model(); m.Value != "fake-large" || o.Chosen["model"] != "fake-large" {
		t.Fatalf("after choosing: model %+v, chosen %v", m, o.Chosen)
	}
	r.set("t1", "fast", "on")
	ctx := context.Background()
	if _, err := r.engine.SetMode(ctx, "t1", "code"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.engine.SetOption(ctx, "t1", "model", "gpt-none"); !errors.Is(err, ErrBadValue) {
		t.Fatalf("an unoffered value = %v, want ErrBadValue", err)
	}
	if _, err := r.engine.SetOption(ctx, "t1", "colour", "red"); !errors.Is(err, ErrNoOption) {
		t.Fatalf("an unoffered option = %v, want ErrNoOption", err)
	}
	if got := r.settings("t1"); got != "model=fake-large mode=code fast=true" {
		t.Fatalf("settings after choosing = %q", got)
	}
	if s := r.engine.Status("t1"); s.Model != "Fake Large" || s.Mode != "Code" {
		t.Fatalf("status model %q, mode %q", s.Model, s.Mode)
	}

	r.close()
	st.Close()
	st = openStore(t, dir)
	r = newChoiceRig(t, workDir, st)
	if o := r.engine.Options("t1"); o.Live || !o.Empty() || o.Chosen["model"] != "fake-large" {
		t.Fatalf("options after a restart, before the agent starts = %+v", o)
	}
	if got := r.settings("t1"); got != "model=fake-large mode=code fast=true" {
		t.Fatalf("settings after a restart = %q, want the thread's choices", got)
	}
	if a := r.pool.Lookup("t1"); a == nil || !a.Resumed {
		t.Fatal("the session was not resumed")
	}
}

// A choice is sent at once, during a turn too; when the thread's agent is
// replaced, or its session reset, the next agent gets the thread's
// choices (the legacy mode here) and the engine forgets what the old one
// offered.
func TestOptions_LegacyModeIsSetMidTurnAndGivenToTheNextAgent(t *testing.T) {
	r := newRig(t, []string{"--modes"}, pool.Config{}, Config{})
	if got := r.settings("t1"); got != "model=fake-small mode=ask fast=false" {
		t.Fatalf("first settings = %q", got)
	}
	if _, err := r.engine.SetOption(context.Background(), "t1", "model", "fake-large"); !errors.Is(err, ErrNoOption) {
		t.Fatalf("an agent without options: %v", err)
	}
	busy := r.prompt("t1", "silent 2s")
	busy.waitWorking(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	o, err := r.engine.SetMode(ctx, "t1", "plan")
	if err != nil {
		t.Fatalf("SetMode during a turn: %v", err)
	}
	if o.Modes.Current != "plan" || o.CurrentMode() != "Plan" || o.ChosenMode != "plan" {
		t.Fatalf("after SetMode: %+v", o.Modes)
	}
	if _, err := r.engine.SetMode(ctx, "t1", "yolo"); !errors.Is(err, ErrBadValue) {
		t.Fatalf("an unoffered mode = %v", err)
	}
	if out := busy.wait(t, 20*time.Second); out.Err != nil {
		t.Fatal(out.Err)
	}

	r.pool.Discard("t1")
	if o := r.engine.Options("t1"); o.Live || o.Modes == nil {
		t.Fatalf("between agents the thread still sees the last state: %+v", o)
	}
	if got := r.settings("t1"); got != "model=fake-small mode=plan fast=false" {
		t.Fatalf("settings in a replaced agent = %q", got)
	}
	r.engine.Reset("t1", ErrCancelled)
	if n := r.engine.Stats().OptionThreads; n != 0 {
		t.Fatalf("OptionThreads after a reset = %d, want 0", n)
	}
	if got := r.settings("t1"); got != "model=fake-small mode=plan fast=false" {
		t.Fatalf("settings after a reset = %q", got)
	}
	r.engine.Reset("t1", ErrCancelled)
	waitThreads(t, r.engine, 0)
	if n := r.engine.Stats().OptionThreads; n != 0 {
		t.Fatalf("OptionThreads = %d, want 0", n)
	}
}

// A thread's choice its new agent does not take is told to the thread,
// naming the option and why, and the turn goes on with the agent's own
// setting; so is a legacy mode the agent no longer offers.
func TestOptions_AChoiceTheNewAgentDoesNotTakeIsTold(t *testing.T) {
	st := openStore(t, t.TempDir())
	st.SetThreadOption("t1", "fast", "maybe")
	st.SetThreadMode("t2", "yolo")
	r := newRig(t, []string{"--config-options"}, pool.Config{}, Config{ThreadChoices: st})
	rec := r.prompt("t1", "settings")
	if o := rec.wait(t, 20*time.Second); o.Err != nil || o.Text != "model=fake-small mode=ask fast=false" {
		t.Fatalf("outcome %+v", o)
	}
	n := rec.noticeList()
	if len(n) != 1 {
		t.Fatalf("notices %+v", n)
	}
	if c, ok := n[0].(ChoiceNotApplied); !ok || c.Option != "Fast answers" || c.Value != "" || !errors.Is(c.Err, ErrBadValue) {
		t.Fatalf("notice %+v", n[0])
	}

	r = newRig(t, []string{"--modes"}, pool.Config{}, Config{ThreadChoices: st})
	rec = r.prompt("t2", "settings")
	if o := rec.wait(t, 20*time.Second); o.Err != nil || o.Text != "model=fake-small mode=ask fast=false" {
		t.Fatalf("outcome %+v", o)
	}
	if n := rec.noticeList(); len(n) != 1 || n[0] != Notice(ModeNotApplied{Mode: "yolo", Gone: true}) {
		t.Fatalf("notices %+v", n)
	}
}
