package thread_test

import (
	"encoding/json"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"acpbroker/chat"
	"acpbroker/chat/thread"
)

// On a platform whose threads take no slash commands, a running turn's
// last message carries a Cancel button: a click of someone who may not
// act on the thread is refused privately and the turn runs on; the
// starter's cancels it, and the turn's end says who did. The button goes
// with the turn, and a click after that is told so.
func TestCancelButton_WhoMayActCancelsTheRunningTurn(t *testing.T) {
	h := newBoardHarness(t, thread.Config{CancelButton: true})
	th := h.start(alice, "hang")
	m := h.last(th, "the running turn's Cancel button", func(m boardMsg) bool {
		return len(m.view.Actions) == 1 && m.view.Actions[0].Label == "Cancel"
	})
	stop := m.view.Actions[0].ID
	if got := h.click(th, stop, bob); got != "private: <@alice> or an approver can cancel this thread's turn; you can't." {
		t.Fatalf("bob's click answered %q", got)
	}
	if !h.engine.Status(th).Busy {
		t.Fatal("bob's click ended the turn")
	}
	if got := h.click(th, stop, alice); got != "ack" {
		t.Fatalf("alice's click answered %q", got)
	}
	end := h.last(th, "the turn's end", func(m boardMsg) bool { return m.view.Outcome })
	if !strings.Contains(end.view.Text, "-# ⏹️ cancelled by Alice after ") {
		t.Fatalf("the turn ends %q", end.view.Text)
	}
	for _, m := range h.board.messages(th) {
		if len(m.view.Actions) > 0 {
			t.Fatalf("%q still carries %+v", m.view.Text, m.view.Actions)
		}
	}
	if got := h.click(th, stop, alice); got != "private: This turn is no longer running." {
		t.Fatalf("a click after the turn answered %q", got)
	}
}

// The Cancel button is on the running turn's last message only, and the
// answer shown in full carries none, however many messages it takes.
func TestCancelButton_NoneLeftOnALongAnswer(t *testing.T) {
	h := newBoardHarness(t, thread.Config{CancelButton: true})
	th := h.start(alice, "stream 500 4ms")
	h.last(th, "the turn's end", func(m boardMsg) bool { return m.view.Outcome })
	msgs := h.board.messages(th)
	if len(msgs) < 2 {
		t.Fatalf("the answer is in %d message(s), want several", len(msgs))
	}
	for _, m := range msgs {
		if len(m.view.Actions) > 0 {
			t.Fatalf("%.40q… still carries %+v", m.view.Text, m.view.Actions)
		}
	}
}

// Without the Cancel button (Discord's way), a turn's messages carry no
// actions.
func TestCancelButton_NoneUnlessAsked(t *testing.T) {
	h := newBoardHarness(t, thread.Config{})
	th := h.start(alice, "stream 5 50ms")
	h.last(th, "the turn's end", func(m boardMsg) bool { return m.view.Outcome })
	for _, m := range h.board.messages(th) {
		if len(m.view.Actions) > 0 {
			t.Fatalf("%q carries %+v", m.view.Text, m.view.Actions)
		}
	}
}

// A command written to the bot in a thread is served as a slash command
// is; on a platform that can show one user a message alone, its private
// answers are whispered, so the thread shows nothing of them. A message
// that only starts with a command's name is a prompt.
func TestTextCommands_PrivateAnswersAreWhispered(t *testing.T) {
	h := newBoardHarness(t, thread.Config{})
	th := h.start(alice, "hello")
	h.last(th, "the answer", func(m boardMsg) bool { return m.view.Outcome })
	shown := len(h.board.messages(th))
	h.say(th, alice, "@bot status")
	h.say(th, bob, "@bot reset")
	h.say(th, alice, "@bot cancel")
	var got []whisper
	h.await("three whispers", func() bool { got = h.board.whispered(); return len(got) == 3 })
	want := map[string]string{
		"**State**: idle, 0 message(s) queued":                           alice.ID,
		"<@alice> or an approver can @bot reset this thread; you can't.": bob.ID,
		"Nothing is running in this thread.":                             alice.ID,
	}
	for _, w := range got {
		for text, user := range maps.Clone(want) {
			if strings.Contains(w.view.Text, text) && w.user == user && w.where == th {
				delete(want, text)
			}
		}
	}
	if len(want) > 0 {
		t.Fatalf("whispers %+v; none of them says %v", got, want)
	}
	if n := len(h.board.messages(th)); n != shown {
		t.Fatalf("the thread shows %d more messages", n-shown)
	}
	h.say(th, alice, "@bot cancel the build")
	h.last(th, "the prompt answered", func(m boardMsg) bool {
		return m.view.Outcome && strings.Contains(m.view.Text, "You said: cancel the build")
	})
}

// On a platform that does not suggest values as they are typed, model
// without a value lists the choices with a menu of them: the starter's
// choice there changes the model as the command would, and is answered
// in the thread; anyone else is told privately they may not.
func TestChoiceMenus_TheModelIsChosenInAMenu(t *testing.T) {
	h := newBoardHarness(t, thread.Config{ChoiceMenus: true}, "--config-options")
	th := h.start(alice, "hello")
	h.last(th, "the answer", func(m boardMsg) bool { return m.view.Outcome })
	h.say(th, alice, "@bot model")
	var w whisper
	h.await("the model's choices", func() bool {
		got := h.board.whispered()
		if len(got) == 0 {
			return false
		}
		w = got[0]
		return true
	})
	if !strings.Contains(w.view.Text, "**Model**: Fake Small") || len(w.view.Actions) != 1 || w.view.Actions[0].Menu == nil {
		t.Fatalf("model answered %q with %+v", w.view.Text, w.view.Actions)
	}
	menu := w.view.Actions[0]
	var values []string
	for _, o := range menu.Menu.Options {
		values = append(values, o.Value)
		if o.Default != (o.Value == "fake-small") {
			t.Errorf("%s is shown chosen: %v", o.Value, o.Default)
		}
	}
	if strings.Join(values, " ") != "fake-small fake-large fake-huge" {
		t.Fatalf("the menu offers %v", values)
	}
	if got := h.choose(th, menu.ID, bob, 1, "fake-large"); got[0] != "private: <@alice> or an approver can change this thread's agent; you can't." {
		t.Fatalf("bob's choice answered %q", got)
	}
	if got := h.choose(th, menu.ID, alice, 2, "fake-large"); got[0] != "defer" || got[1] != "public: ⚙️ <@alice> set **Model** to **Fake Large**." {
		t.Fatalf("alice's choice answered %q", got)
	}
	if st := h.engine.Status(th); st.Model != "Fake Large" {
		t.Fatalf("the thread's model is %q", st.Model)
	}
}

// Without ChoiceMenus (Discord's way: it suggests as the user types), the
// choices are listed in words alone.
func TestChoiceMenus_NoneUnlessAsked(t *testing.T) {
	h := newBoardHarness(t, thread.Config{}, "--config-options")
	th := h.start(alice, "hello")
	h.last(th, "the answer", func(m boardMsg) bool { return m.view.Outcome })
	h.say(th, alice, "@bot model")
	var got []whisper
	h.await("the model's choices", func() bool { got = h.board.whispered(); return len(got) > 0 })
	if !strings.Contains(got[0].view.Text, "`fake-large`") || len(got[0].view.Actions) != 0 {
		t.Fatalf("model answered %q with %+v", got[0].view.Text, got[0].view.Actions)
	}
}

// A question whose text fields the platform has no form for is
// declined, saying why in the platform's name; nothing is left open.
func TestQuestion_TextFieldsWithoutFormsAreDeclined(t *testing.T) {
	h := newBoardHarness(t, thread.Config{})
	th := h.start(alice, "elicit-form")
	h.last(th, "the answer", func(m boardMsg) bool { return m.view.Outcome && strings.Contains(m.view.Text, "answer: decline") })
	var said string
	for _, m := range h.board.messages(th) {
		said += m.view.Text + "\n"
	}
	if !strings.Contains(said, "can't be shown in Board: it has 2 text fields, and Board has no forms to ask them in") {
		t.Fatalf("the thread reads %q", said)
	}
	if n := h.srv.Stats().OpenQuestions; n != 0 {
		t.Fatalf("open questions = %d", n)
	}
}

// Parse reads a command's words, the last parameter taking the rest of
// the line when it says so; anything that does not fit is no command.
func TestParse(t *testing.T) {
	srv := thread.New(thread.Config{Agents: func() []chat.AgentInfo { return []chat.AgentInfo{{Name: "codex"}, {Name: "claude"}} }}, newBoard(), nil)
	defer srv.Close(time.Second)
	for _, tc := range []struct {
		text, name string
		args       map[string]string
	}{
		{"cancel", "cancel", map[string]string{}},
		{"  Status ", "status", map[string]string{}},
		{"model opus", "model", map[string]string{"value": "opus"}},
		{"model", "model", map[string]string{}},
		{"config effort   high", "config", map[string]string{"option": "effort", "value": "high"}},
		{"agent review HEAD~1  and more", "agent", map[string]string{"name": "review", "input": "HEAD~1  and more"}},
		{"new codex fix the build", "new", map[string]string{"agent": "codex", "prompt": "fix the build"}},
		{"new fix the build", "new", map[string]string{"prompt": "fix the build"}},
		{"cancel the build", "", nil},
		{"model opus please", "", nil},
		{"/cancel", "", nil},
		{"hello", "", nil},
		{"", "", nil},
	} {
		c, ok := srv.Parse(tc.text)
		if ok != (tc.name != "") || c.Name != tc.name || (ok && !maps.Equal(c.Args, tc.args)) {
			t.Errorf("Parse(%q) = %q %v, %v; want %q %v", tc.text, c.Name, c.Args, ok, tc.name, tc.args)
		}
	}
	// With no agent profiles, no word names one: it is the prompt's.
	one := thread.New(thread.Config{}, newBoard(), nil)
	defer one.Close(time.Second)
	if c, ok := one.Parse("new fix the build"); !ok || !maps.Equal(c.Args, map[string]string{"prompt": "fix the build"}) {
		t.Errorf("with no profiles, Parse(new fix the build) = %v, %v", c.Args, ok)
	}
}

// A front end without a Server reads a written command as the Server
// does, from the same table.
func TestParseCommand_ReadsAsTheServerDoes(t *testing.T) {
	isAgent := func(w string) bool { return w == "codex" }
	for _, tc := range []struct {
		text, name string
		args       map[string]string
	}{
		{"cancel ", "cancel", map[string]string{}},
		{"new codex fix it", "new", map[string]string{"agent": "codex", "prompt": "fix it"}},
		{"new claude fix it", "new", map[string]string{"prompt": "claude fix it"}},
		{"queue remove 2", "queue", map[string]string{"remove": "remove 2"}},
		{"frobnicate", "", nil},
		{"status now", "", nil},
	} {
		c, ok := thread.ParseCommand(tc.text, isAgent)
		if ok != (tc.name != "") || c.Name != tc.name || (ok && !maps.Equal(c.Args, tc.args)) {
			t.Errorf("ParseCommand(%q) = %q %v, %v; want %q %v", tc.text, c.Name, c.Args, ok, tc.name, tc.args)
		}
	}
	spec, ok := thread.LookupCommand("STEER")
	if !ok || spec.Written() != "steer [message]" {
		t.Errorf("LookupCommand(STEER) = %+v, %v; written %q", spec, ok, spec.Written())
	}
	if _, ok := thread.LookupCommand("frobnicate"); ok {
		t.Error("LookupCommand(frobnicate) found a command")
	}
}

// memory is a Memory in a map.
type memory struct {
	mu sync.Mutex
	m  map[string]json.RawMessage
}

func (m *memory) PutThreadChat(thread string, record json.RawMessage) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.m[thread] = record
}

func (m *memory) ThreadChat(thread string) (json.RawMessage, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.m[thread]
	return r, ok
}

func (m *memory) ThreadChats() map[string]json.RawMessage {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.m)
}

// Conversation says where a thread was opened and who started it, as the
// Server knows it, or as its Memory kept it; a thread it knows neither
// way is none of its.
func TestConversation_SaysTheChannelAndTheStarter(t *testing.T) {
	mem := &memory{m: map[string]json.RawMessage{"general/9": json.RawMessage(`{"parent":"general","starter":"bob"}`)}}
	h := newBoardHarness(t, thread.Config{Memory: mem})
	th := h.start(alice, "stream 1")
	h.last(th, "the turn's end", func(m boardMsg) bool { return m.view.Outcome })
	if channel, starter, ok := h.srv.Conversation(th); !ok || channel != h.channel || starter != alice.ID {
		t.Errorf("Conversation(%s) = %q, %q, %v", th, channel, starter, ok)
	}
	if channel, starter, ok := h.srv.Conversation("general/9"); !ok || channel != "general" || starter != "bob" {
		t.Errorf("a kept conversation: %q, %q, %v", channel, starter, ok)
	}
	if channel, starter, ok := h.srv.Conversation("general/10"); ok {
		t.Errorf("a thread never opened: %q, %q, %v", channel, starter, ok)
	}
}
