package discord_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"acpbroker/adapter"
	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakediscord"
)

// inAThread matches the message calls (sends and edits, without a file)
// in any channel but parent: a fault armed with it
// before the message that opens the thread is sent is in place before
// the broker can post there (the thread's id is the message's, known
// only once it is sent, when the broker may already be answering).
func inAThread(parent string) func(fakediscord.Request) bool {
	return func(r fakediscord.Request) bool {
		return (r.Route == fakediscord.RouteCreateMessage || r.Route == fakediscord.RouteEditMessage) &&
			r.Major != parent && !strings.HasPrefix(r.ContentType, "multipart/")
	}
}

func chunks(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "chunk %d\n", i)
	}
	return b.String()
}

// Failures spread over a long answer, a success between each, never stop
// the answer: only failures in a row count.
func TestPoster_FailuresSpreadOverALongAnswerLoseNothing(t *testing.T) {
	// Discord's 5 message calls per 5s in a channel make this answer
	// take its time.
	h := newHarness(t, setup{fake: fakediscord.Options{WaitTimeout: time.Minute}})
	var mu sync.Mutex
	calls, failed := 0, 0
	match := inAThread(h.channel)
	h.srv.InjectError(func(r fakediscord.Request) bool {
		if !match(r) {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls%3 != 0 && failed < 10 { // two calls in three, ten in all
			failed++
			return true
		}
		return false
	}, 1000, 500)
	thread := h.srv.SendMessage(h.channel, alice, h.srv.Bot().Mention()+" stream 60 100ms")
	msgs := h.answer(thread, "✅ done")
	if !strings.HasPrefix(joined(msgs), chunks(60)) {
		t.Fatalf("answer = %q", joined(msgs))
	}
	mu.Lock()
	defer mu.Unlock()
	if failed < 6 {
		t.Fatalf("only %d calls failed; the test did not do what it says", failed)
	}
}

// An answer message deleted while the answer streams: the answer goes on
// in a new message and ends complete.
func TestPoster_DeletedAnswerMessageContinuesInANewOne(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "stream 25 100ms")
	var first fakediscord.Message
	h.srv.Await("the answer streaming", func() bool {
		for _, m := range h.botMessages(thread) {
			if strings.Contains(m.Content, "chunk 3") {
				first = m
				return true
			}
		}
		return false
	})
	h.srv.DeleteUserMessage(thread, first.ID)
	msgs := h.answer(thread, "✅ done")
	if last := msgs[len(msgs)-1]; last.ID == first.ID || !strings.HasPrefix(last.Content, chunks(25)) {
		t.Fatalf("final message %s = %q", last.ID, last.Content)
	}
}

// When the final view cannot be posted, the thread is told by any means
// left: the whole answer attached to a new message or, when that fails
// too, a ⚠️ on the user's message; the loss is counted either way.
func TestPoster_FinalViewThatCannotBePostedIsSaidAndCounted(t *testing.T) {
	t.Run("attached", func(t *testing.T) {
		h := newHarness(t, setup{})
		h.srv.InjectError(inAThread(h.channel), 1000, 500)
		thread := h.srv.SendMessage(h.channel, alice, h.srv.Bot().Mention()+" hello")
		var note fakediscord.Message
		h.srv.Await("the answer attached", func() bool {
			for _, m := range h.botMessages(thread) {
				if strings.HasPrefix(m.Content, "⚠️ Discord kept failing") {
					note = m
					return true
				}
			}
			return false
		})
		if len(note.Attachments) != 1 || !strings.Contains(string(note.Attachments[0].Data), "You said: hello") {
			t.Fatalf("note %q attaches %+v", note.Content, note.Attachments)
		}
		if n := h.client.Stats().LostAnswers; n != 1 {
			t.Fatalf("lost answers = %d, want 1", n)
		}
	})
	t.Run("marked", func(t *testing.T) {
		h := newHarness(t, setup{})
		h.srv.InjectError(func(r fakediscord.Request) bool {
			return (r.Route == fakediscord.RouteCreateMessage || r.Route == fakediscord.RouteEditMessage) && r.Major != h.channel
		}, 1000, 500)
		thread := h.srv.SendMessage(h.channel, alice, h.srv.Bot().Mention()+" hello")
		h.srv.Await("⚠️ on the user's message", func() bool {
			return h.srv.HasReaction(h.channel, thread, h.srv.Bot().ID, "⚠️")
		})
		if n := h.client.Stats().LostAnswers; n != 1 {
			t.Fatalf("lost answers = %d, want 1", n)
		}
	})
}

// The final status reaction is the one left on the user's message for
// good: Discord failing it a few times does not leave ⚙️ there.
func TestPoster_AFailedFinalReactionIsTriedAgain(t *testing.T) {
	h := newHarness(t, setup{})
	h.srv.InjectError(func(r fakediscord.Request) bool {
		return r.Route == fakediscord.RouteAddReaction && (strings.Contains(r.Path, "✅") || strings.Contains(r.Path, "%E2%9C%85"))
	}, 3, 500)
	thread := h.mention(alice, "hello")
	h.answer(thread, "✅ done")
	h.srv.Await("the ✅ reaction", func() bool {
		var mine []string
		for _, r := range h.srv.Reactions(h.channel, thread) {
			if r.UserID == h.srv.Bot().ID {
				mine = append(mine, r.Emoji)
			}
		}
		return slices.Equal(mine, []string{"✅"})
	})
	failed := 0
	for _, r := range h.srv.Requests() {
		if r.Route == fakediscord.RouteAddReaction && r.Status == 500 {
			failed++
		}
	}
	if failed != 3 {
		t.Fatalf("%d reaction calls failed, want the 3 injected", failed)
	}
}

// A thread shows its turns in order: when Discord fails the first turn's
// answer a few times, the next turn's answer, ready sooner, still comes
// after it.
func TestPoster_TurnsAreShownInOrder(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "hello")
	h.answer(thread, "✅")
	h.srv.InjectError(func(r fakediscord.Request) bool {
		return r.Route == fakediscord.RouteCreateMessage && r.Major == thread && strings.Contains(string(r.Body), "ALPHA")
	}, 2, 500)
	h.srv.SendMessage(thread, alice, "late 10ms ALPHA")
	h.srv.SendMessage(thread, alice, "late 10ms BRAVO")
	h.srv.Await("both answers", func() bool {
		text := joined(h.botMessages(thread))
		return strings.Contains(text, "ALPHA") && strings.Contains(text, "BRAVO") && strings.Count(text, "✅ done") == 3
	})
	var order []string
	for _, m := range h.botMessages(thread) {
		for _, w := range []string{"ALPHA", "BRAVO"} {
			if strings.Contains(m.Content, w) {
				order = append(order, w)
			}
		}
	}
	if !slices.Equal(order, []string{"ALPHA", "BRAVO"}) {
		t.Fatalf("the thread shows the answers in the order %v", order)
	}
}

// shownJournal records, by turn, where the thread showed how it ended.
type shownJournal struct {
	mu    sync.Mutex
	next  uint64
	where map[uint64]string
	shown chan uint64
}

func (j *shownJournal) TurnQueued(thread, ref, title, author string) uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.next++
	return j.next
}
func (j *shownJournal) TurnStarted(uint64)                      {}
func (j *shownJournal) ToolCall(uint64, string, string, string) {}
func (j *shownJournal) TurnEnded(uint64, string, string)        {}
func (j *shownJournal) TurnShown(id uint64, where string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.where[id] = where
	j.shown <- id
}

func (j *shownJournal) shownIn(id uint64) string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.where[id]
}

// Once a turn's outcome is on screen, the engine learns which message
// shows it: the one with the footer, the last of a long answer's.
func TestPoster_TheMessageShowingTheOutcomeIsNoted(t *testing.T) {
	j := &shownJournal{where: map[uint64]string{}, shown: make(chan uint64, 1)}
	h := newHarness(t, setup{engine: adapter.Config{Journal: j}})
	thread := h.mention(alice, "code 150")
	msgs := h.answer(thread, "✅ done")
	if len(msgs) < 2 {
		t.Fatalf("the answer is in %d message(s), want several", len(msgs))
	}
	select {
	case <-j.shown:
	case <-time.After(h.wait):
		t.Fatal("the outcome was not noted as shown")
	}
	where := j.shownIn(1)
	if last := msgs[len(msgs)-1]; where != last.ID || brokertest.Footer(last.Content) == "" {
		t.Fatalf("noted as shown in %q; the footer is in %s (%q)", where, last.ID, brokertest.Footer(last.Content))
	}
}
