package discord_test

import (
	"slices"
	"strings"
	"testing"

	"acpbroker/internal/fakediscord"
	"acpbroker/pool"
)

// optionAgent is a setup whose fake agent offers options and commands,
// or (legacy) the old session modes instead of a mode option.
func optionAgent(legacy bool) setup {
	args := []string{"--config-options", "--commands"}
	if legacy {
		args = append(args, "--modes")
	}
	return setup{pool: pool.Config{Args: args}}
}

// suggest has u type typed into option focused of /command in thread,
// with the other options given, and returns the values suggested.
func (h *harness) suggest(thread string, u fakediscord.User, command, focused, typed string, others map[string]any) ([]string, []string) {
	h.t.Helper()
	opts := map[string]any{focused: typed}
	for k, v := range others {
		opts[k] = v
	}
	id := h.srv.Autocomplete(thread, u.ID, command, opts, focused)
	var choices []fakediscord.CommandChoice
	h.srv.Await("autocomplete answered", func() bool {
		var ok bool
		choices, ok = h.srv.AutocompleteChoices(id)
		return ok
	})
	var values, names []string
	for _, c := range choices {
		values = append(values, c.Value.(string))
		names = append(names, c.Name)
	}
	return values, names
}

// change has u run a slash command that changes an option, and returns
// what the command's answer says once the agent has answered.
func (h *harness) change(thread string, u fakediscord.User, command string, options map[string]any) string {
	h.t.Helper()
	id := h.srv.SlashCommand(thread, u.ID, command, options)
	r := h.response(id)
	if r.Type != 5 {
		return r.Content
	}
	var text string
	h.srv.Await("the change answered", func() bool {
		in, _ := h.srv.Interaction(id)
		m, ok := h.srv.Message(thread, in.OriginalMessageID)
		text = m.Content
		return ok && m.Flags&fakediscord.FlagLoading == 0 && text != ""
	})
	return text
}

// settings asks the agent what it runs with, in thread.
func (h *harness) settings(thread string, u fakediscord.User) string {
	h.t.Helper()
	n := len(h.botMessages(thread))
	h.srv.SendMessage(thread, u, "settings")
	var got string
	h.srv.Await("settings answered", func() bool {
		msgs := h.botMessages(thread)
		if len(msgs) <= n || !finalFooter(msgs[len(msgs)-1].Content) {
			return false
		}
		for _, m := range msgs[n:] {
			if i := strings.Index(m.Content, "model="); i >= 0 {
				got = strings.SplitN(m.Content[i:], "\n", 2)[0]
				return true
			}
		}
		return false
	})
	return got
}

// /model suggests the models the thread's agent offers, matching what
// is typed; the starter's choice reaches the agent and the thread says
// so; anyone else is refused. /status shows the model and the mode.
func TestOptions_ModelIsSuggestedAndChosen(t *testing.T) {
	h := newHarness(t, optionAgent(false))
	thread := h.mention(alice, "settings")
	h.answer(thread, "model=fake-small")
	values, names := h.suggest(thread, alice, "model", "value", "", nil)
	if !slices.Equal(values, []string{"fake-small", "fake-large", "fake-huge"}) || !strings.Contains(names[0], "(current)") {
		t.Fatalf("suggested %v %v", values, names)
	}
	if values, _ := h.suggest(thread, bob, "model", "value", "LARGE", nil); !slices.Equal(values, []string{"fake-large"}) {
		t.Fatalf("suggested for LARGE: %v", values)
	}
	if got := h.change(thread, carol, "model", map[string]any{"value": "fake-large"}); !strings.Contains(got, "<@"+alice.ID+"> or an approver can change this thread's agent; you can't") {
		t.Fatalf("carol's /model answered %q", got)
	}
	if got := h.change(thread, alice, "model", map[string]any{"value": "fake-large"}); !strings.Contains(got, "set **Model** to **Fake Large**") {
		t.Fatalf("/model answered %q", got)
	}
	if got := h.settings(thread, alice); got != "model=fake-large mode=ask fast=false" {
		t.Fatalf("the agent runs with %q", got)
	}
	if got := h.change(thread, alice, "model", map[string]any{"value": "gpt-none"}); !strings.Contains(got, "was not changed") || !strings.Contains(got, "fake-huge") {
		t.Fatalf("/model with an unoffered value answered %q", got)
	}
	r := h.response(h.srv.SlashCommand(thread, bob.ID, "model", nil))
	if !r.Ephemeral() || !strings.Contains(r.Content, "**Model**: Fake Large") || !strings.Contains(r.Content, "`fake-huge`") {
		t.Fatalf("/model without a value answered %q", r.Content)
	}
	r = h.response(h.srv.SlashCommand(thread, alice.ID, "status", nil))
	if !strings.Contains(r.Content, "**Model**: Fake Large") || !strings.Contains(r.Content, "**Mode**: Ask") {
		t.Fatalf("/status answered %q", r.Content)
	}
	// The option of a type the broker does not know is neither offered
	// nor lost silently.
	if values, _ := h.suggest(thread, alice, "config", "option", "", nil); !slices.Equal(values, []string{"model", "mode", "fast"}) {
		t.Fatalf("/config suggests %v", values)
	}
	if n := h.engine.Stats().Pool.Conn.UnknownConfigOptions; n == 0 {
		t.Fatal("the option of unknown type was not counted")
	}
	h.response(h.srv.SlashCommand(thread, alice.ID, "reset", nil))
	if n := h.engine.Stats().OptionThreads; n != 0 {
		t.Fatalf("OptionThreads after /reset = %d", n)
	}
}

// /config sets a boolean (suggested as on and off) and /mode sets a
// legacy mode; both reach the agent.
func TestOptions_ConfigBooleanAndLegacyMode(t *testing.T) {
	h := newHarness(t, optionAgent(true))
	thread := h.mention(alice, "settings")
	h.answer(thread, "model=fake-small")
	if values, _ := h.suggest(thread, alice, "config", "value", "", map[string]any{"option": "fast"}); !slices.Equal(values, []string{"true", "false"}) {
		t.Fatalf("/config value suggests %v", values)
	}
	if got := h.change(thread, alice, "config", map[string]any{"option": "fast", "value": "true"}); !strings.Contains(got, "set **Fast answers** to **on**") {
		t.Fatalf("/config answered %q", got)
	}
	values, _ := h.suggest(thread, alice, "mode", "value", "", nil)
	if !slices.Equal(values, []string{"ask", "code", "plan"}) {
		t.Fatalf("/mode suggests %v", values)
	}
	if got := h.change(thread, alice, "mode", map[string]any{"value": "plan"}); !strings.Contains(got, "set **Mode** to **Plan**") {
		t.Fatalf("/mode answered %q", got)
	}
	if got := h.settings(thread, alice); got != "model=fake-small mode=plan fast=true" {
		t.Fatalf("the agent runs with %q", got)
	}
	r := h.response(h.srv.SlashCommand(thread, alice.ID, "config", nil))
	if !strings.Contains(r.Content, "`fast` Fast answers: **on**") || !strings.Contains(r.Content, "mode: **Plan**") || strings.Contains(r.Content, "palette") {
		t.Fatalf("/config answered %q", r.Content)
	}
}

// /agent lists the agent's commands and runs one as the thread's next
// prompt; a plain message "/name …" reaches the agent as it is.
func TestOptions_AgentCommandsAreListedAndRun(t *testing.T) {
	h := newHarness(t, optionAgent(false))
	thread := h.mention(alice, "hello")
	h.answer(thread, "✅")
	if values, names := h.suggest(thread, bob, "agent", "name", "", nil); !slices.Equal(values, []string{"review", "init"}) || !strings.Contains(names[0], "Review the current changes") {
		t.Fatalf("/agent suggests %v %v", values, names)
	}
	r := h.response(h.srv.SlashCommand(thread, bob.ID, "agent", nil))
	if !r.Ephemeral() || !strings.Contains(r.Content, "`/review` _what to review_: Review the current changes") || !strings.Contains(r.Content, "`/init`") {
		t.Fatalf("/agent answered %q", r.Content)
	}
	r = h.response(h.srv.SlashCommand(thread, bob.ID, "agent", map[string]any{"name": "review", "input": "the diff"}))
	if r.Ephemeral() || !strings.Contains(r.Content, "ran `/review the diff`") {
		t.Fatalf("/agent review answered %+v", r)
	}
	h.answer(thread, `ran /review with "the diff"`)
	h.srv.SendMessage(thread, alice, "/init now")
	h.answer(thread, `ran /init with "now"`)
	r = h.response(h.srv.SlashCommand(thread, bob.ID, "agent", map[string]any{"name": "deploy"}))
	if !r.Ephemeral() || !strings.Contains(r.Content, "no command `/deploy`") {
		t.Fatalf("/agent deploy answered %q", r.Content)
	}
}

// A change of model or mode the agent makes itself is a line in the
// thread, with options and with the legacy modes.
func TestOptions_AgentsOwnSwitchIsShown(t *testing.T) {
	h := newHarness(t, optionAgent(false))
	thread := h.mention(alice, "switch mode plan")
	h.answer(thread, "switched mode to plan")
	if text := joined(h.botMessages(thread)); !strings.Contains(text, "⚙️ The agent switched mode to Plan\n") || strings.Contains(text, "switched model") {
		t.Fatalf("thread reads %q", text)
	}
	h.srv.SendMessage(thread, alice, "switch model fake-huge")
	h.answer(thread, "switched model to fake-huge")
	if text := joined(h.botMessages(thread)); !strings.Contains(text, "⚙️ The agent switched model to Fake Huge\n") {
		t.Fatalf("thread reads %q", text)
	}
	r := h.response(h.srv.SlashCommand(thread, alice.ID, "status", nil))
	if !strings.Contains(r.Content, "**Model**: Fake Huge") || !strings.Contains(r.Content, "**Mode**: Plan") {
		t.Fatalf("/status answered %q", r.Content)
	}

	h = newHarness(t, optionAgent(true))
	thread = h.mention(alice, "switch mode code")
	h.answer(thread, "switched mode to code")
	if text := joined(h.botMessages(thread)); !strings.Contains(text, "⚙️ The agent switched mode to Code\n") {
		t.Fatalf("legacy modes: thread reads %q", text)
	}
}

// /model and /config while a turn runs are sent at once: the agent's
// answer is the command's, before the turn ends, and the turn shows no
// switch of the agent's own for them; the agent runs with them after.
func TestOptions_ChangedMidTurn(t *testing.T) {
	h := newHarness(t, optionAgent(false))
	thread := h.mention(alice, "settings")
	h.answer(thread, "model=fake-small")
	h.srv.SendMessage(thread, alice, "slow 1s 4")
	h.srv.Await("the turn running", func() bool { return h.engine.Status(thread).Busy })
	if got := h.change(thread, alice, "model", map[string]any{"value": "fake-large"}); !strings.Contains(got, "set **Model** to **Fake Large**") {
		t.Fatalf("/model mid-turn answered %q", got)
	}
	if got := h.change(thread, alice, "config", map[string]any{"option": "fast", "value": "true"}); !strings.Contains(got, "set **Fast answers** to **on**") {
		t.Fatalf("/config mid-turn answered %q", got)
	}
	if !h.engine.Status(thread).Busy {
		t.Fatal("the turn ended before the changes were answered: they were not made mid-turn")
	}
	msgs := h.answer(thread, "chunk 4")
	if text := joined(msgs); strings.Contains(text, "⚙️") {
		t.Fatalf("the user's own changes were shown as the agent's: %q", text)
	}
	if got := h.settings(thread, alice); got != "model=fake-large mode=ask fast=true" {
		t.Fatalf("the agent runs with %q", got)
	}
}

// /model suggests, in each thread, what that thread's agent offers: two
// threads whose agents offer different models get different choices,
// and a choice one offers is refused in the other.
func TestOptions_AutocompleteIsThePerThreadAgents(t *testing.T) {
	profiles := map[string]*pool.Profile{
		"alpha": {Command: fakeAgent, Args: []string{"--config-options"}, WorkDir: t.TempDir(), PerThreadDir: true},
		"beta":  {Command: fakeAgent, Args: []string{"--config-options", "--models", "other-1,other-2"}, WorkDir: t.TempDir(), PerThreadDir: true},
	}
	h := newHarness(t, setup{pool: pool.Config{Profiles: profiles, DefaultProfile: "alpha"}})
	first := h.mention(alice, "settings")
	h.answer(first, "model=fake-small")
	h.slashWith(h.channel, alice, "new", map[string]any{"agent": "beta", "prompt": "settings"})
	second := h.threadOf("started a thread with **beta**")
	h.answer(second, "model=other-1")

	if values, _ := h.suggest(first, alice, "model", "value", "", nil); !slices.Equal(values, []string{"fake-small", "fake-large", "fake-huge"}) {
		t.Fatalf("the first thread suggests %v", values)
	}
	values, names := h.suggest(second, alice, "model", "value", "", nil)
	if !slices.Equal(values, []string{"other-1", "other-2"}) || !strings.Contains(names[0], "(current)") {
		t.Fatalf("the second thread suggests %v %v", values, names)
	}
	if got := h.change(second, alice, "model", map[string]any{"value": "fake-large"}); !strings.Contains(got, "was not changed") {
		t.Fatalf("the first thread's model in the second answered %q", got)
	}
	if got := h.change(second, alice, "model", map[string]any{"value": "other-2"}); !strings.Contains(got, "set **Model** to **other-2**") {
		t.Fatalf("/model other-2 answered %q", got)
	}
	if values, names := h.suggest(first, alice, "model", "value", "", nil); len(values) != 3 || !strings.Contains(names[0], "(current)") {
		t.Fatalf("after the second thread's change, the first suggests %v %v", values, names)
	}
}

// "@bot model VALUE" written in the thread changes the model as /model
// does, answered in the thread.
func TestOptions_ModelWrittenToTheBot(t *testing.T) {
	h := newHarness(t, optionAgent(false))
	thread := h.mention(alice, "settings")
	h.answer(thread, "model=fake-small")
	h.srv.SendMessage(thread, alice, h.srv.Bot().Mention()+" model fake-large")
	h.reply(thread, "set **Model** to **Fake Large**")
	if got := h.settings(thread, alice); got != "model=fake-large mode=ask fast=false" {
		t.Fatalf("the agent runs with %q", got)
	}
}
