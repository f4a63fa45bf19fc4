package broker

import (
	"time"
)

// agent on the same clock, so that the shutdown takes what one agent is
// allowed, however many there are and whatever they do.
type stopPlan struct {
	// answerBy ends the wait for the agents' answers to the cancel of
	// their turns; the turns end then at the latest.
	answerBy time.Time
	// goneBy ends the agents' stop: stdin closed, then SIGTERM, each
	// with half of what is left; every agent still there is killed then.
	goneBy time.Time
}

// planStop plans a shutdown from now to deadline: the last words' share
// of it is kept for posting how each turn ended, and the rest is split
// in three steps of at most agent.exit_grace each (exitGrace): the wait
// for the answer to the cancel (at most turn.cancel_grace, cancelGrace,
// too), the wait after stdin is closed, the wait after SIGTERM. At the
// defaults (15s, 10s, 2s) every agent is gone within 6s.
func planStop(now, deadline time.Time, cancelGrace, exitGrace time.Duration) stopPlan {
	total := deadline.Sub(now)
	step := max(min(exitGrace, (total-lastWordsShare(total))/3), 0)
	answer := min(cancelGrace, step)
	return stopPlan{answerBy: now.Add(answer), goneBy: now.Add(answer + 2*step)}
}

// lastWordsShare is the part of the shutdown time kept from the agents'
// steps for posting how each turn ended and closing the chat connection:
// a quarter, at least 2s and at most 5s, never all of it.
func lastWordsShare(total time.Duration) time.Duration {
	return min(max(total/4, 2*time.Second), 5*time.Second, total/2)
}
