package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// player is what one thread's user does on its platform (Discord's or
// Slack's), each step in that platform's own way, for play.
type player struct {
	rng *rand.Rand
	// who names the user in the soak's counts ("user", "slack user").
	who string
	// busyOneIn: one turn in busyOneIn gets a second message while busy.
	busyOneIn int
	// send posts a prompt (first: the one that opens the thread) and
	// returns the step that cancels its turn; false: the user stops.
	send func(kind, text string, first bool) (cancel func(), ok bool)
	// click clicks the button of the thread's next permission request
	// ("permission") or question ("question").
	click func(what string)
	// model chooses another model for the thread; reset resets it.
	model, reset func()
	// await waits until every prompt of the thread has its outcome.
	await func()
	// rest is what the user does between turns.
	rest func()
}

// play has a thread's user act until the soak's end: a behaviour's
// prompt at a time, at times a second message while busy, a click, a
// cancel, another model or a reset, then waiting for the outcomes.
func (s *soak) play(u player) {
	r := u.rng
	time.Sleep(time.Duration(r.IntN(5000)) * time.Millisecond) // do not all start at once
	for first := true; time.Now().Before(s.end) && !s.aborted.Load(); first = false {
		b := pick(r)
		cancel, ok := u.send(b.name, b.text(r), first)
		if !ok {
			return
		}
		if r.IntN(u.busyOneIn) == 0 { // send while busy
			time.Sleep(time.Duration(r.IntN(1500)) * time.Millisecond)
			if _, ok := u.send("sent while busy", fmt.Sprintf("stream 2 %dms", 50+r.IntN(200)), false); ok {
				s.count(u.who + ": sent while busy")
			}
		}
		switch b.name {
		case "permission clicked":
			u.click("permission")
		case "question answered":
			u.click("question")
		case "hang", "hang ignoring cancel", "stream slowly", "terminal until cancel":
			// Most hangs are cancelled, the rest meet the turn's ceiling;
			// some slow answers are cut short.
			if b.name == "stream slowly" && r.IntN(3) == 0 || b.name != "stream slowly" && r.IntN(3) > 0 {
				time.Sleep(time.Duration(500+r.IntN(2500)) * time.Millisecond)
				cancel()
			}
		}
		if r.IntN(10) == 0 { // another model, during the turn or after it
			u.model()
		}
		if r.IntN(12) == 0 { // reset while busy, or soon after
			time.Sleep(time.Duration(r.IntN(2000)) * time.Millisecond)
			u.reset()
		}
		u.await()
		u.rest()
	}
}

// awaitResolved waits until resolve, which records the outcomes now
// shown, leaves no prompt open; a prompt still open after limit is
// stuck, told to stuck, and the wait fails.
func awaitResolved[P any](ctx context.Context, limit time.Duration, resolve func() []P, stuck func(P)) bool {
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		open := resolve()
		if len(open) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			for _, p := range open {
				stuck(p)
			}
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}
