package slack_test

import (
	"strings"
	"testing"

	"acpbroker/internal/fakeslack"
	"acpbroker/pool"
)

// optionAgent is a setup whose fake agent offers options and commands.
func optionAgent() setup {
	return setup{pool: pool.Config{Args: []string{"--config-options", "--commands"}}}
}

// settings asks the agent what it runs with.
func (h *harness) settings(c conv, u fakeslack.User) string {
	h.t.Helper()
	n := len(h.botMessages(c))
	h.say(c, u, "settings")
	var got string
	h.srv.Await("settings answered", func() bool {
		msgs := h.botMessages(c)
		if len(msgs) <= n || !finalFooter(text(msgs[len(msgs)-1])) {
			return false
		}
		for _, m := range msgs[n:] {
			if i := strings.Index(text(m), "model="); i >= 0 {
				got = strings.SplitN(text(m)[i:], "\n", 2)[0]
				return true
			}
		}
		return false
	})
	return got
}

// menuShown waits for the message shown to u alone that carries a menu
// and says want, and returns it with the menu's action id.
func (h *harness) menuShown(u fakeslack.User, want string) (fakeslack.Ephemeral, element) {
	h.t.Helper()
	var found fakeslack.Ephemeral
	var menu element
	h.srv.Await(u.Name+" shown a menu", func() bool {
		for _, e := range h.srv.Ephemerals(u.ID) {
			if !strings.Contains(shown(e.Blocks, e.Text), want) {
				continue
			}
			for _, el := range elements(e.Blocks) {
				if el.Type == "static_select" {
					found, menu = e, el
					return true
				}
			}
		}
		return false
	})
	return found, menu
}

// "@app model" lists the models the thread's agent offers with a menu of
// them, shown to the writer alone; the starter's choice there changes
// the model (answered in the thread), anyone else's is refused
// privately; "@app model VALUE" changes it too; "@app mode" and "@app
// config" offer their menus as well.
func TestOptions_ChosenInAMenuOrWritten(t *testing.T) {
	h := newHarness(t, optionAgent())
	c := h.mention(h.alice, "settings")
	h.answer(c, "model=fake-small")

	h.command(c, h.alice, "model")
	eph, menu := h.menuShown(h.alice, "*Model*: Fake Small")
	var values []string
	for _, o := range menu.Options {
		values = append(values, o.Value)
	}
	if strings.Join(values, " ") != "fake-small fake-large fake-huge" || menu.InitialOption == nil || menu.InitialOption.Value != "fake-small" {
		t.Fatalf("the menu offers %v (chosen %+v)", values, menu.InitialOption)
	}
	h.command(c, h.carol, "model")
	carolEph, carolMenu := h.menuShown(h.carol, "*Model*")
	h.acked(h.srv.ChooseOption(c.channel, carolEph.TS, h.carol.ID, carolMenu.ActionID, "fake-huge"))
	h.whispered(h.carol, "@Alice or an approver can change this thread's agent; you can't")

	h.acked(h.srv.ChooseOption(c.channel, eph.TS, h.alice.ID, menu.ActionID, "fake-large"))
	h.said(c, "@Alice set *Model* to *Fake Large*")
	if got := h.settings(c, h.alice); got != "model=fake-large mode=ask fast=false" {
		t.Fatalf("the agent runs with %q", got)
	}

	h.command(c, h.alice, "model fake-huge")
	h.said(c, "set *Model* to *Fake Huge*")
	h.command(c, h.alice, "mode")
	h.menuShown(h.alice, "*Mode*: Ask")
	h.command(c, h.alice, "config fast")
	h.menuShown(h.alice, "*Fast answers*")
	if got := h.settings(c, h.alice); got != "model=fake-huge mode=ask fast=false" {
		t.Fatalf("the agent runs with %q", got)
	}
}
