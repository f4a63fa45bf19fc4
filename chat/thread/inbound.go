package thread

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"acpbroker/acp"
	"acpbroker/adapter"
)

// Message takes a message posted where the bot can see it: in one of its
// threads, the thread's next prompt (or a command written to the bot);
// with a mention in an allowed channel, the first prompt of a new thread
// opened from it; anything else is ignored. A message given twice (a
// platform redelivers after a reconnect) is taken once. The messages of
// one thread reach the engine in the order given, though each is
// prepared (files downloaded, the thread opened) on a goroutine of its
// own.
func (s *Server) Message(m Message) {
	if m.From.Bot && !slices.Contains(s.acl().AllowedBots, m.From.ID) {
		return
	}
	s.mu.Lock()
	if !s.accepting || !s.seen.add(m.Where+"\x00"+m.ID) {
		s.mu.Unlock()
		return
	}
	conv := s.convs[m.Where]
	if conv == nil && !m.Mentioned && s.access.channel(m.Where) {
		s.mu.Unlock()
		return // ordinary chatter in an allowed channel
	}
	// A thread started from a message waits for it as its own messages
	// do: they are one thread's.
	key := m.Where
	if conv == nil && m.Mentioned && m.Opens != "" {
		key = m.Opens
	}
	prev, done := s.order[key], make(chan struct{})
	s.order[key] = done
	sweep := conv != nil && s.keepLocked(conv)
	s.mu.Unlock()
	if sweep {
		s.sweep()
	}
	s.wg.Go(func() {
		defer s.inOrderDone(key, done)
		s.handleMessage(m, conv, prev)
	})
}

// inOrderDone lets the thread's next message go on to the engine.
func (s *Server) inOrderDone(key string, done chan struct{}) {
	close(done)
	s.mu.Lock()
	if s.order[key] == done {
		delete(s.order, key)
	}
	s.mu.Unlock()
}

// handleMessage turns a message into a prompt: in a conversation thread,
// the next prompt (or a command written to the bot); with a mention in
// an allowed channel, the first prompt of a new thread. It submits only
// once prev (the thread's previous message, if any) is through.
func (s *Server) handleMessage(m Message, conv *conversation, prev <-chan struct{}) {
	ctx := s.ctx
	if conv == nil {
		conv = s.adoptThread(ctx, m.Where)
		if conv == nil && (!m.Mentioned || !s.acl().channel(m.Where)) {
			return
		}
	}
	if conv != nil && !s.acl().channel(conv.channel) {
		s.count(&s.stats.RefusedChannels)
		s.log.Info().Str("thread", conv.thread).Str("channel", conv.channel).Msg("message in a thread of a channel no longer allowed; refused")
		s.markOnce(m.Where, m.ID, MarkRefused)
		s.replyTo(ctx, m, "This channel is no longer served by the bot; nothing was sent to the agent.")
		return
	}
	if conv != nil {
		s.resolveStarter(ctx, conv)
	}
	if !s.acl().user(m.From) {
		s.count(&s.stats.RefusedUsers)
		s.log.Info().Str("user", m.From.ID).Str("channel", m.Where).Msg("message from a user who is not allowed; refused")
		s.markOnce(m.Where, m.ID, MarkRefused)
		return
	}
	if conv != nil && m.Addressed {
		// new is not written in a thread: a thread opens from a message
		// of the channel, not of another thread.
		if cmd, ok := s.Parse(m.Text); ok && cmd.Name != "new" {
			if prev != nil {
				select { // after the messages before it, as a prompt would be
				case <-prev:
				case <-ctx.Done():
					return
				}
			}
			cmd.Where, cmd.From, cmd.Reply = m.Where, m.From, &textReply{s: s, m: m}
			// The thread's next message need not wait for the command's
			// answer (a change of option waits for the agent).
			s.wg.Go(func() { s.command(cmd) })
			return
		}
	}
	text := m.Text
	blocks, images, skipped, refusal := s.attachments(ctx, m.Files)
	if refusal == "" && text == "" && len(blocks) == 0 && len(images) == 0 {
		refusal = "Mention me with a question or a task, and I will start an agent on it in a thread."
		if len(skipped) > 0 {
			refusal = strings.Join(skipped, "\n") + " Nothing else came with it, so nothing was sent."
		}
	}
	if refusal != "" {
		s.count(&s.stats.RefusedAttachments)
		s.markOnce(m.Where, m.ID, MarkFailed)
		s.replyTo(ctx, m, refusal)
		return
	}
	if len(skipped) > 0 {
		s.count(&s.stats.RefusedAttachments)
		s.replyTo(ctx, m, strings.Join(skipped, "\n")+" The rest of your message was sent.")
	}
	if text != "" {
		blocks = append([]acp.ContentBlock{acp.TextBlock(text)}, blocks...)
	}
	if conv == nil {
		var err error
		conv, err = s.startThread(ctx, m.Where, m.ID, threadName(text, m.From), m.From.ID, s.acl().ChannelAgents[m.Where])
		if err != nil {
			s.log.Error().Err(err).Str("channel", m.Where).Msg("could not open a thread")
			s.markOnce(m.Where, m.ID, MarkFailed)
			s.replyTo(ctx, m, "I could not open a thread for this: "+err.Error())
			return
		}
	}
	if prev != nil {
		select {
		case <-prev:
		case <-ctx.Done():
			return
		}
	}
	s.submit(conv, Origin{Where: m.Where, ID: m.ID, Ref: m.Ref}, m.From, text, conv.agent, blocks, images)
}

// submit sends a prompt from author to the thread's agent, its turn
// shown against the message at. Where the thread's busy mode says so, an
// author who may act on the thread interrupts its running turn.
func (s *Server) submit(conv *conversation, at Origin, author User, title, agent string, blocks, images []acp.ContentBlock) {
	s.submitPrompt(conv, at, author, title, agent, blocks, images, false)
}

// submitPrompt is submit, the prompt interrupting the running turn
// (a steer) when interrupt is set.
func (s *Server) submitPrompt(conv *conversation, at Origin, author User, title, agent string, blocks, images []acp.ContentBlock, interrupt bool) {
	sink := newTurnSink(s, conv, at)
	p := &adapter.Prompt{Ref: at.Ref, Title: excerpt(title, 80), Author: author.ID, AuthorName: author.display(), Agent: agent,
		Blocks: blocks, Images: images, Sink: sink, Interrupt: interrupt,
		MayInterrupt: s.acl().mayAct(conv.channel, s.starterOf(conv), author)}
	// Known to the sink before the engine can tell it it waits.
	sink.setPrompt(p, author)
	sink.observe(title, author, "")
	if err := s.engine.Submit(conv.thread, p); err != nil {
		if errors.Is(err, adapter.ErrQueueFull) {
			err = fmt.Errorf("<@%s>, %w: yours was not sent to the agent. Send it again once one has run, or see and remove them with `%s`", author.ID, err, s.p.Usage("queue"))
		}
		sink.refused(err)
	}
}

// replyTo answers m where it is.
func (s *Server) replyTo(ctx context.Context, m Message, text string) {
	if _, err := s.post(ctx, m.Where, View{Text: text, ReplyTo: m.ID}); err != nil {
		s.log.Warn().Err(err).Msg("reply not sent")
	}
}

// markOnce puts a mark on a message for good, as the status marks go.
func (s *Server) markOnce(where, id string, mark Mark) {
	if err := s.mark(where, id, mark, true); err != nil {
		s.log.Debug().Err(err).Stringer("mark", mark).Msg("mark not put")
	}
}

// mark puts (on) or takes off a mark, waiting out rate limits, within
// the time the Server gives its marks.
func (s *Server) mark(where, id string, mark Mark, on bool) error {
	return s.try(s.decor, 5, func(ctx context.Context) error { return s.p.Mark(ctx, where, id, mark, on) })
}

// threadName is the first line of the prompt, cut to 90 characters.
func threadName(text string, from User) string {
	line, _, _ := strings.Cut(text, "\n")
	if name := excerpt(line, 90); name != "" {
		return name
	}
	return "Conversation with " + from.handle()
}

// excerpt collapses whitespace and cuts s to at most n runes.
func excerpt(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	return s
}

// cut shortens s to at most n characters, "…" last when it was cut,
// keeping its lines and spaces as they are.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// recentSet remembers the last n ids added.
type recentSet struct {
	ids  map[string]struct{}
	ring []string
	next int
}

func newRecentSet(n int) recentSet {
	return recentSet{ids: make(map[string]struct{}, n), ring: make([]string, n)}
}

// add records id and reports whether it was new.
func (r *recentSet) add(id string) bool {
	if _, ok := r.ids[id]; ok {
		return false
	}
	if old := r.ring[r.next]; old != "" {
		delete(r.ids, old)
	}
	r.ring[r.next] = id
	r.next = (r.next + 1) % len(r.ring)
	r.ids[id] = struct{}{}
	return true
}
