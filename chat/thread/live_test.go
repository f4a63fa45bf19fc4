package thread_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat/thread"
	"acpbroker/internal/brokertest"

	"github.com/rs/zerolog"
)

// scriptEngine is an engine the test drives by hand: each prompt
// submitted is handed to the test, which then calls its Sink as the
// engine would, in the order it wants.
type scriptEngine struct {
	prompts chan *adapter.Prompt
	mu      sync.Mutex
	refuse  error // Submit's answer while set
}

func (e *scriptEngine) Submit(_ string, p *adapter.Prompt) error {
	e.mu.Lock()
	err := e.refuse
	e.mu.Unlock()
	if err != nil {
		return err
	}
	e.prompts <- p
	return nil
}

func (e *scriptEngine) Cancel(string, error) bool            { return false }
func (e *scriptEngine) Reset(string, error)                  {}
func (e *scriptEngine) Status(string) adapter.ThreadStatus   { return adapter.ThreadStatus{} }
func (e *scriptEngine) Options(string) adapter.ThreadOptions { return adapter.ThreadOptions{} }
func (e *scriptEngine) Waiting(string) []adapter.Waiting     { return nil }
func (e *scriptEngine) SendNow(string, *adapter.Prompt, string) error {
	return errors.New("not waiting")
}
func (e *scriptEngine) Withdraw(string, *adapter.Prompt, error) error {
	return errors.New("not waiting")
}
func (e *scriptEngine) SetOption(context.Context, string, string, string) (adapter.ThreadOptions, error) {
	return adapter.ThreadOptions{}, errors.New("no options")
}
func (e *scriptEngine) SetMode(context.Context, string, string) (adapter.ThreadOptions, error) {
	return adapter.ThreadOptions{}, errors.New("no modes")
}

// scripted is a Server of a board whose engine the test drives.
type scripted struct {
	*boardHarness
	eng       *scriptEngine
	closeOnce sync.Once
}

func newScripted(t *testing.T, cfg thread.Config) *scripted {
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	h := &scripted{boardHarness: &boardHarness{t: t, board: newBoard(), channel: "general"},
		eng: &scriptEngine{prompts: make(chan *adapter.Prompt, 16)}}
	cfg.Limits = thread.Limits{Name: "Board", MessageRunes: 3000, Burst: 10, Window: time.Second, Files: 1, FilesBytes: 1 << 20,
		Buttons: 5, Menus: 5, MenuOptions: 100, LinkRunes: 3000}
	cfg.Access.AllowedChannels = []string{h.channel}
	cfg.EditInterval = 20 * time.Millisecond
	cfg.Logger = log
	h.srv = thread.New(cfg, h.board, h.eng)
	h.srv.Accept(true)
	t.Cleanup(h.close)
	return h
}

// close waits for everything the Server does to be done.
func (h *scripted) close() {
	h.closeOnce.Do(func() {
		h.srv.Accept(false)
		h.srv.Close(5 * time.Second)
	})
}

// prompt is the next prompt submitted.
func (h *scripted) prompt() *adapter.Prompt {
	h.t.Helper()
	select {
	case p := <-h.eng.prompts:
		return p
	case <-time.After(10 * time.Second):
		h.t.Fatal("no prompt submitted within 10s")
		return nil
	}
}

// ended is an outcome whose Shown is reported on the channel returned.
func ended(o adapter.Outcome) (adapter.Outcome, chan string) {
	shown := make(chan string, 4)
	o.Shown = func(where string) { shown <- where }
	return o, shown
}

func (h *scripted) awaitShown(what string, shown chan string) string {
	h.t.Helper()
	select {
	case where := <-shown:
		return where
	case <-time.After(10 * time.Second):
		h.t.Fatalf("%s: the thread never showed it within 10s", what)
		return ""
	}
}

// outcomeMessages are the bot's messages in where that say how a
// prompt ended: a footer (on an answer, or on the note under a message
// that never ran), or a final view given up.
func (h *scripted) outcomeMessages(where string) []string {
	var out []string
	for _, m := range h.board.messages(where) {
		if f := brokertest.Footer(m.view.Text); f != "" {
			out = append(out, f)
		} else if strings.HasPrefix(m.view.Text, "⚠️") {
			out = append(out, m.view.Text)
		}
	}
	return out
}

func chunk(text string) acp.Update {
	return acp.Update{Kind: acp.UpdateMessageChunk, Content: &acp.ContentBlock{Type: "text", Text: text}}
}

// running opens a thread whose first turn works and has said something.
func (h *scripted) running() (string, *adapter.Prompt) {
	th := h.start(alice, "first")
	p := h.prompt()
	p.Sink.Status(adapter.Status{Phase: adapter.PhaseWorking})
	p.Sink.Update(chunk("the first answer"))
	h.last(th, "the first answer streaming", func(m boardMsg) bool { return strings.Contains(m.view.Text, "the first answer") })
	return th, p
}

// queued has bob write text in th behind its running turn, and waits for
// the note under it.
func (h *scripted) queued(th, text string) (string, *adapter.Prompt) {
	id := h.say(th, bob, text)
	p := h.prompt()
	p.Sink.Status(adapter.Status{Phase: adapter.PhaseQueued, Position: 1})
	h.note(th, id, "the waiting message's note", func(m boardMsg) bool { return len(m.view.Actions) == 2 })
	return id, p
}

// A message that waited behind a turn, then for an agent slot (its turn
// posting that status line), and was cancelled before the agent had it,
// shows its end once: the thread has one outcome message per prompt.
func TestLive_AWaitingMessagesEndIsShownOnceAfterAStatusLine(t *testing.T) {
	h := newScripted(t, thread.Config{})
	th, first := h.running()
	msg, second := h.queued(th, "second")
	o, firstShown := ended(adapter.Outcome{StopReason: acp.StopEndTurn, Text: "the first answer", Elapsed: time.Second})
	first.Sink.Done(o)
	h.awaitShown("the first turn's end", firstShown)
	second.Sink.Status(adapter.Status{Phase: adapter.PhaseWaitingForSlot})
	h.last(th, "the status line", func(m boardMsg) bool { return strings.Contains(m.view.Text, "waiting for a free agent slot") })
	o, shown := ended(adapter.Outcome{Err: adapter.CancelledBy("Alice")})
	second.Sink.Done(o)
	h.awaitShown("the second message's end", shown)
	h.close()
	if got := h.outcomeMessages(th); len(got) != 2 {
		t.Fatalf("the thread shows %d outcome messages for 2 prompts: %q", len(got), got)
	}
	for _, m := range h.board.messages(th) {
		if m.view.ReplyTo == msg && len(m.view.Actions) > 0 {
			t.Errorf("the note still offers %+v: %q", m.view.Actions, m.view.Text)
		}
	}
}

// failOnce is a hook that fails the first call putting (on) or taking
// off mark.
func failOnce(err error, mark thread.Mark, on bool) func(<-chan struct{}) func(boardCall) error {
	return func(<-chan struct{}) func(boardCall) error {
		var once sync.Once
		return func(c boardCall) error {
			var failed error
			if c.op == "mark" && c.mark == mark && c.on == on {
				once.Do(func() { failed = err })
			}
			return failed
		}
	}
}

// A prompt's status mark ends final, and alone, whatever the platform
// answers meanwhile: a mark not taken off the first time, a mark still
// on its way when the turn ends, a final mark refused once.
func TestLive_TheStatusMarkEndsFinal(t *testing.T) {
	errBusy := errors.New("502 Bad Gateway")
	for _, tc := range []struct {
		name string
		// hook makes the board's mark calls of the waiting message
		// fail or wait; release lets a held call go.
		hook func(release <-chan struct{}) func(boardCall) error
		// calls is how many mark calls of the message are made before
		// the turn ends: the last of them may be held.
		calls   int
		want    thread.Mark
		outcome adapter.Outcome
	}{
		{name: "the waiting mark not taken off once", calls: 1, want: thread.MarkDone,
			outcome: adapter.Outcome{StopReason: acp.StopEndTurn, Text: "yes", Elapsed: time.Second},
			hook:    failOnce(errBusy, thread.MarkQueued, false)},
		{name: "the working mark not put once", calls: 2, want: thread.MarkFailed,
			outcome: adapter.Outcome{Err: errors.New("the agent crashed"), Elapsed: time.Second},
			hook:    failOnce(errBusy, thread.MarkWorking, true)},
		{name: "the working mark on its way as the turn ends", calls: 2, want: thread.MarkCancelled,
			outcome: adapter.Outcome{Err: adapter.CancelledBy("Alice"), Elapsed: time.Second},
			hook: func(release <-chan struct{}) func(boardCall) error {
				return func(c boardCall) error {
					if c.op == "mark" && c.mark == thread.MarkWorking && c.on {
						<-release
					}
					return nil
				}
			}},
		{name: "the final mark refused once", calls: 2, want: thread.MarkDone,
			outcome: adapter.Outcome{StopReason: acp.StopEndTurn, Text: "yes", Elapsed: time.Second},
			hook:    failOnce(errBusy, thread.MarkDone, true)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newScripted(t, thread.Config{})
			th, first := h.running()
			release := make(chan struct{})
			var releaseOnce sync.Once
			defer releaseOnce.Do(func() { close(release) })
			msg, second := h.queued(th, "second")
			h.await("the message marked waiting", func() bool { return slices.Equal(h.board.marksOf(th, msg), []thread.Mark{thread.MarkQueued}) })
			hook := tc.hook(release)
			var mu sync.Mutex
			calls := 0
			h.board.mu.Lock()
			h.board.hook = func(c boardCall) error {
				if c.id != msg || c.op != "mark" {
					return nil
				}
				mu.Lock()
				calls++
				mu.Unlock()
				return hook(c)
			}
			h.board.mu.Unlock()
			o, shown := ended(adapter.Outcome{StopReason: acp.StopEndTurn, Text: "the first answer", Elapsed: time.Second})
			first.Sink.Done(o)
			h.awaitShown("the first turn's end", shown)
			second.Sink.Status(adapter.Status{Phase: adapter.PhaseWorking})
			second.Sink.Update(chunk("yes"))
			h.await("the marks' calls", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return calls >= tc.calls
			})
			o, shown = ended(tc.outcome)
			second.Sink.Done(o)
			releaseOnce.Do(func() { close(release) })
			h.awaitShown("the second turn's end", shown)
			h.close()
			if got := h.board.marksOf(th, msg); !slices.Equal(got, []thread.Mark{tc.want}) {
				t.Fatalf("the message's marks are %v, want %v alone", got, tc.want)
			}
		})
	}
}

// However its prompts end (answered, removed while waiting, cancelled
// while waiting for a slot after saying so, refused, failed once the
// agent had it, removed while its note was on its way), a thread shows
// one outcome message per prompt, never one more.
func TestLive_OneOutcomeMessagePerPrompt(t *testing.T) {
	h := newScripted(t, thread.Config{})
	th, first := h.running()
	var shown []chan string
	end := func(p *adapter.Prompt, o adapter.Outcome) {
		o, ch := ended(o)
		shown = append(shown, ch)
		p.Sink.Done(o)
	}

	_, removed := h.queued(th, "removed")
	end(removed, adapter.Outcome{Err: adapter.RemovedBy("Bob")})
	_, slot := h.queued(th, "waits for a slot")
	_, fails := h.queued(th, "fails")

	// A note whose post is held when its message is removed.
	held := make(chan struct{})
	h.board.mu.Lock()
	h.board.hook = func(c boardCall) error {
		if c.op == "post" && strings.Contains(c.view.Text, "This message waits") && c.view.ReplyTo != "" {
			select {
			case <-held:
			case <-time.After(10 * time.Second):
			}
		}
		return nil
	}
	h.board.mu.Unlock()
	h.say(th, bob, "removed at once")
	gone := h.prompt()
	gone.Sink.Status(adapter.Status{Phase: adapter.PhaseQueued, Position: 3})
	end(gone, adapter.Outcome{Err: adapter.RemovedBy("Bob")})
	close(held)

	end(first, adapter.Outcome{StopReason: acp.StopEndTurn, Text: "the first answer", Elapsed: time.Second})
	slot.Sink.Status(adapter.Status{Phase: adapter.PhaseWaitingForSlot})
	h.last(th, "the status line", func(m boardMsg) bool { return strings.Contains(m.view.Text, "waiting for a free agent slot") })
	end(slot, adapter.Outcome{Err: adapter.CancelledBy("Alice")})
	fails.Sink.Status(adapter.Status{Phase: adapter.PhaseWorking})
	fails.Sink.Update(chunk("partial"))
	end(fails, adapter.Outcome{Err: errors.New("the agent crashed"), Elapsed: time.Second})

	h.eng.mu.Lock()
	h.eng.refuse = adapter.ErrQueueFull
	h.eng.mu.Unlock()
	h.say(th, bob, "refused")
	h.await("the refusal", func() bool { return len(h.outcomeMessages(th)) >= 1 && h.refusalShown(th) })

	for i, ch := range shown {
		h.awaitShown("prompt "+string(rune('a'+i)), ch)
	}
	h.close()
	if got := h.outcomeMessages(th); len(got) != 6 {
		t.Fatalf("the thread shows %d outcome messages for 6 prompts:\n%s", len(got), strings.Join(got, "\n"))
	}
}

// refusalShown reports whether th shows a refused prompt's message.
func (h *scripted) refusalShown(th string) bool {
	for _, m := range h.board.messages(th) {
		if strings.HasPrefix(m.view.Text, "⚠️") && strings.Contains(m.view.Text, "queue") {
			return true
		}
	}
	return false
}

// A prompt's final status mark waits for the thread to show how its
// turn ended: while the final view waits out the platform's rate limit,
// the prompt keeps its working mark, so that a prompt marked ended
// always has its outcome message in the thread (on Slack the reactions
// have a budget of their own, and ✅ went on seconds before the answer
// it stood for).
func TestLive_TheFinalMarkFollowsTheEndShown(t *testing.T) {
	h := newScripted(t, thread.Config{})
	th, p := h.running()
	var mu sync.Mutex
	limited := 0
	var early []string // the outcome messages shown when the final mark was put
	marked := false
	h.board.mu.Lock()
	h.board.hook = func(c boardCall) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case c.op != "mark" && c.view.Outcome && limited < 3:
			limited++
			return &thread.RateLimited{After: 200 * time.Millisecond}
		case c.op == "mark" && c.on && c.mark == thread.MarkDone:
			early, marked = h.outcomeMessages(th), true
		}
		return nil
	}
	h.board.mu.Unlock()
	o, shown := ended(adapter.Outcome{StopReason: acp.StopEndTurn, Text: "the first answer", Elapsed: time.Second})
	p.Sink.Done(o)
	h.awaitShown("the turn's end", shown)
	h.close()
	mu.Lock()
	defer mu.Unlock()
	if limited < 3 {
		t.Fatalf("the final view met the rate limit %d times, want 3", limited)
	}
	if !marked {
		t.Fatal("the prompt was never marked done")
	}
	if len(early) != 1 {
		t.Fatalf("the prompt was marked done while the thread showed %d outcome messages for it: %q", len(early), early)
	}
	if got := h.outcomeMessages(th); len(got) != 1 {
		t.Fatalf("the thread shows %d outcome messages for 1 prompt: %q", len(got), got)
	}
}
