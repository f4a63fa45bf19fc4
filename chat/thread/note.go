package thread

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"acpbroker/acp"
	"acpbroker/adapter"
)

// A message that waits behind its thread's running turn shows MarkQueued
// and gets the bot's note, a reply to it: while it waits, the note
// offers Send now (the running turn is interrupted, and the message is
// the next prompt of the same session) and Remove; once it goes next,
// the note says so; once the agent has it, the note is deleted. A
// message that ends without reaching the agent (removed, the broker
// stopping) shows that end on its note.

// The action ids of a note's buttons; the nonce keeps buttons of an
// earlier run of the broker from matching.
var (
	sendNowPrefix = "send:" + nonce() + ":"
	removePrefix  = "drop:" + nonce() + ":"
)

// setPrompt tells the sink what was submitted, by whom: before the
// prompt is submitted.
func (t *turnSink) setPrompt(p *adapter.Prompt, from User) {
	t.prompt, t.from = p, from
}

// offerNote keys the note's actions from now on (see Server.notes), for
// a prompt the engine says waits. Called from Status, under the
// engine's lock: it only registers.
func (t *turnSink) offerNote() {
	if t.noteKey == "" {
		return // the mark alone: nothing can be done with the message
	}
	t.s.mu.Lock()
	t.s.notes[t.noteKey] = t
	t.s.mu.Unlock()
}

// noteState is the note under a waiting message.
type noteState struct {
	wanted bool   // the message waited: it has a note
	busy   bool   // a call is on its way
	id     string // its message ("": not posted)
	text   string // what it shows
	tried  string // what a failed call was to show: not tried again
	done   bool   // deleted, showing the message's end, or given up on
}

// settled: the note is no longer to change.
func (n *noteState) settled() bool { return !n.wanted || n.done }

// actNote keeps the note in step with the message, one platform call at
// a time, a state passed over meanwhile skipped: it offers Send now
// while the message waits, says when it goes next, is deleted once the
// agent has it (or the end is shown with the answer), and shows the end
// of a message that never reached the agent when decide puts it there.
func (v *turnView) actNote() {
	n := &v.note
	if !n.wanted || n.done || n.busy {
		return
	}
	t := v.sink
	switch {
	case v.endOn == endOnNote:
		text := v.refusal
		if v.outcome != nil {
			text = outcomeFooter(*v.outcome)
		}
		v.showNote(View{Text: text, ReplyTo: t.at.ID, Outcome: true}, true)
	case v.started || v.endOn == endOnAnswer:
		if n.id == "" {
			v.noteDone()
			return
		}
		s, id := v.s, n.id
		n.busy = true
		v.spawn(func() func(*turnView) {
			if err := s.try(s.ctx, 5, func(ctx context.Context) error { return s.p.Delete(ctx, t.at.Where, id) }); err != nil && !notFound(err) {
				s.log.Debug().Err(err).Str("thread", t.conv.thread).Msg("a waiting message's note not deleted")
			}
			return func(v *turnView) {
				v.note.busy, v.note.id = false, ""
				v.noteDone()
			}
		})
	case v.phase == phaseEnded:
		// Where the end goes is not decided yet.
	default:
		nv := View{Text: "-# ⏳ This message waits for the agent's current turn. **Send now** stops that turn and sends it next, in the same session.",
			ReplyTo: t.at.ID, Actions: []Action{
				{ID: sendNowPrefix + t.noteKey, Label: "Send now", Style: Primary},
				{ID: removePrefix + t.noteKey, Label: "Remove", Style: Secondary},
			}}
		if v.phase >= phaseNext {
			nv = View{Text: "-# ⏩ This message goes next: the agent's current turn is being interrupted for it.", ReplyTo: t.at.ID}
		}
		if nv.Text != n.text && nv.Text != n.tried {
			v.showNote(nv, false)
		}
	}
}

// showNote posts the note as nv, or makes the one posted show it, on a
// worker; end: nv shows the message's end, and the answer is then out.
func (v *turnView) showNote(nv View, end bool) {
	s, t, n := v.s, v.sink, &v.note
	id := n.id
	n.busy = true
	v.spawn(func() func(*turnView) {
		id, err := s.putNote(t.at.Where, id, nv)
		return func(v *turnView) {
			n := &v.note
			n.busy = false
			switch {
			case err == nil:
				n.id, n.text = id, nv.Text
				if end {
					v.noteDone()
					v.answer.done, v.answer.shownIn = true, id
				}
			case end:
				s.log.Warn().Err(err).Str("thread", t.conv.thread).Msg("the end of a message that never ran not shown on its note")
				v.endOn = endOnAnswer // shown the usual way
				v.noteDone()
			default:
				s.log.Debug().Err(err).Str("thread", t.conv.thread).Msg("a waiting message's note not shown")
				n.tried = nv.Text
			}
		}
	})
}

// noteDone: the note changes no more, and its actions are no longer
// keyed.
func (v *turnView) noteDone() {
	v.note.done = true
	v.s.mu.Lock()
	delete(v.s.notes, v.sink.noteKey)
	v.s.mu.Unlock()
}

// putNote posts a note as v in where, or makes the one posted (id) show
// v; it returns the note's id.
func (s *Server) putNote(where, id string, v View) (string, error) {
	if id != "" {
		err := s.try(s.ctx, 5, func(ctx context.Context) error { return s.p.Edit(ctx, where, id, v) })
		if !notFound(err) {
			return id, err
		}
		// deleted: posted again
	}
	return s.post(s.ctx, where, v)
}

// waitingFor is the sink of a waiting message whose note's action is
// action (with the action's prefix), or nil.
func (s *Server) waitingFor(action, prefix string) *turnSink {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.notes[strings.TrimPrefix(action, prefix)]
}

// onSendNowClick sends a waiting message next, interrupting the running
// turn, when the clicker may act on the thread; anyone else is told
// privately that the message waits its turn.
func (s *Server) onSendNowClick(c Click) {
	t := s.waitingFor(c.Action, sendNowPrefix)
	if t == nil {
		s.tell(c.Reply, "This message is no longer waiting.")
		return
	}
	s.sendNow(c.Reply, t, c.From)
}

// sendNow sends t's message next for u, or says why not.
func (s *Server) sendNow(r Reply, t *turnSink, u User) {
	access := s.acl()
	starter := s.starterOf(t.conv)
	p := t.prompt
	switch {
	case !access.channel(t.conv.channel):
		s.tell(r, "This channel is no longer served by the bot.")
		return
	case !access.mayAct(t.conv.channel, starter, u):
		s.log.Info().Str("thread", t.conv.thread).Str("user", u.ID).Msg("send now refused: not the thread's starter or an approver")
		s.tell(r, whoMayAct(starter)+" can interrupt this thread's turn; you can't. The message waits its turn.")
		return
	}
	if err := s.queue.SendNow(t.conv.thread, p, u.display()); err != nil {
		s.tell(r, "This message is no longer waiting.")
		return
	}
	s.log.Info().Str("thread", t.conv.thread).Str("user", u.ID).Msg("waiting message sent now")
	r.Ack(s.ctx)
}

// onRemoveClick takes a waiting message out of the queue for its author
// or an approver.
func (s *Server) onRemoveClick(c Click) {
	t := s.waitingFor(c.Action, removePrefix)
	if t == nil {
		s.tell(c.Reply, "This message is no longer waiting.")
		return
	}
	if s.remove(c.Reply, t, c.From) {
		c.Reply.Ack(s.ctx)
	}
}

// remove withdraws t's message for u, its author or an approver, or
// says why not; it reports whether it did.
func (s *Server) remove(r Reply, t *turnSink, u User) bool {
	access := s.acl()
	p, author := t.prompt, t.from
	switch {
	case !access.channel(t.conv.channel):
		s.tell(r, "This channel is no longer served by the bot.")
		return false
	case u.ID != author.ID && !access.approver(u):
		s.tell(r, fmt.Sprintf("Only <@%s>, who wrote it, or an approver can remove this message.", author.ID))
		return false
	}
	if err := s.queue.Withdraw(t.conv.thread, p, adapter.RemovedBy(u.display())); err != nil {
		s.tell(r, "This message is no longer waiting.")
		return false
	}
	s.log.Info().Str("thread", t.conv.thread).Str("user", u.ID).Str("author", author.ID).Msg("waiting message removed")
	return true
}

// onQueue lists the messages waiting in the thread, each with its author,
// and buttons to send one now or remove one, as far as the user may; or,
// with remove, takes that one (by its number in the list) out.
func (s *Server) onQueue(c Command, conv *conversation) {
	if s.queue == nil {
		s.tell(c.Reply, "This broker shows no queue.")
		return
	}
	waiting := s.queue.Waiting(conv.thread)
	// Written, "queue remove 2" reads as well as "queue 2".
	if n := strings.TrimSpace(strings.TrimPrefix(c.Args["remove"], "remove")); n != "" {
		i, err := strconv.Atoi(strings.TrimPrefix(n, "#"))
		if err != nil || i < 1 || i > len(waiting) {
			s.tell(c.Reply, fmt.Sprintf("There is no waiting message %s; %s lists them.", n, "`"+s.p.Usage("queue")+"`"))
			return
		}
		t, ok := waiting[i-1].Prompt.Sink.(*turnSink)
		if ok && s.remove(c.Reply, t, c.From) {
			c.Reply.Public(s.ctx, fmt.Sprintf("🗑️ <@%s> removed <@%s>'s waiting message “%s”.", c.From.ID, t.from.ID, excerpt(waiting[i-1].Prompt.Title, 80)))
		}
		return
	}
	if len(waiting) == 0 {
		s.tell(c.Reply, "Nothing is waiting in this thread.")
		return
	}
	access := s.acl()
	mayAct := access.mayAct(conv.channel, s.starterOf(conv), c.From)
	var b strings.Builder
	fmt.Fprintf(&b, "**Waiting** (%d, at most %d):\n", len(waiting), s.engine.Status(conv.thread).QueueSize)
	var actions []Action
	for i, w := range waiting {
		fmt.Fprintf(&b, "%d. <@%s> “%s” · %s", i+1, w.Prompt.Author, excerpt(w.Prompt.Title, 80), ago(w.Queued))
		if w.Next {
			b.WriteString(" · next")
		}
		b.WriteString("\n")
		t, ok := w.Prompt.Sink.(*turnSink)
		if !ok {
			continue
		}
		s.mu.Lock()
		key := t.noteKey
		if s.notes[key] != t {
			key = "" // no note offers it now
		}
		s.mu.Unlock()
		if key == "" {
			continue
		}
		if mayAct && !w.Next && len(actions) < s.lim.Buttons {
			actions = append(actions, Action{ID: sendNowPrefix + key, Label: fmt.Sprintf("Send %d now", i+1), Style: Primary})
		}
		if (w.Prompt.Author == c.From.ID || access.approver(c.From)) && len(actions) < s.lim.Buttons {
			actions = append(actions, Action{ID: removePrefix + key, Label: fmt.Sprintf("Remove %d", i+1), Style: Secondary})
		}
	}
	fmt.Fprintf(&b, "Remove one with `%s` (its author or an approver).", s.p.Usage("queue", Arg{Name: "remove"}))
	c.Reply.Private(s.ctx, View{Text: excerptLines(b.String(), s.listLimit()), Actions: actions})
}

// onSteer interrupts the running turn with a message from the command:
// it is sent next, in the same session.
func (s *Server) onSteer(c Command, conv *conversation) {
	text := c.Args["message"]
	if text == "" {
		s.tell(c.Reply, fmt.Sprintf("Say what the agent should do instead: `%s`.", s.p.Usage("steer", Arg{Name: "message"})))
		return
	}
	c.Reply.Public(s.ctx, fmt.Sprintf("⏩ <@%s> steered the agent:\n> %s", c.From.ID, excerpt(text, 300)))
	at, err := c.Reply.Posted(s.ctx)
	if err != nil {
		s.log.Warn().Err(err).Str("thread", conv.thread).Msg("steer: the command's answer could not be read; nothing sent to the agent")
		return
	}
	s.submitPrompt(conv, at, c.From, text, conv.agent, []acp.ContentBlock{acp.TextBlock(text)}, nil, true)
}
