package adapter

import (
	"errors"
	"strings"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/pool"
)

// submit queues text in thread as from who may act on it (or not).
func (r *rig) submit(thread, text, author string, mayAct, interrupt bool) (*Prompt, *recorder) {
	r.t.Helper()
	rec := newRecorder()
	p := &Prompt{Ref: thread, Title: text, Author: author, AuthorName: author, Blocks: []acp.ContentBlock{acp.TextBlock(text)},
		MayInterrupt: mayAct, Interrupt: interrupt, Sink: rec}
	if err := r.engine.Submit(thread, p); err != nil {
		r.t.Fatalf("Submit(%q): %v", text, err)
	}
	return p, rec
}

func (r *recorder) phases() []Phase {
	var out []Phase
	for _, s := range r.statusList() {
		out = append(out, s.Phase)
	}
	return out
}

// Send now interrupts the running turn, whose outcome says who did and
// for what, and the waiting message is the next prompt of the same
// session in the same agent, which answered the cancel.
func TestSendNow_InterruptsTheTurnAndSendsTheMessageToTheSameSession(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{})
	_, running := r.submit("t", "hang", "alice", true, false)
	running.waitWorking(t)
	agent := r.pool.Lookup("t")
	later, waiting := r.submit("t", "session", "bob", false, false)
	if got := waiting.phases(); len(got) != 1 || got[0] != PhaseQueued {
		t.Fatalf("the second message's phases: %v, want queued", got)
	}
	if w := r.engine.Waiting("t"); len(w) != 1 || w[0].Prompt != later || w[0].Next {
		t.Fatalf("waiting: %+v", w)
	}
	if err := r.engine.SendNow("t", later, "Alice"); err != nil {
		t.Fatal(err)
	}
	o := running.wait(t, 20*time.Second)
	if !errors.Is(o.Err, ErrInterrupted) || !errors.Is(o.Err, ErrCancelled) || o.Summary() != "interrupted by Alice: session" || o.Class() != "interrupted" {
		t.Fatalf("the interrupted turn ended with %v (%q, class %s)", o.Err, o.Summary(), o.Class())
	}
	o = waiting.wait(t, 20*time.Second)
	if want := "session " + agent.SessionID + " (new); 1 earlier prompts; last: hang"; o.Err != nil || o.Text != want {
		t.Fatalf("the message sent now got %q (%v), want %q", o.Text, o.Err, want)
	}
	if now := r.pool.Lookup("t"); now == nil || now.Proc.PID() != agent.Proc.PID() {
		t.Errorf("the agent that answered the cancel was replaced")
	}
	if got := waiting.phases(); len(got) < 3 || got[1] != PhaseNext || got[2] != PhaseWorking {
		t.Errorf("the message's phases: %v, want queued, next, working", got)
	}
	if err := r.engine.SendNow("t", later, "Alice"); !errors.Is(err, ErrNotWaiting) {
		t.Errorf("Send now of a message that ran: %v, want ErrNotWaiting", err)
	}
}

// An agent that ignores the cancel is replaced after the grace, as after
// any cancel it does not honour, and the message still reaches the
// session, which the new agent takes up with session/resume.
func TestSendNow_AnAgentThatIgnoresTheCancelIsReplacedAndTheSessionResumed(t *testing.T) {
	r := newRig(t, []string{"-resume-session"}, pool.Config{}, Config{CancelGrace: 500 * time.Millisecond})
	_, running := r.submit("t", "ignore-cancel", "alice", true, false)
	running.waitWorking(t)
	old := r.pool.Lookup("t")
	steer, waiting := r.submit("t", "session", "alice", true, true)
	if w := r.engine.Waiting("t"); len(w) != 1 || w[0].Prompt != steer || !w[0].Next {
		t.Fatalf("the steer waits as %+v, want it next", w)
	}
	o := running.wait(t, 20*time.Second)
	if o.Summary() != "interrupted by alice: session" {
		t.Fatalf("the interrupted turn: %q", o.Summary())
	}
	o = waiting.wait(t, 20*time.Second)
	if want := "session " + old.SessionID + " (resumed); 1 earlier prompts; last: ignore-cancel"; o.Err != nil || o.Text != want {
		t.Fatalf("the steer got %q (%v), want %q", o.Text, o.Err, want)
	}
	if now := r.pool.Lookup("t"); now == nil || now.Proc.PID() == old.Proc.PID() || now.ResumedWith != acp.MethodSessionResume {
		t.Errorf("the agent that ignored the cancel was not replaced by one that resumed the session")
	}
}

// With busy = interrupt, a message whose author may act on the thread
// interrupts at once; anyone else's waits. A profile's own busy mode
// wins over the engine's, and a steer interrupts whatever the mode.
func TestSubmit_BusyInterruptLetsThoseWhoMayActInterrupt(t *testing.T) {
	for _, tc := range []struct {
		name                string
		engineBusy, profile string
		want                bool // the starter's message interrupts
	}{
		{"engine interrupt", BusyInterrupt, "", true},
		{"engine queue", BusyQueue, "", false},
		{"profile interrupt over engine queue", BusyQueue, BusyInterrupt, true},
		{"profile queue over engine interrupt", BusyInterrupt, BusyQueue, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pc := pool.Config{Profiles: map[string]*pool.Profile{"p": {Command: fakeAgent, Busy: tc.profile}}}
			r := newRig(t, nil, pc, Config{Busy: tc.engineBusy})
			for _, prof := range pc.Profiles {
				prof.WorkDir = t.TempDir()
			}
			r.pool.SetProfiles(pc.Profiles, "p")
			_, running := r.submit("t", "hang", "alice", true, false)
			running.waitWorking(t)
			_, other := r.submit("t", "stream 1", "bob", false, false)
			_, starter := r.submit("t", "stream 2", "alice", true, false)
			if tc.want {
				if o := running.wait(t, 20*time.Second); o.Summary() != "interrupted by alice: stream 2" {
					t.Fatalf("the running turn: %q, want interrupted by the starter", o.Summary())
				}
				if o := starter.wait(t, 20*time.Second); o.Text != "chunk 1\nchunk 2\n" {
					t.Fatalf("the starter's message: %+v", o)
				}
				if o := other.wait(t, 20*time.Second); o.Text != "chunk 1\n" {
					t.Fatalf("the other's message: %+v", o)
				}
				starter.mu.Lock()
				other.mu.Lock()
				defer starter.mu.Unlock()
				defer other.mu.Unlock()
				if !other.doneAt.After(starter.doneAt) {
					t.Error("the other's message ran before the starter's")
				}
				return
			}
			if got := starter.phases(); len(got) != 1 || got[0] != PhaseQueued {
				t.Fatalf("the starter's message: phases %v, want queued", got)
			}
			if w := r.engine.Waiting("t"); len(w) != 2 {
				t.Fatalf("waiting: %d, want both", len(w))
			}
			steer, steered := r.submit("t", "stream 3", "alice", true, true)
			if w := r.engine.Waiting("t"); w[0].Prompt != steer {
				t.Fatalf("the steer is not first: %+v", w)
			}
			if o := running.wait(t, 20*time.Second); o.Summary() != "interrupted by alice: stream 3" {
				t.Fatalf("a steer did not interrupt: %q", o.Summary())
			}
			if o := steered.wait(t, 20*time.Second); o.Text != "chunk 1\nchunk 2\nchunk 3\n" {
				t.Fatalf("the steer: %+v", o)
			}
		})
	}
}

// Waiting lists the queue in order, Withdraw takes one out with its
// cause (and it never reaches the agent), and the bound hit is said.
func TestWithdraw_TakesAWaitingMessageOutOfTheQueue(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{QueueSize: 2})
	_, running := r.submit("t", "slow 300ms 2", "alice", true, false)
	running.waitWorking(t)
	first, firstRec := r.submit("t", "stream 1", "bob", false, false)
	second, secondRec := r.submit("t", "stream 2", "carol", false, false)
	w := r.engine.Waiting("t")
	if len(w) != 2 || w[0].Prompt != first || w[1].Prompt != second || w[0].Queued.IsZero() {
		t.Fatalf("waiting: %+v", w)
	}
	err := r.engine.Submit("t", &Prompt{Blocks: []acp.ContentBlock{acp.TextBlock("x")}, Sink: newRecorder()})
	if !errors.Is(err, ErrQueueFull) || QueueBound(err) != 2 || !strings.Contains(err.Error(), "2 messages") {
		t.Fatalf("past the bound: %v (bound %d), want ErrQueueFull saying 2", err, QueueBound(err))
	}
	if err := r.engine.Withdraw("t", first, RemovedBy("Bob")); err != nil {
		t.Fatal(err)
	}
	o := firstRec.wait(t, 5*time.Second)
	if !errors.Is(o.Err, ErrCancelled) || o.Summary() != "removed from the queue by Bob" || o.Text != "" {
		t.Fatalf("the withdrawn message: %+v (%q)", o, o.Summary())
	}
	if w := r.engine.Waiting("t"); len(w) != 1 || w[0].Prompt != second {
		t.Fatalf("waiting after the withdrawal: %+v", w)
	}
	if err := r.engine.Withdraw("t", first, RemovedBy("Bob")); !errors.Is(err, ErrNotWaiting) {
		t.Errorf("withdrawing it twice: %v", err)
	}
	if o := secondRec.wait(t, 20*time.Second); o.Text != "chunk 1\nchunk 2\n" {
		t.Errorf("the message behind it: %+v", o)
	}
	if o := running.wait(t, 20*time.Second); o.Err != nil {
		t.Errorf("the running turn: %v", o.Err)
	}
}
