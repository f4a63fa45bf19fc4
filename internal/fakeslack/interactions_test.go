package fakeslack_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/fakeslack"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
)

func askModal(title string) slack.ModalViewRequest {
	input := slack.NewInputBlock("prompt_block", text("Prompt"), nil,
		slack.NewPlainTextInputBlockElement(text("ask…"), "prompt"))
	choice := slack.NewInputBlock("model_block", text("Model"), nil,
		slack.NewOptionsSelectBlockElement("static_select", text("pick"), "model",
			slack.NewOptionBlockObject("fast", text("Fast"), nil), slack.NewOptionBlockObject("deep", text("Deep"), nil)))
	return slack.ModalViewRequest{
		Type:       slack.VTModal,
		Title:      text(title),
		Submit:     text("Ask"),
		Close:      text("Cancel"),
		CallbackID: "ask",
		Blocks:     slack.Blocks{BlockSet: []slack.Block{input, choice}},
	}
}

func TestModalOpenedSubmittedWithErrorsThenClosed(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{})
	triggers := make(chan string, 4)
	submissions := make(chan slack.InteractionCallback, 4)
	ackWith := make(chan any, 4)
	runBot(t, w.srv, func(c *socketmode.Client, ev socketmode.Event) {
		cb, _ := ev.Data.(slack.InteractionCallback)
		switch cb.Type {
		case slack.InteractionTypeBlockActions:
			c.Ack(*ev.Request)
			triggers <- cb.TriggerID
		case slack.InteractionTypeViewSubmission:
			submissions <- cb
			select {
			case payload := <-ackWith:
				c.Ack(*ev.Request, payload)
			case <-time.After(10 * time.Second):
			}
		default:
			c.Ack(*ev.Request)
		}
	})
	_, ts, err := w.api.PostMessage(w.general.ID, slack.MsgOptionBlocks(
		slack.NewActionBlock("acts", slack.NewButtonBlockElement("ask", "", text("Ask…")))))
	if err != nil {
		t.Fatal(err)
	}
	w.srv.ClickButton(w.general.ID, ts, w.alice.ID, "ask")
	trigger := recv(t, triggers)

	if _, err := w.api.OpenView(trigger, askModal(strings.Repeat("t", 25))); slackErr(t, err) != "invalid_arguments" {
		t.Errorf("a 25-character title: %v", err)
	}
	longSubmit := askModal("Ask")
	longSubmit.Submit = text(strings.Repeat("s", 25))
	if _, err := w.api.OpenView(trigger, longSubmit); slackErr(t, err) != "invalid_arguments" {
		t.Errorf("a 25-character submit: %v", err)
	}
	opened, err := w.api.OpenView(trigger, askModal("Ask the agent"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.api.OpenView(trigger, askModal("Again")); slackErr(t, err) != "exchanged_trigger_id" {
		t.Errorf("a trigger used twice: %v", err)
	}
	if _, err := w.api.OpenView("123.456.abc", askModal("Again")); slackErr(t, err) != "invalid_trigger_id" {
		t.Errorf("a made-up trigger: %v", err)
	}
	v, ok := w.srv.OpenView(w.alice.ID)
	if !ok || v.ID != opened.ID || v.Title != "Ask the agent" || v.CallbackID != "ask" || opened.RootViewID != opened.ID {
		t.Fatalf("open view = %+v (opened %+v)", v, opened.View)
	}

	ackWith <- slack.NewErrorsViewSubmissionResponse(map[string]string{"prompt_block": "say more"})
	id := w.srv.SubmitView(v.ID, w.alice.ID, map[string]any{"prompt": "hi", "model": "deep"})
	sub := recv(t, submissions)
	if got := sub.View.State.Values["prompt_block"]["prompt"].Value; got != "hi" {
		t.Errorf("prompt = %q", got)
	}
	if got := sub.View.State.Values["model_block"]["model"].SelectedOption.Value; got != "deep" {
		t.Errorf("model = %q", got)
	}
	if sub.View.CallbackID != "ask" || sub.View.ID != v.ID || sub.User.ID != w.alice.ID {
		t.Errorf("view_submission = %+v", sub.View)
	}
	if env := w.srv.AwaitAck(id); !env.Acked || env.AckError != "" {
		t.Errorf("envelope = %+v", env)
	}
	if v, _ := w.srv.OpenView(w.alice.ID); v.ID != opened.ID || v.Errors["prompt_block"] != "say more" {
		t.Errorf("after errors: %+v", v)
	}

	ackWith <- nil
	id = w.srv.SubmitView(v.ID, w.alice.ID, map[string]any{"prompt_block": "hi, at length", "model": "fast"})
	recv(t, submissions)
	w.srv.AwaitAck(id)
	if _, open := w.srv.OpenView(w.alice.ID); open {
		t.Error("the modal is still open after a plain acknowledgement")
	}
	if all := w.srv.Views(w.alice.ID); len(all) != 1 || all[0].Open || all[0].ClosedBy != "submitted" {
		t.Errorf("views = %+v", all)
	}
}

func TestTriggerExpiresAndViewStackIsThreeDeep(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{TriggerLifetime: time.Second})
	triggers := make(chan string, 8)
	runBot(t, w.srv, func(c *socketmode.Client, ev socketmode.Event) {
		c.Ack(*ev.Request)
		if cb, ok := ev.Data.(slack.InteractionCallback); ok {
			triggers <- cb.TriggerID
		}
		if cmd, ok := ev.Data.(slack.SlashCommand); ok {
			triggers <- cmd.TriggerID
		}
	})
	w.srv.SlashCommand(w.general.ID, w.alice.ID, "/ask", "")
	late := recv(t, triggers)
	time.Sleep(1200 * time.Millisecond)
	if _, err := w.api.OpenView(late, askModal("Late")); slackErr(t, err) != "expired_trigger_id" {
		t.Errorf("a trigger past its lifetime: %v", err)
	}

	withButton := askModal("Deeper and deeper")
	withButton.Blocks.BlockSet = append(withButton.Blocks.BlockSet, slack.NewActionBlock("more", slack.NewButtonBlockElement("deeper", "", text("Deeper"))))
	w.srv.SlashCommand(w.general.ID, w.alice.ID, "/ask", "")
	root, err := w.api.OpenView(recv(t, triggers), withButton)
	if err != nil {
		t.Fatal(err)
	}
	top := root.ID
	for i := range 3 {
		w.srv.ClickViewButton(top, w.alice.ID, "deeper")
		trigger := recv(t, triggers)
		pushed, err := w.api.PushView(trigger, withButton)
		if i == 2 {
			if slackErr(t, err) != "push_limit_reached" {
				t.Errorf("a fourth view: %v", err)
			}
			break
		}
		if err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
		if pushed.PreviousViewID != top || pushed.RootViewID != root.ID {
			t.Errorf("pushed view %+v", pushed.View)
		}
		top = pushed.ID
	}
	if _, err := w.api.OpenView(late, askModal("x")); err == nil {
		t.Error("an old trigger opened a view")
	}
	w.srv.CloseView(top, w.alice.ID)
	if v, _ := w.srv.OpenView(w.alice.ID); v.PreviousID != root.ID {
		t.Errorf("after closing the top view, the user sees %+v", v)
	}
}

func TestUpdateViewByIDWithHash(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{})
	triggers := make(chan string, 2)
	runBot(t, w.srv, func(c *socketmode.Client, ev socketmode.Event) {
		c.Ack(*ev.Request)
		triggers <- ev.Data.(slack.SlashCommand).TriggerID
	})
	w.srv.SlashCommand(w.dm.ID, w.alice.ID, "/ask", "")
	v, err := w.api.OpenView(recv(t, triggers), askModal("First"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.api.UpdateView(askModal("Second"), "", "0.stale", v.ID); slackErr(t, err) != "hash_conflict" {
		t.Errorf("a stale hash: %v", err)
	}
	up, err := w.api.UpdateView(askModal("Second"), "", v.Hash, v.ID)
	if err != nil || up.Title.Text != "Second" || up.Hash == v.Hash {
		t.Fatalf("update = %+v, %v", up, err)
	}
	if got, _ := w.srv.View(v.ID); got.Title != "Second" || got.Updates != 1 {
		t.Errorf("view = %+v", got)
	}
	if _, err := w.api.UpdateView(askModal("x"), "", "", "V-none"); slackErr(t, err) != "not_found" {
		t.Errorf("an unknown view: %v", err)
	}
}

func TestSlashCommandAnswerAndResponseURL(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{})
	urls := make(chan string, 4)
	runBot(t, w.srv, func(c *socketmode.Client, ev socketmode.Event) {
		switch d := ev.Data.(type) {
		case slack.SlashCommand:
			c.Ack(*ev.Request, map[string]any{"text": "on it"})
			urls <- d.ResponseURL
		case slack.InteractionCallback:
			c.Ack(*ev.Request)
			urls <- d.ResponseURL
		default:
			c.Ack(*ev.Request)
		}
	})
	id := w.srv.SlashCommand(w.general.ID, w.alice.ID, "/ask", "why")
	rurl := recv(t, urls)
	if env := w.srv.AwaitAck(id); !env.Acked || env.Kind != "/ask" {
		t.Errorf("envelope = %+v", env)
	}
	if eph := w.srv.Ephemerals(w.alice.ID); len(eph) != 1 || eph[0].Text != "on it" {
		t.Errorf("ephemerals = %+v", eph)
	}
	if _, _, err := w.api.PostMessage("", slack.MsgOptionResponseURL(rurl, slack.ResponseTypeInChannel), slack.MsgOptionText("done", false)); err != nil {
		t.Fatal(err)
	}
	if msgs := w.srv.Messages(w.general.ID); len(msgs) != 1 || msgs[0].Text != "done" || !msgs[0].FromBot() {
		t.Errorf("messages = %+v", msgs)
	}

	// A button on an ephemeral message: its response_url replaces it.
	ephTS, err := w.api.PostEphemeral(w.general.ID, w.bob.ID, slack.MsgOptionBlocks(
		slack.NewActionBlock("a", slack.NewButtonBlockElement("ok", "1", text("OK")))))
	if err != nil {
		t.Fatal(err)
	}
	w.srv.ClickButton(w.general.ID, ephTS, w.bob.ID, "ok")
	rurl = recv(t, urls)
	if _, _, err := w.api.PostMessage("", slack.MsgOptionReplaceOriginal(rurl), slack.MsgOptionText("thanks", false)); err != nil {
		t.Fatal(err)
	}
	if eph := w.srv.Ephemerals(w.bob.ID); len(eph) != 1 || eph[0].Text != "thanks" || eph[0].Replaced != 1 {
		t.Errorf("bob's ephemerals = %+v", eph)
	}
	for i := range 4 {
		if _, _, err := w.api.PostMessage("", slack.MsgOptionResponseURL(rurl, slack.ResponseTypeEphemeral), slack.MsgOptionText("more", false)); err != nil {
			t.Fatalf("use %d: %v", i+2, err)
		}
	}
	if _, _, err := w.api.PostMessage("", slack.MsgOptionResponseURL(rurl, slack.ResponseTypeEphemeral), slack.MsgOptionText("too many", false)); err == nil {
		t.Error("a sixth use of a response_url worked")
	}
}

func TestChooseOptionInAMessage(t *testing.T) {
	t.Parallel()
	w := newWorld(t, fakeslack.Options{})
	b := runBot(t, w.srv, nil)
	_, ts, err := w.api.PostMessage(w.general.ID, slack.MsgOptionBlocks(slack.NewActionBlock("pick",
		slack.NewOptionsSelectBlockElement("static_select", text("Mode"), "mode",
			slack.NewOptionBlockObject("plan", text("Plan"), nil), slack.NewOptionBlockObject("act", text("Act"), nil)))))
	if err != nil {
		t.Fatal(err)
	}
	w.srv.ChooseOption(w.general.ID, ts, w.alice.ID, "mode", "act")
	ev := b.next(t, func(ev socketmode.Event) bool { return ev.Type == socketmode.EventTypeInteractive })
	cb := ev.Data.(slack.InteractionCallback)
	acts := cb.ActionCallback.BlockActions
	if len(acts) != 1 || acts[0].ActionID != "mode" || acts[0].BlockID != "pick" || acts[0].SelectedOption.Value != "act" {
		raw, _ := json.Marshal(acts)
		t.Errorf("actions = %s", raw)
	}
}
