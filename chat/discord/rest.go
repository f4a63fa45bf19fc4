package discord

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/bwmarrin/discordgo"
)

// errGaveUp marks a call abandoned after too many rate limits.
var errGaveUp = errors.New("rate limited too many times")

// errClosing: the Client is closing and starts nothing more.
var errClosing = errors.New("the Discord client is closing")

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
	return max(rl.RetryAfter, minRetryAfter), true
}

// minRetryAfter is the least wait after a 429: one that says 0 would
// otherwise be tried again at once, in a loop, against the same limit.
const minRetryAfter = 50 * time.Millisecond

// do is call with rate limits honoured: a 429 waits its retry_after (a
// wait the Client's end interrupts) and tries again, up to tries times.
func (c *Client) do(ctx context.Context, tries int, f func(opts ...discordgo.RequestOption) error) error {
	return c.doWhile(ctx, func(try int, _ time.Duration) error {
		if try >= tries {
			return errGaveUp
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

// reactionGap spaces the reactions of one channel: discordgo holds them
// to one per 200ms per channel, Discord to about one per 250ms.
const reactionGap = 250 * time.Millisecond

// lane serialises one channel's reaction calls. discordgo queues them on a
// bucket mutex and sleeps there, which nothing can interrupt: with many
// turns in one channel a shutdown would wait minutes. Here they wait in
// line with a wait that the Client's end interrupts, so at most one per
// channel is ever inside discordgo.
type lane struct {
	turn  chan struct{} // holds a token while a call is made
	users int
	last  time.Time
}

// enterLane waits for the channel's lane; it returns false, holding
// nothing, when the Client is giving up.
func (c *Client) enterLane(channel string) (*lane, bool) {
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
	case <-c.decor.Done():
		c.leaveLane(channel, l, false)
		return nil, false
	}
	if wait := reactionGap - time.Since(l.last); wait > 0 && !c.sleep(c.decor, wait) {
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

// reaction adds or removes the bot's reaction in the channel's lane;
// failures are logged, and returned for callers that try again.
func (c *Client) reaction(add bool, channel, message, emoji string) error {
	l, ok := c.enterLane(channel)
	if !ok {
		return context.Cause(c.decor)
	}
	defer c.leaveLane(channel, l, true)
	err := c.do(c.decor, 5, func(opts ...discordgo.RequestOption) error {
		if add {
			return c.s.MessageReactionAdd(channel, message, emoji, opts...)
		}
		return c.s.MessageReactionRemove(channel, message, emoji, "@me", opts...)
	})
	if err != nil {
		c.log.Debug().Err(err).Str("emoji", emoji).Bool("add", add).Msg("reaction not changed")
	}
	return err
}

func (c *Client) react(channel, message, emoji string) error {
	return c.reaction(true, channel, message, emoji)
}

func (c *Client) unreact(channel, message, emoji string) error {
	return c.reaction(false, channel, message, emoji)
}

// postAsk posts a question of a turn's (a permission request, the
// agent's question) whose ctx may end while the post is on its way. The
// post itself is the Client's, so that a message Discord took is always
// known; the turn waits for it no longer than ctx. When ctx ends first,
// postAsk returns ctx's cause at once, and the message, once posted, is
// edited to closed(cause) (with its buttons taken off).
func (c *Client) postAsk(ctx context.Context, thread string, m *discordgo.MessageSend, closed func(cause error) string) (*discordgo.Message, error) {
	type posted struct {
		msg *discordgo.Message
		err error
	}
	done := make(chan posted, 1)
	abandoned := make(chan struct{})
	var once sync.Once
	closeOnce := func(id string) { once.Do(func() { c.closeAsk(thread, id, closed(context.Cause(ctx))) }) }
	started := c.spawnLate(func() {
		msg, err := c.send(c.ctx, thread, m)
		done <- posted{msg, err}
		select {
		case <-abandoned:
			if err == nil {
				closeOnce(msg.ID)
			}
		default:
		}
	})
	if !started {
		return nil, errClosing
	}
	select {
	case p := <-done:
		return p.msg, p.err
	case <-ctx.Done():
	}
	close(abandoned)
	select {
	case p := <-done: // posted as ctx ended: the poster may have returned
		if p.err == nil {
			c.spawnLate(func() { closeOnce(p.msg.ID) })
		}
	default:
	}
	return nil, context.Cause(ctx)
}

// closeAsk edits a question's message to closed, taking its buttons off.
func (c *Client) closeAsk(thread, id, closed string) {
	err := c.call(c.ctx, func(opts ...discordgo.RequestOption) error {
		e := discordgo.NewMessageEdit(thread, id).SetContent(closed)
		e.Components = &[]discordgo.MessageComponent{}
		e.AllowedMentions = noMentions
		_, err := c.s.ChannelMessageEditComplex(e, opts...)
		return err
	})
	if err != nil {
		c.log.Debug().Err(err).Msg("closed question not updated")
	}
}
