package discord

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/bwmarrin/discordgo"
)

// maxTitle is the most characters of a channel name.
const maxTitle = 100

// retitling is a thread's rename state while a rename is under way or
// within RetitleInterval of the last one; the entry goes when that time
// has passed with no newer title.
type retitling struct {
	want    string      // the newest title not yet applied ("": none)
	applied string      // the last title applied
	busy    bool        // a rename call is being made
	timer   *time.Timer // the end of the wait after the last rename
}

// retitle names thread after the agent's title for its session: at once
// if the thread was not renamed within RetitleInterval, else when that
// has passed, with the newest title given meanwhile. It never blocks.
func (c *Client) retitle(thread, title string) {
	title = titleName(title)
	if title == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.titles[thread]
	if r == nil {
		r = &retitling{}
		c.titles[thread] = r
	}
	if title == r.applied {
		r.want = ""
		return
	}
	r.want = title
	if !r.busy && r.timer == nil {
		c.startRenameLocked(thread, r)
	}
}

// startRenameLocked makes the rename call for r.want on a goroutine the
// Client owns, or forgets the thread when the Client is closing.
func (c *Client) startRenameLocked(thread string, r *retitling) {
	if c.waiting {
		delete(c.titles, thread)
		return
	}
	title := r.want
	r.want, r.busy = "", true
	c.wg.Go(func() { c.rename(thread, title) })
}

// rename makes one rename call, then waits RetitleInterval (or what
// Discord asks, if more) before the next. A rename Discord's limit put
// off is made after the wait, unless a newer title came meanwhile; one
// that failed otherwise is given up.
func (c *Client) rename(thread, title string) {
	wait, err := c.patchName(thread, title)
	limited := wait > 0 || errors.Is(err, errRenameLimited)
	wait = max(wait, c.cfg.RetitleInterval)
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.titles[thread]
	if r == nil {
		return
	}
	r.busy = false
	switch {
	case err == nil:
		r.applied = title
		c.log.Info().Str("thread", thread).Str("title", title).Msg("thread renamed after the agent's title")
	case limited && r.want == "":
		r.want = title // tried again after the wait, unless a newer one comes
		c.log.Debug().Err(err).Str("thread", thread).Msg("thread rename waits for Discord's limit")
	case !limited:
		c.log.Warn().Err(err).Str("thread", thread).Str("title", title).Msg("thread not renamed")
	}
	if c.waiting {
		delete(c.titles, thread)
		return
	}
	r.timer = time.AfterFunc(wait, func() { c.renameDue(thread) })
}

// renameDue ends the wait after a rename: the newest title given
// meanwhile is applied, or the thread's entry goes.
func (c *Client) renameDue(thread string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.titles[thread]
	if r == nil {
		return
	}
	r.timer = nil
	if r.want == "" {
		delete(c.titles, thread)
		return
	}
	c.startRenameLocked(thread, r)
}

// errRenameLimited: Discord allows two renames of a channel per ten
// minutes, and this one would have had to wait.
var errRenameLimited = errors.New("renames of this thread are rate limited")

// patchName renames the thread, unless Discord's limit says to wait: it
// never waits in discordgo's rate limiter, which would sleep until the
// window ends (ten minutes, for renames) whatever the Client's life. It
// returns how long Discord asks to wait, if it does.
func (c *Client) patchName(thread, title string) (time.Duration, error) {
	rl := c.s.Ratelimiter
	b := rl.GetBucket(discordgo.EndpointChannel(thread))
	if !b.TryLock() {
		return 0, errRenameLimited // another call holds it, maybe waiting
	}
	if wait := rl.GetWaitTime(b, 1); wait > 0 {
		b.Unlock()
		return wait, errRenameLimited
	}
	b.Remaining--
	body, err := json.Marshal(discordgo.ChannelEdit{Name: title})
	if err != nil {
		b.Release(nil)
		return 0, err
	}
	locked := true
	err = c.call(c.ctx, func(opts ...discordgo.RequestOption) error {
		locked = false // released by the request, whatever it answers
		opts = append(opts, discordgo.WithRestRetries(0), discordgo.WithRetryOnRatelimit(false))
		_, err := c.s.RequestWithLockedBucket(http.MethodPatch, discordgo.EndpointChannel(thread), "application/json", body, b, 0, opts...)
		return err
	})
	if locked {
		b.Release(nil)
	}
	wait, _ := retryAfter(err)
	return wait, err
}

// stopRetitles drops the waits between renames, at Close.
func (c *Client) stopRetitles() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for thread, r := range c.titles {
		if r.timer != nil {
			r.timer.Stop()
			delete(c.titles, thread)
		}
	}
}

// titleName makes an agent's title a channel name: one line, without
// control characters, at most maxTitle characters; "" if nothing is left.
func titleName(title string) string {
	title = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return ' '
		}
		return r
	}, title)
	title = strings.Join(strings.Fields(title), " ")
	if r := []rune(title); len(r) > maxTitle {
		title = strings.TrimSpace(string(r[:maxTitle-1])) + "…"
	}
	return title
}
