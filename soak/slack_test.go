package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakeslack"
)

// The soak's Slack: threads of their own in the same broker, beside
// Discord's, whose users do what Discord's do with Slack's controls (the
// Cancel button, 🛑, "@app cancel", "@app reset", "@app model"), against
// a fake Slack with its real rate limits, random 429s and 5xxs, and
// Socket Mode connections cut or told to refresh. The same invariants
// hold: one outcome per prompt, no thread stuck, the gauges back to
// zero.

// slackThread is one Slack thread of the soak and its user.
type slackThread struct {
	ts      string // the message it hangs from
	starter fakeslack.User
	rng     *rand.Rand
	prompts []*slackPrompt // guarded by soak.mu
}

// slackPrompt is one message a Slack user sent, and what became of it.
type slackPrompt struct {
	ts, thread string
	behaviour  string
	sent       time.Time

	// guarded by soak.mu
	acked     bool
	lost      bool
	stuck     bool
	outcome   string // the final status emoji (as brokertest names it), once resolved
	outcomeAt time.Time
}

// slackSide is the soak's state about Slack.
type slackSide struct {
	sl      *brokertest.Slack
	threads []*slackThread
	prompts []*slackPrompt
}

// slackReactionGrace is how long after its outcome message a Slack
// prompt's final status reaction may come: reactions are a workspace's,
// reactions.remove about 20 a minute for every thread at once.
const slackReactionGrace = 90 * time.Second

// slackUser plays one Slack thread's user until the soak's end.
func (s *soak) slackUser(ctx context.Context, th *slackThread) {
	r := th.rng
	s.play(player{
		rng:       r,
		who:       "slack user",
		busyOneIn: 5,
		send: func(kind, text string, first bool) (func(), bool) {
			p, ok := s.slackSend(th, kind, text, first)
			return func() { s.slackCancel(th, p) }, ok
		},
		click: func(what string) {
			if what == "permission" {
				s.slackClick(ctx, th, what, brokertest.PermissionPrefix+" *Permission needed*", "Allow")
			} else {
				s.slackClick(ctx, th, what, "🔗 *The agent asks you to open a link*", "Done")
			}
		},
		model: func() { s.slackCommand(th, "model "+models[r.IntN(len(models))]) },
		reset: func() { s.slackCommand(th, "reset") },
		await: func() { s.awaitSlackOutcomes(ctx, th, 240*time.Second) },
		rest:  func() { time.Sleep(time.Duration(2000+r.IntN(4000)) * time.Millisecond) },
	})
}

// slackSend posts a prompt (the first mentions the app in the channel
// and opens the thread).
func (s *soak) slackSend(th *slackThread, kind, text string, first bool) (*slackPrompt, bool) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	sl := s.slack.sl
	p := &slackPrompt{behaviour: kind, sent: time.Now()}
	if first {
		p.ts = sl.Srv.PostMessage(sl.Channel, th.starter.ID, sl.Srv.Bot().Mention()+" "+text)
		th.ts = p.ts
		s.mu.Lock()
		s.slack.threads = append(s.slack.threads, th)
		s.mu.Unlock()
	} else {
		p.ts = sl.Post(th.ts, th.starter, text)
	}
	if p.ts == "" {
		s.violate("slack thread %s: the fake Slack did not take a message", th.ts)
		return nil, false
	}
	p.thread = th.ts
	s.mu.Lock()
	th.prompts = append(th.prompts, p)
	s.slack.prompts = append(s.slack.prompts, p)
	s.events["slack behaviour: "+kind]++
	s.mu.Unlock()
	return p, true
}

// slackCommand has the thread's starter write a command to the app.
func (s *soak) slackCommand(th *slackThread, command string) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	name, _, _ := strings.Cut(command, " ")
	s.count("slack user: @app " + name)
	s.slack.sl.Command(th.ts, th.starter, command)
}

// slackCancel stops a prompt's turn: the Cancel button on the running
// answer, a 🛑 on the prompt, or "@app cancel".
func (s *soak) slackCancel(th *slackThread, p *slackPrompt) {
	sl := s.slack.sl
	switch th.rng.IntN(3) {
	case 0:
		msgs := sl.BotMessages(th.ts)
		for i := len(msgs) - 1; i >= 0; i-- {
			if id, ok := brokertest.SlackButton(msgs[i].Blocks, "Cancel"); ok {
				s.gate.RLock()
				s.count("slack user: Cancel button")
				sl.Srv.ClickButton(sl.Channel, msgs[i].TS, th.starter.ID, id)
				s.gate.RUnlock()
				return
			}
		}
		fallthrough // nothing shown yet to carry the button
	case 1:
		s.gate.RLock()
		s.count("slack user: 🛑 reaction")
		sl.Srv.AddReaction(sl.Channel, p.ts, th.starter.ID, "octagonal_sign")
		s.gate.RUnlock()
	default:
		s.slackCommand(th, "cancel")
	}
}

// slackClick waits for the thread's next message starting with prefix
// and carrying buttons, and clicks its button labelled label.
func (s *soak) slackClick(ctx context.Context, th *slackThread, what, prefix, label string) {
	sl := s.slack.sl
	is := func(m fakeslack.Message) bool { return m.FromBot() && strings.HasPrefix(sl.Text(m), prefix) }
	seen := map[string]bool{}
	for _, m := range sl.Srv.Thread(sl.Channel, th.ts) {
		if is(m) {
			seen[m.TS] = true
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var req fakeslack.Message
	err := sl.Srv.WaitFor(wctx, func() bool {
		for _, m := range sl.Srv.Thread(sl.Channel, th.ts) {
			if is(m) && !seen[m.TS] && len(brokertest.SlackElements(m.Blocks)) > 0 {
				req = m
				return true
			}
		}
		return false
	})
	if err != nil {
		s.count("slack user: " + what + " not seen (turn ended first)")
		return
	}
	id, ok := brokertest.SlackButton(req.Blocks, label)
	if !ok {
		s.count("slack user: " + what + " without a " + label + " button")
		return
	}
	s.gate.RLock()
	defer s.gate.RUnlock()
	if m, _ := sl.Srv.Message(sl.Channel, req.TS); len(brokertest.SlackElements(m.Blocks)) == 0 {
		s.count("slack user: " + what + " closed before the click")
		return
	}
	s.count("slack user: " + what + " clicked")
	sl.Srv.ClickButton(sl.Channel, req.TS, th.starter.ID, id)
}

// slackState reads what the thread shows about a prompt: its final
// status reactions, and whether it still shows queued or working.
func (s *soak) slackState(p *slackPrompt) (finals []string, busy, acked bool) {
	sl := s.slack.sl
	for _, e := range sl.BotReactions(sl.Channel, p.ts) {
		acked = true
		switch {
		case brokertest.Final(e):
			finals = append(finals, e)
		case e == brokertest.Queued || e == brokertest.Working:
			busy = true
		}
	}
	if !acked {
		// A prompt refused or answered shows it in the thread too: the
		// reactions may trail.
		for _, m := range sl.Srv.Thread(sl.Channel, p.thread) {
			if m.FromBot() && m.TS > p.ts {
				acked = true
				break
			}
		}
	}
	return finals, busy, acked
}

// slackOutcomeMessages are the app's messages in a thread that end a
// prompt: final footers, refusals and restart notices.
func (s *soak) slackOutcomeMessages(thread string) []outcomeMessage {
	sl := s.slack.sl
	var out []outcomeMessage
	for _, m := range sl.BotMessages(thread) {
		text := sl.Text(m)
		at := m.Posted
		if !m.Edited.IsZero() {
			at = m.Edited
		}
		if f := brokertest.Footer(text); f != "" {
			out = append(out, outcomeMessage{f, at})
		} else if strings.HasPrefix(text, "⚠️") && !strings.Contains(text, "was not changed") {
			first, _, _ := strings.Cut(text, "\n")
			out = append(out, outcomeMessage{first, at})
		}
	}
	return out
}

// slackResolve records the outcomes now shown and returns the prompts
// still open (lost prompts count as closed).
func (s *soak) slackResolve(th *slackThread) []*slackPrompt {
	s.mu.Lock()
	ps := slices.Clone(th.prompts)
	s.mu.Unlock()
	shown := s.slackOutcomeMessages(th.ts)
	var open []*slackPrompt
	i := 0
	for _, p := range ps {
		finals, busy, acked := s.slackState(p)
		s.mu.Lock()
		done, lost, stuck := p.outcome != "", p.lost, p.stuck
		s.mu.Unlock()
		if lost && !acked && len(finals) == 0 {
			continue
		}
		var message *outcomeMessage
		if i < len(shown) {
			message = &shown[i]
		}
		i++
		if done || stuck {
			continue
		}
		switch {
		case len(finals) > 0 && !busy:
			if len(finals) > 1 {
				s.violate("slack prompt %s in thread %s (%s) has %d outcomes: %v", p.ts, p.thread, p.behaviour, len(finals), finals)
			}
			s.mu.Lock()
			p.outcome, p.outcomeAt, p.acked = finals[0], time.Now(), true
			s.mu.Unlock()
		case message != nil && time.Since(message.at) > slackReactionGrace:
			s.mu.Lock()
			p.outcome, p.outcomeAt = shownOnly, message.at
			s.mu.Unlock()
		default:
			open = append(open, p)
		}
	}
	return open
}

// awaitSlackOutcomes waits until every prompt of the thread has its
// outcome; one without after limit is a stuck thread.
func (s *soak) awaitSlackOutcomes(ctx context.Context, th *slackThread, limit time.Duration) bool {
	sl := s.slack.sl
	return awaitResolved(ctx, limit, func() []*slackPrompt { return s.slackResolve(th) }, func(p *slackPrompt) {
		s.mu.Lock()
		p.stuck = true
		s.mu.Unlock()
		s.violate("slack thread %s stuck: prompt %s (%s, sent %s after the start) has no outcome after %s; reactions %v",
			th.ts, p.ts, p.behaviour, p.sent.Sub(s.start).Round(time.Millisecond), limit, sl.BotReactions(sl.Channel, p.ts))
	})
}

// slackUnacked are the Slack prompts the broker has not shown it took.
func (s *soak) slackUnacked() []*slackPrompt {
	s.mu.Lock()
	ps := slices.Clone(s.slack.prompts)
	s.mu.Unlock()
	var out []*slackPrompt
	for _, p := range ps {
		s.mu.Lock()
		acked := p.acked
		s.mu.Unlock()
		if acked {
			continue
		}
		if _, _, a := s.slackState(p); a {
			s.mu.Lock()
			p.acked = true
			s.mu.Unlock()
			continue
		}
		out = append(out, p)
	}
	return out
}

// markSlackLost marks the Slack prompts still unacknowledged at a kill:
// the event may have been acknowledged by the broker killed before it
// was taken, and Slack does not send it again.
func (s *soak) markSlackLost() {
	unacked := s.slackUnacked()
	s.mu.Lock()
	for _, p := range unacked {
		p.lost = true
	}
	s.mu.Unlock()
}

// slackFaults cuts the Socket Mode connections, or tells them to
// refresh, now and then.
func (s *soak) slackFaults(ctx context.Context) {
	r := rand.New(rand.NewPCG(s.k.seed, 0x51ac))
	for {
		t := time.NewTimer(s.k.dropEvery/2 + time.Duration(r.Int64N(int64(s.k.dropEvery))))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if r.IntN(2) == 0 {
			s.slack.sl.Srv.DropConnections()
			s.count("fault: Socket Mode connection cut")
		} else {
			s.slack.sl.Srv.RefreshConnections()
			s.count("fault: Socket Mode refresh")
		}
	}
}

// slackProbe sends every Slack thread a last prompt, which must be
// answered.
func (s *soak) slackProbe(ctx context.Context) {
	var wg sync.WaitGroup
	s.mu.Lock()
	threads := slices.Clone(s.slack.threads)
	s.mu.Unlock()
	for _, th := range threads {
		wg.Go(func() {
			if !s.awaitSlackOutcomes(ctx, th, 240*time.Second) {
				return
			}
			p, ok := s.slackSend(th, "final probe", "stream 2 10ms", false)
			if !ok || !s.awaitSlackOutcomes(ctx, th, 240*time.Second) {
				return
			}
			s.mu.Lock()
			outcome := p.outcome
			s.mu.Unlock()
			if outcome != brokertest.Done {
				s.violate("slack thread %s: the final probe %s ended %s, want %s", th.ts, p.ts, outcome, brokertest.Done)
			}
		})
	}
	wg.Wait()
}

// slackCheckOutcomes checks, once everything is quiet, that each Slack
// thread shows one outcome message per prompt and every prompt's status
// reaction is final, exactly one, with no ⏳ or ⚙️ left; and that Slack
// heard an acknowledgement of every envelope in time.
func (s *soak) slackCheckOutcomes(ctx context.Context) {
	sl := s.slack.sl
	s.mu.Lock()
	threads := slices.Clone(s.slack.threads)
	s.mu.Unlock()
	// The status reactions trail the answers: wait for them to settle.
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	sl.Srv.WaitFor(wctx, func() bool {
		for _, p := range s.slackPromptsCopy() {
			if finals, busy, acked := s.slackState(p); acked && (len(finals) == 0 || busy) {
				return false
			}
		}
		return true
	})
	cancel()
	for _, th := range threads {
		s.mu.Lock()
		ps := slices.Clone(th.prompts)
		s.mu.Unlock()
		shown := s.slackOutcomeMessages(th.ts)
		due := 0
		for _, p := range ps {
			finals, busy, acked := s.slackState(p)
			s.mu.Lock()
			lost := p.lost
			s.mu.Unlock()
			if lost && !acked && len(finals) == 0 {
				continue
			}
			due++
			if len(finals) > 0 {
				s.mu.Lock()
				if p.outcome == shownOnly || p.outcome == "" {
					p.outcome = finals[0]
				}
				s.mu.Unlock()
			}
			switch {
			case len(finals) == 0:
				s.violate("slack prompt %s in thread %s (%s): its status reaction is %v, not final", p.ts, th.ts, p.behaviour, sl.BotReactions(sl.Channel, p.ts))
			case len(finals) > 1:
				s.violate("slack prompt %s in thread %s (%s) has %d outcomes: %v", p.ts, th.ts, p.behaviour, len(finals), finals)
			case busy:
				s.violate("slack prompt %s in thread %s (%s) still shows queued or working beside %v", p.ts, th.ts, p.behaviour, finals)
			}
		}
		if len(shown) != due {
			s.violate("slack thread %s shows %d outcome messages for %d prompts", th.ts, len(shown), due)
		}
	}
	for _, e := range sl.Srv.Envelopes() {
		if e.Failed && e.Type != "events_api" {
			s.mu.Lock()
			s.interact = append(s.interact, fmt.Sprintf("slack envelope %s (%s) not acknowledged in time", e.ID, e.Kind))
			s.mu.Unlock()
		}
	}
}

func (s *soak) slackPromptsCopy() []*slackPrompt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.slack.prompts)
}

// slackSummary adds Slack's lines to the summary; s.mu is held.
func (s *soak) slackSummary(p func(format string, args ...any)) {
	if s.slack == nil {
		return
	}
	kinds := map[string]int{}
	byBehaviour := map[string]map[string]int{}
	for _, pr := range s.slack.prompts {
		o := pr.outcome
		switch {
		case o == "" && pr.lost:
			o = "lost with a killed broker"
		case o == "":
			o = "none"
		default:
			o = outcomeWords(o)
		}
		tally(kinds, byBehaviour, pr.behaviour, o)
	}
	p("slack: %d threads, %d prompts; outcomes: %s", len(s.slack.threads), len(s.slack.prompts), render(kinds))
	for _, name := range sortedKeys(byBehaviour) {
		p("  %-22s %s", name, render(byBehaviour[name]))
	}
	chaos := s.slack.sl.Srv.ChaosCounts()
	st := s.slack.sl.Srv.SocketStats()
	p("slack faults: random 429s %d, random 5xx %v; Socket Mode connections %d (%d refused), acknowledgements %d in time, %d late; Web API calls answered 429 %d",
		chaos.TooManyRequests, chaos.Errors, st.Connections, st.Rejected, st.Acks, st.LateAcks, len(s.slack.sl.Srv.RateLimited()))
}
