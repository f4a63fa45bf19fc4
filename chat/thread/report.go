package thread

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"acpbroker/chat"
)

// Report tells each thread of a turn the broker was working on when it
// last stopped, once ready is closed (the platform is connected):
// which of its messages the broker did not finish, in words, and that
// message's status mark shows the failure. A turn that ended, and whose
// end the thread already shows, is not told again: only its mark is
// settled. reported is called for each turn dealt with; one whose
// notice could not be posted is left for the next start. It does not
// block.
func (s *Server) Report(ready <-chan struct{}, turns []chat.Interruption, reported func(uint64)) {
	if len(turns) == 0 {
		return
	}
	// A thread's turns are looked at in order: each claims the first
	// outcome after its prompt that no earlier turn of the thread claims.
	turns = slices.Clone(turns)
	slices.SortStableFunc(turns, func(a, b chat.Interruption) int { return cmp.Compare(a.ID, b.ID) })
	s.spawnLate(func() {
		select {
		case <-ready:
		case <-s.ctx.Done():
			return
		}
		claimed := map[string]map[string]bool{} // by thread: messages showing other turns
		for _, it := range turns {
			where, msg, link, ok := s.p.Locate(it.Ref)
			if !ok {
				where, msg, link = "", "", ""
			}
			taken := claimed[it.Thread]
			if taken == nil {
				taken = map[string]bool{}
				claimed[it.Thread] = taken
			}
			for _, w := range it.Elsewhere {
				taken[w] = true
			}
			if it.Outcome != "" && msg != "" {
				if shown := s.outcomeShown(it.Thread, msg, taken); shown != "" {
					// It ended and the thread shows it: the broker died
					// before noting so. At most the status mark lags.
					s.log.Info().Str("thread", it.Thread).Uint64("turn", it.ID).Str("message", shown).Msg("the thread already shows how the turn ended")
					taken[shown] = true
					reported(it.ID)
					s.settle(where, msg, outcomeMark(it.Outcome))
					continue
				}
			}
			text := "⚠️ " + chat.InterruptionText(it)
			if link != "" {
				text += "\n-# " + link
			}
			if _, err := s.post(s.ctx, it.Thread, View{Text: text}); err != nil {
				s.log.Warn().Err(err).Str("thread", it.Thread).Msg("interrupted turn not reported; will try at the next start")
				continue
			}
			reported(it.ID)
			if msg != "" {
				s.settle(where, msg, MarkFailed)
			}
		}
	})
}

// outcomeShown finds the message that shows how the turn of the prompt
// message ended: a message of the bot's after the prompt, posted before
// this process began, that shows an outcome, and which does not show
// another turn's (taken: an earlier turn, still being shown when the
// prompt was sent, can end in a message after it). A thread shows its
// turns in order, so the first such message is this turn's; a later
// turn's, posted since, does not count. When the platform cannot tell,
// the answer is none (the thread is told again rather than not at all).
func (s *Server) outcomeShown(thread, prompt string, taken map[string]bool) string {
	var msgs []Past
	err := s.try(s.ctx, 3, func(ctx context.Context) (err error) {
		msgs, err = s.p.History(ctx, thread, prompt)
		return err
	})
	if err != nil {
		s.log.Debug().Err(err).Str("thread", thread).Msg("could not read the thread to find a turn's outcome")
		return ""
	}
	for _, m := range msgs {
		if !m.At.Before(s.born) {
			continue
		}
		if m.Mine && !taken[m.ID] && m.Outcome {
			return m.ID
		}
	}
	return ""
}

// ShowsOutcome reports whether a message's text (the broker's Markdown,
// as the Server posted it) says how a turn ended: its last line is a
// turn's footer, or it says the answer could not be shown. The line
// shown while a turn is being stopped is no such line, nor is a
// permission request's or a question's closing line (who chose what).
// For a platform that keeps the text it was given, to tell Past.Outcome.
func ShowsOutcome(text string) bool {
	text = strings.TrimSpace(text)
	if strings.HasPrefix(text, markPermission) || strings.HasPrefix(text, markQuestion) {
		return false
	}
	last := text[strings.LastIndexByte(text, '\n')+1:]
	if strings.HasPrefix(last, "-# ⏹️ "+stoppingPrefix) {
		return false
	}
	for _, mark := range []string{"✅", "❌", "⏹️", emojiFinishedOther} {
		if strings.HasPrefix(last, "-# "+mark) {
			return true
		}
	}
	first, _, _ := strings.Cut(text, "\n")
	return strings.HasPrefix(first, emojiLost+" ") && strings.Contains(first, " kept failing while this answer was being shown")
}

// outcomeMark is the status mark of a turn that ended so.
func outcomeMark(state string) Mark {
	switch state {
	case "done":
		return MarkDone
	case "cancelled":
		return MarkCancelled
	default:
		return MarkFailed
	}
}

// settle leaves mark as the bot's only status mark on a prompt's
// message, whatever an earlier process left there.
func (s *Server) settle(where, id string, mark Mark) {
	var marks []Mark
	err := s.try(s.ctx, 3, func(ctx context.Context) (err error) {
		marks, err = s.p.Marks(ctx, where, id)
		return err
	})
	mine := map[Mark]bool{}
	if err != nil {
		// Unknown: take off those a running turn puts there.
		mine[MarkQueued], mine[MarkWorking] = true, true
	} else {
		for _, m := range marks {
			mine[m] = true
		}
	}
	for _, m := range []Mark{MarkQueued, MarkWorking, MarkDone, MarkFailed, MarkCancelled} {
		if mine[m] && m != mark {
			s.mark(where, id, m, false)
		}
	}
	if !mine[mark] {
		s.mark(where, id, mark, true)
	}
}
