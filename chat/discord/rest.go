package discord

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"acpbroker/chat"
	"acpbroker/chat/thread"

	"github.com/bwmarrin/discordgo"
)

// call makes one REST request bounded by the request timeout, ctx and
// the Client's life. Call it with f doing the discordgo call with the
// options given.
func (c *Client) call(ctx context.Context, f func(opts ...discordgo.RequestOption) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()
	err := f(discordgo.WithContext(ctx))
	c.mu.Lock()
	c.stats.RESTCalls++
	var rl *discordgo.RateLimitError
	if errors.As(err, &rl) {
		c.stats.RateLimited++
	}
	c.mu.Unlock()
	return err
}

// callOnce is call with Discord's errors told in package thread's terms:
// a 429 is a *thread.RateLimited, a 404 matches thread.ErrNotFound.
func (c *Client) callOnce(ctx context.Context, f func(opts ...discordgo.RequestOption) error) error {
	return told(c.call(ctx, f))
}

// told is a Discord error in package thread's terms.
func told(err error) error {
	if wait, ok := retryAfter(err); ok {
		return &thread.RateLimited{After: wait, Err: err}
	}
	if notFound(err) {
		return fmt.Errorf("%w: %w", thread.ErrNotFound, err)
	}
	return err
}

// retryAfter reports how long a rate-limited call asks to wait.
func retryAfter(err error) (time.Duration, bool) {
	var rl *discordgo.RateLimitError
	if !errors.As(err, &rl) || rl.TooManyRequests == nil {
		return 0, false
	}
	return max(rl.RetryAfter, chat.MinRetryAfter), true
}

func notFound(err error) bool {
	var rest *discordgo.RESTError
	return errors.As(err, &rest) && rest.Response != nil && rest.Response.StatusCode == http.StatusNotFound
}

// do is call with rate limits honoured: a 429 waits its retry_after (a
// wait the Client's end interrupts) and tries again, up to tries times.
func (c *Client) do(ctx context.Context, tries int, f func(opts ...discordgo.RequestOption) error) error {
	return c.doWhile(ctx, func(try int, _ time.Duration) error {
		if try >= tries {
			return chat.ErrGaveUp
		}
		return nil
	}, f)
}

// doWhile is call with rate limits honoured while more allows: after the
// try-th call met a 429 asking to wait, more returns nil to wait and try
// again, or the error to give up with.
func (c *Client) doWhile(ctx context.Context, more func(try int, wait time.Duration) error, f func(opts ...discordgo.RequestOption) error) error {
	for try := 1; ; try++ {
		err := c.call(ctx, f)
		wait, limited := retryAfter(err)
		if !limited {
			return err
		}
		if err := more(try, wait); err != nil {
			return err
		}
		if !c.sleep(ctx, wait) {
			return context.Cause(ctx)
		}
	}
}

// sleep waits d; false if ctx or the Client ended first.
func (c *Client) sleep(ctx context.Context, d time.Duration) bool {
	return chat.Sleep(ctx, c.ctx.Done(), d)
}

// reactionGap spaces the reactions of one channel: discordgo holds them
// to one per 200ms per channel, Discord to about one per 250ms.
const reactionGap = 250 * time.Millisecond

// lane serialises one channel's reaction calls. discordgo queues them on a
// bucket mutex and sleeps there, which nothing can interrupt: with many
// turns in one channel a shutdown would wait minutes. Here they wait in
// line with a wait that ctx interrupts, so at most one per channel is
// ever inside discordgo.
type lane struct {
	turn  chan struct{} // holds a token while a call is made
	users int
	last  time.Time
}

// enterLane waits for the channel's lane; it returns false, holding
// nothing, when ctx ends or the Client is giving up.
func (c *Client) enterLane(ctx context.Context, channel string) (*lane, bool) {
	c.mu.Lock()
	l := c.lanes[channel]
	if l == nil {
		l = &lane{turn: make(chan struct{}, 1)}
		c.lanes[channel] = l
	}
	l.users++
	c.mu.Unlock()
	select {
	case l.turn <- struct{}{}:
	case <-ctx.Done():
		c.leaveLane(channel, l, false)
		return nil, false
	case <-c.ctx.Done():
		c.leaveLane(channel, l, false)
		return nil, false
	}
	if wait := reactionGap - time.Since(l.last); wait > 0 && !c.sleep(ctx, wait) {
		c.leaveLane(channel, l, true)
		return nil, false
	}
	return l, true
}

func (c *Client) leaveLane(channel string, l *lane, held bool) {
	if held {
		l.last = time.Now()
		<-l.turn
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.users--; l.users == 0 {
		delete(c.lanes, channel)
	}
}
