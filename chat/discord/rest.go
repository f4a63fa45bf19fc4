package discord

import (
	"context"
	"errors"
	"time"

	"github.com/bwmarrin/discordgo"
)

// errGaveUp marks a call abandoned after too many rate limits.
var errGaveUp = errors.New("rate limited too many times")

// call makes one REST request bounded by the request timeout and the
// Client's life. Call it with f doing the discordgo call with the options
// given.
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

// retryAfter reports how long a rate-limited call asks to wait.
func retryAfter(err error) (time.Duration, bool) {
	var rl *discordgo.RateLimitError
	if !errors.As(err, &rl) || rl.TooManyRequests == nil {
		return 0, false
	}
	return max(rl.RetryAfter, 50*time.Millisecond), true
}

// do is call with rate limits honoured: a 429 waits its retry_after (a
// wait the Client's end interrupts) and tries again, up to tries times.
func (c *Client) do(ctx context.Context, tries int, f func(opts ...discordgo.RequestOption) error) error {
	for i := 0; ; i++ {
		err := c.call(ctx, f)
		wait, limited := retryAfter(err)
		if !limited {
			return err
		}
		if i+1 >= tries {
			return errGaveUp
		}
		if !c.sleep(ctx, wait) {
			return context.Cause(ctx)
		}
	}
}

// sleep waits d; false if ctx or the Client ended first.
func (c *Client) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-c.ctx.Done():
		return false
	}
}

// send posts a message, honouring rate limits.
func (c *Client) send(ctx context.Context, channel string, m *discordgo.MessageSend) (*discordgo.Message, error) {
	var out *discordgo.Message
	err := c.do(ctx, 20, func(opts ...discordgo.RequestOption) error {
		var err error
		out, err = c.s.ChannelMessageSendComplex(channel, m, opts...)
		return err
	})
	return out, err
}

// react adds the bot's reaction, honouring rate limits; failures are only
// logged, a reaction is decoration.
func (c *Client) react(channel, message, emoji string) {
	err := c.do(c.ctx, 5, func(opts ...discordgo.RequestOption) error {
		return c.s.MessageReactionAdd(channel, message, emoji, opts...)
	})
	if err != nil {
		c.log.Debug().Err(err).Str("emoji", emoji).Msg("reaction not added")
	}
}

func (c *Client) unreact(channel, message, emoji string) {
	err := c.do(c.ctx, 5, func(opts ...discordgo.RequestOption) error {
		return c.s.MessageReactionRemove(channel, message, emoji, "@me", opts...)
	})
	if err != nil {
		c.log.Debug().Err(err).Str("emoji", emoji).Msg("reaction not removed")
	}
}
