package chat

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"
)

// Sleep waits d; false if ctx ended or stop closed first. A platform
// passes its own end as stop, so that no wait outlives it.
func Sleep(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	}
}

// Waits between tries to connect to a platform: doubling from the first
// to the last, or what a rate limit asks.
const (
	ConnectRetryFirst = time.Second
	ConnectRetryMost  = 30 * time.Second
)

// Connect calls attempt until it succeeds or says its failure will not
// pass (final: the platform refused the bot's token or settings), and
// returns that failure. A failure that may pass (a rate limit, a 5xx, a
// network error) is logged as msg and tried again after a wait that
// doubles from ConnectRetryFirst to ConnectRetryMost, or after what
// retryAfter reads in the failure; ctx ending or stop closing during a
// wait returns nil: the broker is stopping.
//
// The loop is ours, not cenkalti/backoff's Retry: that one starts the
// doubling over after a Retry-After and logs a RetryAfterError in place
// of the failure it stands for, where a rate limit here leaves the
// doubling as it was and the log names what failed.
func Connect(ctx context.Context, stop <-chan struct{}, log *zerolog.Logger, msg string,
	retryAfter func(error) (time.Duration, bool), attempt func() (final bool, err error)) error {
	wait := ConnectRetryFirst
	for try := 1; ; try++ {
		final, err := attempt()
		if err == nil || final {
			return err
		}
		next := wait
		if d, ok := retryAfter(err); ok {
			next = d
		} else {
			wait = min(2*wait, ConnectRetryMost)
		}
		log.Warn().Err(err).Int("try", try).Dur("retry_in", next).Msg(msg)
		if !Sleep(ctx, stop, next) {
			return nil
		}
	}
}

// ErrGaveUp marks a call abandoned after too many rate limits.
var ErrGaveUp = errors.New("rate limited too many times")

// MinRetryAfter is the least wait after a rate limit: one that says 0
// would otherwise be tried again at once, in a loop, against the same
// limit.
const MinRetryAfter = 50 * time.Millisecond

// Retry makes f's platform call, waiting out its rate limits (the wait
// retryAfter reads in its error) up to tries calls in all; past them it
// returns the last error marked ErrGaveUp. A wait that ctx or stop ends
// returns ctx's cause.
func Retry(ctx context.Context, stop <-chan struct{}, tries int, retryAfter func(error) (time.Duration, bool), f func(ctx context.Context) error) error {
	for try := 1; ; try++ {
		err := f(ctx)
		wait, limited := retryAfter(err)
		if !limited {
			return err
		}
		if try >= tries {
			return fmt.Errorf("%w: %w", ErrGaveUp, err)
		}
		if !Sleep(ctx, stop, wait) {
			return context.Cause(ctx)
		}
	}
}
