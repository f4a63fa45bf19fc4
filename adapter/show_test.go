package adapter

import (
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/pool"
)

// An update of an unknown kind mid-turn neither ends nor stalls the turn:
// the text after it arrives and the turn ends as the agent says, and the
// unknown update and content are counted.
func TestTurn_UnknownUpdateIsCountedAndTheTurnFinishes(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{})
	rec := r.prompt("t", "unknown-update")
	o := rec.wait(t, 20*time.Second)
	if o.Err != nil || o.StopReason != acp.StopEndTurn || o.Text != "before after" {
		t.Fatalf("outcome = %+v (text %q)", o, o.Text)
	}
	s := r.engine.Stats().Pool.Conn
	if s.UnknownUpdates != 1 || s.UnknownContent != 1 || s.BadMessages != 0 {
		t.Fatalf("unknown updates %d, content %d, bad messages %d; want 1, 1, 0", s.UnknownUpdates, s.UnknownContent, s.BadMessages)
	}
}

// The agent's usage reaches the Outcome (its last usage_update and the
// answer's totals) and the thread's Status, which forgets it at Reset.
func TestTurn_UsageReachesTheOutcomeAndStatus(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{})
	rec := r.prompt("t", "usage")
	o := rec.wait(t, 20*time.Second)
	if o.Err != nil || o.Usage == nil || o.Usage.Used != 45000 || o.Usage.Size != 200000 || o.Usage.Cost == nil || o.Usage.Cost.Amount != 0.12 {
		t.Fatalf("outcome = %+v, usage %+v", o, o.Usage)
	}
	if o.TurnUsage == nil || o.TurnUsage.TotalTokens != 3200 {
		t.Fatalf("turn usage = %+v", o.TurnUsage)
	}
	if st := r.engine.Status("t"); st.Usage == nil || st.Usage.Used != 45000 {
		t.Fatalf("status usage = %+v", st.Usage)
	}
	if s := r.engine.Stats(); s.UsageThreads != 1 {
		t.Fatalf("threads with usage = %d", s.UsageThreads)
	}
	// Still there while the agent lives; gone with the thread's session.
	r.engine.pruneUsage()
	if st := r.engine.Status("t"); st.Usage == nil {
		t.Fatal("usage forgotten while the agent lives")
	}
	r.engine.Reset("t", ErrCancelled)
	if st := r.engine.Status("t"); st.Usage != nil {
		t.Fatalf("usage kept after reset: %+v", st.Usage)
	}
	if s := r.engine.Stats(); s.UsageThreads != 0 {
		t.Fatalf("threads with usage after reset = %d", s.UsageThreads)
	}
}

// The usage of a thread whose agent is gone is forgotten by the watchdog.
func TestTurn_UsageOfAThreadWithoutAnAgentIsPruned(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{})
	r.prompt("t", "usage").wait(t, 20*time.Second)
	r.pool.Discard("t")
	deadline := time.Now().Add(10 * time.Second)
	for r.pool.Lookup("t") != nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// As the watchdog does, each round: the thread's turn may still be
	// winding down at the first.
	for {
		r.engine.pruneUsage()
		s := r.engine.Stats()
		if s.UsageThreads == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("threads with usage = %d after the agent went", s.UsageThreads)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
