package discord

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"acpbroker/chat/thread"

	"github.com/bwmarrin/discordgo"
)

// errRenameLimited: Discord allows two renames of a channel per ten
// minutes, and this one would have had to wait.
var errRenameLimited = errors.New("renames of this thread are rate limited")

// Rename implements thread.Renamer. It never waits in discordgo's rate
// limiter, which would sleep until the window ends (ten minutes, for
// renames) whatever the Client's life: a rename Discord's limit puts
// off is a *thread.RateLimited at once, with how long Discord asks to
// wait if it says.
func (p *platform) Rename(ctx context.Context, where, title string) error {
	c := p.client()
	rl := c.s.Ratelimiter
	b := rl.GetBucket(discordgo.EndpointChannel(where))
	if !b.TryLock() {
		return &thread.RateLimited{Err: errRenameLimited} // another call holds it, maybe waiting
	}
	if wait := rl.GetWaitTime(b, 1); wait > 0 {
		b.Unlock()
		return &thread.RateLimited{After: wait, Err: errRenameLimited}
	}
	b.Remaining--
	body, err := json.Marshal(discordgo.ChannelEdit{Name: title})
	if err != nil {
		b.Release(nil)
		return err
	}
	locked := true
	err = c.callOnce(ctx, func(opts ...discordgo.RequestOption) error {
		locked = false // released by the request, whatever it answers
		opts = append(opts, discordgo.WithRestRetries(0), discordgo.WithRetryOnRatelimit(false))
		_, err := c.s.RequestWithLockedBucket(http.MethodPatch, discordgo.EndpointChannel(where), "application/json", body, b, 0, opts...)
		return err
	})
	if locked {
		b.Release(nil)
	}
	return err
}
