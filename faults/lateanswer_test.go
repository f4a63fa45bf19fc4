package faults

import (
	"strings"
	"testing"
)

// A late answer to an abandoned prompt never ends the next turn: after a
// prompt times out (turn.timeout = 1s) while its agent is still working
// on it, the two messages queued behind it each show their own complete
// answer, never the abandoned prompt's text and never an empty one. That
// holds whether the agent is killed at the end of the cancel grace or
// answers within it and is kept, on every platform.
func TestLateAnswer_QueuedTurnsShowTheirOwnAnswers(t *testing.T) {
	forEachPlatform(t, func(t *testing.T, platform string) {
		for _, tc := range []struct {
			name, grace string
			// answered: the abandoned prompt's answer arrives within the
			// grace, and is shown where it belongs: in its own turn.
			answered bool
		}{
			{"agent killed after the grace", "500ms", false},
			{"agent answers within the grace", "3s", true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				w, f := newWorldOn(t, platform, setup{conf: settings{"turn.timeout": "1s", "turn.cancel_grace": tc.grace}})
				w.start()
				thread := f.mention(pAlice, "late 2s STALE")
				second := f.post(thread, pAlice, "stream 2")
				third := f.post(thread, pAlice, "stream 3")
				got := f.awaitAnswers(thread, 3)
				if !strings.HasPrefix(got[0].footer, "-# ❌ failed: timed out after 1s") {
					t.Errorf("the abandoned prompt ended with %q", got[0].footer)
				}
				if strings.Contains(got[0].text, "STALE") != tc.answered {
					t.Errorf("the abandoned prompt's own turn shows %q", got[0].text)
				}
				for i, want := range []string{"chunk 1\nchunk 2\n-# ✅ done", "chunk 1\nchunk 2\nchunk 3\n-# ✅ done"} {
					a := got[i+1]
					text, fresh := freshSession(a.text)
					// A killed agent's session is gone: the first message
					// after it is told so, once.
					if wantFresh := i == 0 && !tc.answered; fresh != wantFresh {
						t.Errorf("queued message %d: new-session notice %v, want %v: %q", i+1, fresh, wantFresh, a.text)
					}
					if !strings.HasPrefix(text, want) {
						t.Errorf("queued message %d was answered %q, want %q", i+1, a.text, want)
					}
					for _, bad := range []string{"STALE", "(no response)", "without a written reply"} {
						if strings.Contains(a.text, bad) {
							t.Errorf("queued message %d shows %q: %q", i+1, bad, a.text)
						}
					}
				}
				f.awaitReaction(thread, thread, "❌")
				f.awaitReaction(thread, second, "✅")
				f.awaitReaction(thread, third, "✅")
				if n := len(f.answers(thread)); n != 3 {
					t.Errorf("%d answers for 3 messages", n)
				}
			})
		}
	})
}
