package adapter

import (
	"context"
	"errors"
	"testing"
	"time"

	"acpbroker/pool"
)

// A cancelled turn withdraws its prompt from the agent ($/cancel_request
// after session/cancel), which the agent received.
func TestAbandon_WithdrawsThePromptFromTheAgent(t *testing.T) {
	r := newRig(t, nil, pool.Config{}, Config{})
	rec := r.prompt("t", "hang")
	rec.waitWorking(t)
	r.engine.Cancel("t", CancelledBy("alice"))
	if o := rec.wait(t, 20*time.Second); !errors.Is(o.Err, ErrCancelled) {
		t.Fatalf("outcome %+v, want cancelled", o)
	}
	o := r.prompt("t", "withdrawn").wait(t, 20*time.Second)
	if o.Err != nil || o.Text != "withdrawn: session/prompt" {
		t.Fatalf("the agent says %q (%v), want the prompt withdrawn", o.Text, o.Err)
	}
	if s := r.engine.Stats().Pool; s.Spawned != 1 {
		t.Fatalf("pool %+v: the agent answered the cancel and should be kept", s)
	}
}

// A choice the agent takes too long to answer is given up when its
// context ends, and withdrawn from the agent, which answers it -32800.
func TestSetOption_GivenUpIsWithdrawnFromTheAgent(t *testing.T) {
	r := newRig(t, []string{"--config-options"}, pool.Config{}, Config{})
	if o := r.prompt("t", "hold-options 1m").wait(t, 20*time.Second); o.Err != nil {
		t.Fatal(o.Err)
	}
	ctx, cancel := context.WithTimeoutCause(context.Background(), 300*time.Millisecond, errors.New("no answer within 300ms"))
	defer cancel()
	if _, err := r.engine.SetOption(ctx, "t", "model", "fake-large"); err == nil {
		t.Fatal("SetOption returned no error though the agent held its answer")
	}
	o := r.prompt("t", "withdrawn").wait(t, 20*time.Second)
	if o.Err != nil || o.Text != "withdrawn: session/set_config_option" {
		t.Fatalf("the agent says %q (%v), want the choice withdrawn", o.Text, o.Err)
	}
	if s := r.engine.Stats().Pool.Conn; s.PendingRequests != 0 {
		t.Fatalf("pending requests = %d", s.PendingRequests)
	}
}
