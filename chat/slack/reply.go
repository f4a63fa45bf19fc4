package slack

import (
	"context"
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

	mu     sync.Mutex
	posted thread.Origin
	err    error // why Public posted nothing
}

var _ thread.Reply = (*reply)(nil)

// replyTries bounds the rate-limited tries of an answer.
const replyTries = 5

// Private implements thread.Reply.
func (r *reply) Private(ctx context.Context, v thread.View) {
	c := r.c
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
func (r *reply) Ack(context.Context) {}

// Defer implements thread.Reply: Slack had its acknowledgement; Public
// answers.
func (r *reply) Defer(context.Context) {}

// triggerLife is how long a trigger_id opens a modal.
const triggerLife = 3 * time.Second

// Form implements thread.Reply: a modal, opened with the event's
// trigger_id within its 3 seconds; a rate limit is waited out only
// while it is good.
func (r *reply) Form(ctx context.Context, f thread.Form) {
	c := r.c
	view := modal(f, formMeta{Where: r.where, Channel: r.channel, ThreadTS: r.threadTS})
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
