package api

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"acpbroker/adapter"
)

// A prompt cancelled while it waits in the thread's queue is withdrawn:
// its turn is told why and never reaches the agent, and no running turn
// is cancelled for it.
func TestCancel_APromptCancelledWhileQueuedIsWithdrawn(t *testing.T) {
	a := unit(t, nil)
	_, started := a.post(`{"text": "hello"}`, "")
	p := a.submitted()
	wd, ok := p.Sink.(adapter.Withdrawer)
	if !ok {
		t.Fatal("the prompt's Sink cannot be withdrawn")
	}
	p.Sink.Status(adapter.Status{Phase: adapter.PhaseQueued})
	if err := wd.Withdrawn(); err != nil {
		t.Fatalf("withdrawn before any cancel: %v", err)
	}
	w := a.do(call{method: "POST", path: "/v1/prompts/" + started.ID + "/cancel", token: testToken})
	wantStatus(t, "cancel", w, http.StatusAccepted)
	if !strings.Contains(w.Body.String(), `"state":"cancelling"`) {
		t.Errorf("cancel: %s", w.Body)
	}
	err := wd.Withdrawn()
	if !errors.Is(err, adapter.ErrCancelled) || !strings.Contains(err.Error(), "ci (through the API)") {
		t.Errorf("withdrawn: %v, want cancelled by ci through the API", err)
	}
	if c := a.engine.cancels(); len(c) != 0 {
		t.Errorf("a queued prompt's cancel ended the running turn of %v", c)
	}
	p.Sink.Done(adapter.Outcome{Err: err, Shown: func(string) {}})
	w = a.do(call{method: "GET", path: "/v1/prompts/" + started.ID, token: testToken})
	if !strings.Contains(w.Body.String(), `"state":"cancelled"`) {
		t.Errorf("GET after: %s", w.Body)
	}
	wantStatus(t, "a cancel once ended", a.do(call{method: "POST", path: "/v1/prompts/" + started.ID + "/cancel", token: testToken}), http.StatusConflict)
}

// A prompt cancelled once its turn runs is not withdrawn: its thread's
// turn is cancelled.
func TestCancel_ARunningPromptsTurnIsCancelled(t *testing.T) {
	a := unit(t, nil)
	_, started := a.post(`{"text": "hello"}`, "")
	p := a.submitted()
	defer done(p, "")
	p.Sink.Status(adapter.Status{Phase: adapter.PhaseWorking})
	wantStatus(t, "cancel", a.do(call{method: "POST", path: "/v1/prompts/" + started.ID + "/cancel", token: testToken}), http.StatusAccepted)
	if err := p.Sink.(adapter.Withdrawer).Withdrawn(); err != nil {
		t.Errorf("a running prompt withdrawn: %v", err)
	}
	if c := a.engine.cancels(); len(c) != 1 || c[0] != HeadlessPlatform+":"+started.Thread {
		t.Errorf("cancels %v, want the prompt's thread's turn", c)
	}
}
