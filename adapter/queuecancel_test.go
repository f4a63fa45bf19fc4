package adapter

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/pool"
)

// withdrawing is a recorder whose prompt is withdrawn once cancel is set.
type withdrawing struct {
	*recorder
	cancel atomic.Bool
}

func (w *withdrawing) Withdrawn() error {
	if w.cancel.Load() {
		return CancelledBy("a client")
	}
	return nil
}

// A prompt withdrawn while it waits behind a running turn never reaches
// the agent, however quickly the agent would have answered it: its turn
// ends cancelled, with the client's cause, when it leaves the queue.
func TestTurn_APromptWithdrawnWhileItWaitsNeverReachesTheAgent(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{})
	first := r.prompt("t", "slow 300ms 3")
	w := &withdrawing{recorder: newRecorder()}
	if err := r.engine.Submit("t", &Prompt{Ref: "t", Blocks: []acp.ContentBlock{acp.TextBlock("stream 1")}, Sink: w}); err != nil {
		t.Fatal(err)
	}
	w.cancel.Store(true)
	if o := first.wait(t, 20*time.Second); o.Err != nil {
		t.Fatalf("the running turn: %+v", o)
	}
	o := w.wait(t, 20*time.Second)
	if !errors.Is(o.Err, ErrCancelled) || o.Text != "" {
		t.Fatalf("the withdrawn prompt ended %+v, want cancelled with no answer", o)
	}
}

// A prompt submitted to an idle thread counts as running at once: a
// cancel that comes before its worker has taken it ends it, with the
// cancel's cause, instead of finding nothing to cancel.
func TestCancel_APromptNotYetTakenByItsWorkerIsCancelled(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{})
	rec := newRecorder()
	// What Submit leaves for a worker that has not run yet.
	r.engine.mu.Lock()
	th := &thread{id: "t"}
	r.engine.threads["t"] = th
	th.queue = append(th.queue, r.engine.newTurn("t", &Prompt{Ref: "t", Blocks: []acp.ContentBlock{acp.TextBlock("stream 1")}, Sink: rec}))
	r.engine.mu.Unlock()
	if !r.engine.Cancel("t", CancelledBy("alice (on the web)")) {
		t.Fatal("Cancel found nothing running")
	}
	o := rec.wait(t, 5*time.Second)
	if !errors.Is(o.Err, ErrCancelled) || o.Text != "" {
		t.Fatalf("the prompt ended %+v, want cancelled with no answer", o)
	}
	r.engine.mu.Lock()
	left := len(th.queue)
	delete(r.engine.threads, "t")
	r.engine.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d prompts left in the queue", left)
	}
}
