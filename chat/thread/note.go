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

// setPrompt tells the sink what was submitted, by whom.
func (t *turnSink) setPrompt(p *adapter.Prompt, from User) {
	t.mu.Lock()
	t.prompt, t.from = p, from
	t.mu.Unlock()
}

// startNote starts the note's goroutine once: its actions are keyed
// from now on (see Server.notes). Called from Status, under the
// engine's lock: it only registers and spawns.
func (t *turnSink) startNote() {
	t.noteOnce.Do(func() {
		s := t.s
		if s.queue == nil {
			return // the mark alone: nothing can be done with the message
		}
		s.mu.Lock()
		s.permSeq++
		t.noteKey = strconv.FormatUint(s.permSeq, 36)
		s.notes[t.noteKey] = t
		s.mu.Unlock()
		t.mu.Lock()
		t.noteRunning = true
		t.mu.Unlock()
		if !s.spawnLate(t.note) {
			t.dropNoteKey()
			t.mu.Lock()
			t.noteRunning = false
			t.mu.Unlock()
			close(t.noteDone)
		}
	})
}

func (t *turnSink) dropNoteKey() {
	s := t.s
	s.mu.Lock()
	delete(s.notes, t.noteKey)
	t.noteKey = ""
	s.mu.Unlock()
}

// note keeps the note in step with the message: one platform call at a
// time, a state passed over meanwhile skipped. It returns once the note
// is deleted (the agent has the message), shows the end of a message
// that never reached the agent, or the Server gives up.
func (t *turnSink) note() {
	s := t.s
	defer close(t.noteDone)
	defer t.dropNoteKey()
	var id, shown string
	for {
		t.mu.Lock()
		next, started, outcome, refusal := t.sentNext, t.started, t.outcome, t.refusal
		t.mu.Unlock()
		switch {
		case started:
			if id != "" {
				if err := s.try(s.ctx, 5, func(ctx context.Context) error { return s.p.Delete(ctx, t.at.Where, id) }); err != nil && !notFound(err) {
					s.log.Debug().Err(err).Str("thread", t.conv.thread).Msg("a waiting message's note not deleted")
				}
			}
			return
		case outcome != nil || refusal != "":
			text := refusal
			if outcome != nil {
				text = outcomeFooter(*outcome)
			}
			v := View{Text: text, ReplyTo: t.at.ID, Outcome: true}
			if err := t.showNote(&id, v); err != nil {
				s.log.Warn().Err(err).Str("thread", t.conv.thread).Msg("the end of a message that never ran not shown on its note")
				return // run shows it the usual way
			}
			t.noteID = id
			close(t.noteShown)
			return
		}
		v := View{Text: "-# ⏳ This message waits for the agent's current turn. **Send now** stops that turn and sends it next, in the same session.",
			ReplyTo: t.at.ID, Actions: []Action{
				{ID: sendNowPrefix + t.noteKey, Label: "Send now", Style: Primary},
				{ID: removePrefix + t.noteKey, Label: "Remove", Style: Secondary},
			}}
		if next {
			v = View{Text: "-# ⏩ This message goes next: the agent's current turn is being interrupted for it.", ReplyTo: t.at.ID}
		}
		if v.Text != shown {
			if err := t.showNote(&id, v); err != nil {
				s.log.Debug().Err(err).Str("thread", t.conv.thread).Msg("a waiting message's note not shown")
			} else {
				shown = v.Text
			}
		}
		select {
		case <-t.noteWake:
		case <-s.ctx.Done():
			return
		}
	}
}

// showNote posts the note as v, or makes the one posted (*id) show v.
func (t *turnSink) showNote(id *string, v View) error {
	s := t.s
	if *id != "" {
		err := s.try(s.ctx, 5, func(ctx context.Context) error { return s.p.Edit(ctx, t.at.Where, *id, v) })
		if !notFound(err) {
			return err
		}
		*id = "" // deleted: posted again
	}
	posted, err := s.post(s.ctx, t.at.Where, v)
	if err == nil {
		*id = posted
	}
	return err
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
	t.mu.Lock()
	p := t.prompt
	t.mu.Unlock()
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
	t.mu.Lock()
	p, author := t.prompt, t.from
	t.mu.Unlock()
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
