package slack

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"acpbroker/chat/thread"

	slackapi "github.com/slack-go/slack"
)

// reply answers one interaction or slash command as package thread says,
// through the Web API: Slack had its acknowledgement as it came, within
// its 3 seconds, whatever the answer is. Private is a message to the
// user alone (chat.postEphemeral, in the thread; the response_url when
// that fails), Public a message in the thread (or, for a command, in
// the channel), Update the clicked message changed, Form a modal opened
// with the event's trigger_id while it is good.
type reply struct {
	c           *Client
	user        string
	channel     string // where the event came from
	where       string // the thread, or the channel
	threadTS    string // the thread's ts ("" in a channel)
	message     string // the message clicked ("" for a command or a modal)
	ephemeral   bool   // the message clicked is shown to the user alone
	responseURL string
	trigger     string
	at          time.Time // when the event came
	// form, for a modal's submission, is its acknowledgement, held
	// back until the Server answers: every answer but Invalid closes
	// the modal first.
	form *formAck

	mu     sync.Mutex
	posted thread.Origin
	err    error // why Public posted nothing
}

var (
	_ thread.Reply      = (*reply)(nil)
	_ thread.FormErrors = (*reply)(nil)
)

// formAck is the acknowledgement of a modal's submission, which Slack
// takes within 3 seconds of it: with errors by block, it keeps the
// modal open and shows them; empty, it closes the modal. The first of
// the Server's answer and formAckWait sends it, once.
type formAck struct {
	mu   sync.Mutex
	sent bool
	ch   chan json.RawMessage // buffered: the one acknowledgement
}

// formAckWait is how long a modal's submission waits for the Server's
// answer: Slack gives 3 seconds.
const formAckWait = 2500 * time.Millisecond

func newFormAck() *formAck { return &formAck{ch: make(chan json.RawMessage, 1)} }

// send gives the acknowledgement payload (nil: close the modal), if none
// was given yet, and reports whether it did.
func (a *formAck) send(payload json.RawMessage) bool {
	if a == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sent {
		return false
	}
	a.sent = true
	a.ch <- payload
	return true
}

// wait returns the acknowledgement's payload once it is given, or, from
// formAckWait after at (or once ctx ends), nil: the modal closes.
func (a *formAck) wait(ctx context.Context, at time.Time) json.RawMessage {
	t := time.NewTimer(time.Until(at.Add(formAckWait)))
	defer t.Stop()
	select {
	case p := <-a.ch:
		return p
	case <-t.C:
	case <-ctx.Done():
	}
	a.send(nil)
	return <-a.ch
}

// Invalid implements thread.FormErrors: the problems shown under their
// fields in the modal, kept open, while its acknowledgement is still
// held back.
func (r *reply) Invalid(_ context.Context, problems map[string]string) bool {
	if r.form == nil {
		return false
	}
	errs := map[string]string{}
	for id, p := range problems {
		errs[fieldBlock+id] = label(p, formErrorRunes)
	}
	payload, _ := json.Marshal(map[string]any{"response_action": "errors", "errors": errs})
	return r.form.send(payload)
}

// formErrorRunes bounds an error shown under a modal's field.
const formErrorRunes = 300

// closeForm lets a modal's submission close the modal, if it has not.
func (r *reply) closeForm() { r.form.send(nil) }

// replyTries bounds the rate-limited tries of an answer.
const replyTries = 5

// Private implements thread.Reply.
func (r *reply) Private(ctx context.Context, v thread.View) {
	c := r.c
	r.closeForm()
	err := c.tryWait(ctx, replyTries, func(ctx context.Context) error { return c.whisper(ctx, r.where, r.user, v) })
	if err == nil {
		return
	}
	if r.responseURL == "" {
		c.log.Warn().Err(err).Str("user", r.user).Msg("private answer not shown")
		return
	}
	set, fallback := blocks(c.unping(v.Text), v.Actions, r.where)
	err2 := c.tryWait(ctx, replyTries, func(ctx context.Context) error {
		return c.call(ctx, "response_url", "", false, func(ctx context.Context) error {
			_, _, err := c.api.PostMessageContext(ctx, "", slackapi.MsgOptionResponseURL(r.responseURL, slackapi.ResponseTypeEphemeral),
				slackapi.MsgOptionText(fallback, false), slackapi.MsgOptionBlocks(set...))
			return err
		})
	})
	if err2 != nil {
		c.log.Warn().Err(errors.Join(err, err2)).Str("user", r.user).Msg("private answer not shown")
	}
}

// Public implements thread.Reply: a message in the thread, or in the
// channel, that says who gave the command (its metadata), for a thread
// opened from it to know its starter.
func (r *reply) Public(ctx context.Context, text string) {
	c := r.c
	r.closeForm()
	var ts string
	err := c.tryWait(ctx, replyTries, func(ctx context.Context) (err error) {
		ts, err = c.post(ctx, r.where, thread.View{Text: text}, map[string]any{metaBy: r.user})
		return err
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.err = err
		c.log.Warn().Err(err).Str("user", r.user).Msg("public answer not shown")
		return
	}
	r.posted = thread.Origin{Where: r.where, ID: ts, Ref: ref(r.channel, ts, r.threadTS)}
}

// errNotPosted: Public was not called, or posted nothing.
var errNotPosted = errors.New("the answer was not posted")

// Posted implements thread.Reply: the message Public posted.
func (r *reply) Posted(context.Context) (thread.Origin, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.posted.ID != "":
		return r.posted, nil
	case r.err != nil:
		return thread.Origin{}, r.err
	}
	return thread.Origin{}, errNotPosted
}

// Update implements thread.Reply: the clicked message shows v instead
// (through the response_url for a message the user alone sees).
func (r *reply) Update(ctx context.Context, v thread.View) {
	c := r.c
	r.closeForm()
	var err error
	switch {
	case r.message == "":
		return
	case r.ephemeral:
		set, fallback := blocks(c.unping(v.Text), v.Actions, r.where)
		err = c.tryWait(ctx, replyTries, func(ctx context.Context) error {
			return c.call(ctx, "response_url", "", false, func(ctx context.Context) error {
				_, _, err := c.api.PostMessageContext(ctx, "", slackapi.MsgOptionReplaceOriginal(r.responseURL),
					slackapi.MsgOptionText(fallback, false), slackapi.MsgOptionBlocks(set...))
				return err
			})
		})
	default:
		err = c.tryWait(ctx, replyTries, func(ctx context.Context) error {
			return (*platform)(c).Edit(ctx, r.where, r.message, v)
		})
	}
	if err != nil {
		c.log.Warn().Err(err).Str("user", r.user).Msg("the clicked message was not changed")
	}
}

// Ack implements thread.Reply: Slack had its acknowledgement.
func (r *reply) Ack(context.Context) { r.closeForm() }

// Defer implements thread.Reply: Slack had its acknowledgement; Public
// answers.
func (r *reply) Defer(context.Context) { r.closeForm() }

// triggerLife is how long a trigger_id opens a modal.
const triggerLife = 3 * time.Second

// Form implements thread.Reply: a modal, opened with the event's
// trigger_id within its 3 seconds; a rate limit is waited out only
// while it is good.
func (r *reply) Form(ctx context.Context, f thread.Form) {
	c := r.c
	r.closeForm()
	view := modal(f, formMeta{Where: r.where, Channel: r.channel, ThreadTS: r.threadTS, Message: r.message})
	by := r.at.Add(triggerLife)
	for {
		err := c.call(ctx, "views.open", "", true, func(ctx context.Context) error {
			_, err := c.api.OpenViewContext(ctx, r.trigger, view)
			return err
		})
		wait, limited := retryAfter(err)
		switch {
		case err == nil:
			return
		case !limited || time.Now().Add(wait).After(by):
			c.log.Warn().Err(err).Str("user", r.user).Msg("form not opened")
			r.Private(ctx, thread.View{Text: "⚠️ The form could not be opened (" + label(err.Error(), 200) + "); try again."})
			return
		}
		if !c.sleep(ctx, wait) {
			return
		}
	}
}
