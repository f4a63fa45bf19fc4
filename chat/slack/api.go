package slack

import (
	"context"
	"errors"
	"fmt"
	"time"

	"acpbroker/chat"
	"acpbroker/chat/thread"

	slackapi "github.com/slack-go/slack"
)

// call makes one Web API call of method (about channel, for a method
// Slack limits per channel) within RequestTimeout, ctx and the Client's
// life, once Slack's limits allow it: a call the budget holds back is
// not made, and returns at once a *thread.RateLimited saying how long
// to wait. urgent calls (an answer's final view) may spend what the
// budget keeps back from the others. A 429 Slack answers is counted and
// closes the method's budget for its Retry-After. f makes the call with
// the ctx given.
func (c *Client) call(ctx context.Context, method, channel string, urgent bool, f func(ctx context.Context) error) error {
	if wait := c.budget.take(method, channel, urgent, time.Now()); wait > 0 {
		c.count(&c.stats.Throttled)
		return &thread.RateLimited{After: wait, Err: fmt.Errorf("%w: %s", errThrottled, method)}
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()
	err := f(ctx)
	c.mu.Lock()
	c.stats.APICalls++
	wait, limited := slackRetryAfter(err)
	if limited {
		c.stats.RateLimited++
	}
	c.mu.Unlock()
	if limited {
		c.budget.block(method, channel, time.Now().Add(wait))
	}
	return told(err)
}

// errThrottled: the call would have gone past Slack's limits.
var errThrottled = errors.New("held back to stay within Slack's rate limits")

// do is call with rate limits waited out (a wait ctx and the Client's end
// interrupt), up to tries calls in all.
func (c *Client) do(ctx context.Context, method, channel string, tries int, f func(ctx context.Context) error) error {
	return c.tryWait(ctx, tries, func(ctx context.Context) error { return c.call(ctx, method, channel, false, f) })
}

// tryWait makes f's call, waiting out its rate limits, up to tries
// calls.
func (c *Client) tryWait(ctx context.Context, tries int, f func(ctx context.Context) error) error {
	return chat.Retry(ctx, c.ctx.Done(), tries, retryAfter, f)
}

// notFoundErrors are Slack's errors that say what a call names is not
// there (or, for a thread, not one the app can read).
var notFoundErrors = map[string]bool{
	"message_not_found": true, "thread_not_found": true, "channel_not_found": true,
	"cant_update_message": true, "cant_delete_message": true, "invalid_thread_ts": true,
}

// told is a Slack error in package thread's terms: a 429 is a
// *thread.RateLimited, an error saying the thing named is not there
// matches thread.ErrNotFound.
func told(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*thread.RateLimited](err); ok {
		return err
	}
	if wait, ok := slackRetryAfter(err); ok {
		return &thread.RateLimited{After: wait, Err: err}
	}
	if notFoundErrors[slackError(err)] {
		return fmt.Errorf("%w: %w", thread.ErrNotFound, err)
	}
	return err
}

// slackError is the error code of Slack's {"ok": false} answer, or "".
func slackError(err error) string {
	if se, ok := errors.AsType[slackapi.SlackErrorResponse](err); ok {
		return se.Err
	}
	if se, ok := errors.AsType[*slackapi.SlackErrorResponse](err); ok {
		return se.Err
	}
	return ""
}

// slackRetryAfter reports how long a call Slack answered 429 asks to
// wait.
func slackRetryAfter(err error) (time.Duration, bool) {
	rl, ok := errors.AsType[*slackapi.RateLimitedError](err)
	if !ok {
		return 0, false
	}
	return max(rl.RetryAfter, chat.MinRetryAfter), true
}

// retryAfter reports how long a call told by call asks to wait: Slack's
// 429 or the budget's.
func retryAfter(err error) (time.Duration, bool) {
	if rl, ok := errors.AsType[*thread.RateLimited](err); ok {
		return max(rl.After, chat.MinRetryAfter), true
	}
	return slackRetryAfter(err)
}
