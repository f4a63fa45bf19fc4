package thread_test

import (
	"strings"
	"testing"

	"acpbroker/chat/thread"
)

var carol = thread.User{ID: "carol", Name: "Carol"}

// note waits for the bot's note under message id in where and returns it.
func (h *boardHarness) note(where, id, what string, cond func(boardMsg) bool) boardMsg {
	h.t.Helper()
	var found boardMsg
	h.await(what, func() bool {
		for _, m := range h.board.messages(where) {
			if m.view.ReplyTo == id && cond(m) {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

func actionID(t *testing.T, m boardMsg, label string) string {
	t.Helper()
	for _, a := range m.view.Actions {
		if a.Label == label {
			return a.ID
		}
	}
	t.Fatalf("%q has no %q action: %+v", m.view.Text, label, m.view.Actions)
	return ""
}

func (b *board) marksOf(where, id string) []thread.Mark {
	b.mu.Lock()
	defer b.mu.Unlock()
	if m := b.find(where, id); m != nil {
		return append([]thread.Mark(nil), m.marks...)
	}
	return nil
}

// A message written while a turn runs shows it waits and gets the bot's
// note offering Send now: a click of someone who may not act on the
// thread is refused and the message waits; the starter's interrupts the
// turn, whose end says who and for what, and the message is the next
// prompt of the same session; the note goes once the agent has it.
func TestNote_SendNowInterruptsTheTurnForWhoMayAct(t *testing.T) {
	h := newBoardHarness(t, thread.Config{})
	th := h.start(alice, "hang")
	h.last(th, "the turn working", func(m boardMsg) bool { return strings.Contains(m.view.Text, "working…") })
	msg := h.say(th, bob, "session")
	note := h.note(th, msg, "the waiting message's note", func(m boardMsg) bool { return len(m.view.Actions) == 2 })
	if !strings.Contains(note.view.Text, "**Send now**") {
		t.Fatalf("the note says %q", note.view.Text)
	}
	h.await("the message marked waiting", func() bool {
		marks := h.board.marksOf(th, msg)
		return len(marks) == 1 && marks[0] == thread.MarkQueued
	})
	send := actionID(t, note, "Send now")
	if got := h.click(th, send, bob); got != "private: <@alice> or an approver can interrupt this thread's turn; you can't. The message waits its turn." {
		t.Fatalf("bob's Send now answered %q", got)
	}
	if !h.engine.Status(th).Busy || h.engine.Status(th).Queued != 1 {
		t.Fatal("bob's click changed the turn or the queue")
	}
	if got := h.click(th, send, alice); got != "ack" {
		t.Fatalf("alice's Send now answered %q", got)
	}
	end := h.note(th, "", "the interrupted turn's end", func(m boardMsg) bool {
		return m.view.Outcome && strings.Contains(m.view.Text, "-# ⏹️ interrupted by Alice: session after ")
	})
	_ = end
	answer := h.last(th, "the message's answer", func(m boardMsg) bool {
		return m.view.Outcome && strings.Contains(m.view.Text, "(new); 1 earlier prompts; last: hang")
	})
	if !strings.HasPrefix(answer.view.Text, "session ") {
		t.Errorf("the answer: %q", answer.view.Text)
	}
	for _, m := range h.board.messages(th) {
		if m.view.ReplyTo == msg {
			t.Errorf("the note is still up: %q", m.view.Text)
		}
	}
	if got := h.click(th, send, alice); got != "private: This message is no longer waiting." {
		t.Errorf("a click after it ran answered %q", got)
	}
}

// Remove takes a waiting message out for its author or an approver, and
// no one else; its note then says who removed it, and the agent never
// gets it.
func TestNote_RemoveIsForTheAuthorOrAnApprover(t *testing.T) {
	h := newBoardHarness(t, thread.Config{Access: thread.Access{AllowedChannels: []string{"general"}, Approvers: []string{carol.ID}}})
	th := h.start(alice, "hang")
	h.last(th, "the turn working", func(m boardMsg) bool { return strings.Contains(m.view.Text, "working…") })
	mine := h.say(th, bob, "stream 1")
	note := h.note(th, mine, "bob's note", func(m boardMsg) bool { return len(m.view.Actions) == 2 })
	remove := actionID(t, note, "Remove")
	if got := h.click(th, remove, alice); got != "private: Only <@bob>, who wrote it, or an approver can remove this message." {
		t.Fatalf("alice's Remove answered %q", got)
	}
	if got := h.click(th, remove, bob); got != "ack" {
		t.Fatalf("bob's Remove answered %q", got)
	}
	h.note(th, mine, "the removal on the note", func(m boardMsg) bool {
		return m.view.Outcome && m.view.Text == "-# ⏹️ removed from the queue by Bob" && len(m.view.Actions) == 0
	})
	h.await("the message marked cancelled", func() bool {
		marks := h.board.marksOf(th, mine)
		return len(marks) == 1 && marks[0] == thread.MarkCancelled
	})

	other := h.say(th, alice, "stream 2")
	note = h.note(th, other, "alice's note", func(m boardMsg) bool { return len(m.view.Actions) == 2 })
	if got := h.click(th, actionID(t, note, "Remove"), carol); got != "ack" {
		t.Fatalf("the approver's Remove answered %q", got)
	}
	h.note(th, other, "the approver's removal", func(m boardMsg) bool { return m.view.Text == "-# ⏹️ removed from the queue by Carol" })
	if st := h.engine.Status(th); st.Queued != 0 {
		t.Fatalf("still queued: %d", st.Queued)
	}
	h.srv.Command(thread.Command{Name: "cancel", Where: th, From: alice, Reply: &reply{}})
	h.note(th, "", "the turn's end", func(m boardMsg) bool { return m.view.Outcome && strings.Contains(m.view.Text, "cancelled by Alice") })
	for _, m := range h.board.messages(th) {
		if strings.Contains(m.view.Text, "chunk 1") {
			t.Fatalf("a removed message reached the agent: %q", m.view.Text)
		}
	}
}

// queue lists the waiting messages with their authors, offering to each
// user what they may do, and removes one by its number for its author;
// steer interrupts the turn with its message, for who may act only.
func TestQueueAndSteer_WrittenToTheBot(t *testing.T) {
	h := newBoardHarness(t, thread.Config{})
	th := h.start(alice, "hang")
	h.last(th, "the turn working", func(m boardMsg) bool { return strings.Contains(m.view.Text, "working…") })
	first := h.say(th, bob, "stream 1")
	h.note(th, first, "the first note", func(m boardMsg) bool { return len(m.view.Actions) == 2 })
	h.say(th, alice, "stream 2")
	h.say(th, bob, "@bot queue")
	var w whisper
	h.await("the queue whispered", func() bool {
		for _, x := range h.board.whispered() {
			if strings.HasPrefix(x.view.Text, "**Waiting**") {
				w = x
				return true
			}
		}
		return false
	})
	if !strings.Contains(w.view.Text, "1. <@bob> “stream 1”") || !strings.Contains(w.view.Text, "2. <@alice> “stream 2”") || w.user != bob.ID {
		t.Fatalf("the queue: %q", w.view.Text)
	}
	var labels []string
	for _, a := range w.view.Actions {
		labels = append(labels, a.Label)
	}
	if strings.Join(labels, ",") != "Remove 1" {
		t.Errorf("bob, who may not act, is offered %v; want to remove his own alone", labels)
	}

	h.say(th, alice, "@bot queue remove 1")
	h.await("alice refused", func() bool {
		for _, x := range h.board.whispered() {
			if x.user == alice.ID && strings.Contains(x.view.Text, "Only <@bob>, who wrote it, or an approver can remove this message.") {
				return true
			}
		}
		return false
	})
	h.say(th, bob, "@bot queue remove 1")
	h.last(th, "the removal said", func(m boardMsg) bool {
		return strings.Contains(m.view.Text, "🗑️ <@bob> removed <@bob>'s waiting message “stream 1”.")
	})

	h.say(th, bob, "@bot steer session")
	h.await("bob's steer refused", func() bool {
		for _, x := range h.board.whispered() {
			if x.user == bob.ID && strings.Contains(x.view.Text, "<@alice> or an approver can @bot steer this thread; you can't.") {
				return true
			}
		}
		return false
	})
	h.say(th, alice, "@bot steer session")
	h.note(th, "", "the turn interrupted by the steer", func(m boardMsg) bool {
		return m.view.Outcome && strings.Contains(m.view.Text, "-# ⏹️ interrupted by Alice: session after ")
	})
	h.note(th, "", "the steer's answer, before stream 2", func(m boardMsg) bool {
		return m.view.Outcome && strings.Contains(m.view.Text, "1 earlier prompts; last: hang")
	})
	h.note(th, "", "stream 2 after it", func(m boardMsg) bool { return m.view.Outcome && strings.Contains(m.view.Text, "chunk 1\nchunk 2") })
}
