package thread

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
)

// Referrer names a message of the bot's as Message.Ref names people's,
// for a platform on which the broker starts turns itself (Start): the
// journal keeps the reference, for the report after a restart, and
// Locate reads a link from it.
type Referrer interface {
	Ref(ctx context.Context, where, id string) (string, error)
}

// Request is a prompt the broker starts itself rather than a person in
// the chat: a schedule's run, a program's prompt through the API. Its
// turn runs and shows as any other, against a message of the bot's that
// says who asked and what.
type Request struct {
	// Channel is where a new thread is opened for it; or Thread, one of
	// the bot's threads it is written into.
	Channel, Thread string
	// Name names a new thread.
	Name string
	// By says who asks, for people: "⏰ Schedule **nightly**".
	By string
	// Text is the prompt as people see it; Blocks what the agent is
	// given (the text first, then attachments inlined).
	Text   string
	Blocks []acp.ContentBlock
	// Agent is the profile a new thread gets ("": the channel's, or the
	// default).
	Agent string
	// Approvers may answer the thread's permission requests and
	// questions, besides those who may act on any thread.
	Approvers []string
	// PermissionMode and PermissionBy: see adapter.Prompt.
	PermissionMode, PermissionBy string
	// Sink, if set, wraps the thread's own Sink for the turn: the caller
	// sees the turn as the thread shows it, and may answer its
	// permission requests (AnswerPermission).
	Sink func(adapter.Sink) adapter.Sink
	// author is the user who asks, when a person does (SendFor).
	author *User
}

// Started is where a Request runs.
type Started struct {
	// Thread is the thread the turn runs in, Channel the channel it is
	// in; New: it was opened for the request.
	Thread, Channel string
	New             bool
	// Ref and Link name the message that shows the prompt ("" where the
	// platform cannot say).
	Ref, Link string
}

// Start's refusals.
var (
	ErrNotServed  = errors.New("not a channel the bot serves")
	ErrNoThread   = errors.New("not one of the bot's threads")
	ErrNotServing = errors.New("the chat is not connected")
)

// Start runs r: it opens a thread in r.Channel from a message of the
// bot's that shows the prompt (or posts that message in r.Thread), and
// submits the prompt there. It returns once the prompt is submitted, or
// with the reason nothing was: the engine's refusal (adapter's
// ErrQueueFull, ErrShutdown) is shown in the thread too. The Sink r.Sink
// makes, if any, is told the turn from then on.
func (s *Server) Start(ctx context.Context, r Request) (Started, error) {
	s.mu.Lock()
	accepting := s.accepting
	s.mu.Unlock()
	if !accepting {
		return Started{}, ErrNotServing
	}
	access := s.acl()
	shown := s.promptView(r)
	var conv *conversation
	var at Origin
	var out Started
	if r.Thread != "" {
		conv = s.conversation(r.Thread)
		if conv == nil {
			return out, fmt.Errorf("thread %s: %w", r.Thread, ErrNoThread)
		}
		if !access.channel(conv.channel) {
			return out, fmt.Errorf("the channel of thread %s: %w", r.Thread, ErrNotServed)
		}
		s.addApprovers(conv, r.Approvers)
		id, err := s.post(ctx, conv.thread, shown)
		if err != nil {
			return out, fmt.Errorf("the prompt could not be posted in the thread: %w", err)
		}
		at = Origin{Where: conv.thread, ID: id}
	} else {
		if !access.channel(r.Channel) {
			return out, fmt.Errorf("channel %s: %w", r.Channel, ErrNotServed)
		}
		id, err := s.post(ctx, r.Channel, shown)
		if err != nil {
			return out, fmt.Errorf("the prompt could not be posted in the channel: %w", err)
		}
		agent := r.Agent
		if agent == "" {
			agent = access.ChannelAgents[r.Channel]
		}
		conv, err = s.startThreadFor(ctx, r.Channel, id, cmpOr(r.Name, threadName(r.Text, User{Name: "the broker"})), agent, r.Approvers)
		if err != nil {
			s.log.Error().Err(err).Str("channel", r.Channel).Msg("could not open a thread")
			s.markOnce(r.Channel, id, MarkFailed)
			return out, fmt.Errorf("the thread could not be opened: %w", err)
		}
		at = Origin{Where: r.Channel, ID: id}
		out.New = true
	}
	out.Thread, out.Channel = conv.thread, conv.channel
	if ref, ok := s.p.(Referrer); ok {
		var err error
		if at.Ref, err = ref.Ref(ctx, at.Where, at.ID); err != nil {
			s.log.Debug().Err(err).Msg("the prompt's message has no reference")
		}
	}
	if at.Ref != "" {
		_, _, out.Link, _ = s.p.Locate(at.Ref)
	}
	out.Ref = at.Ref
	sink := newTurnSink(s, conv, at)
	var into adapter.Sink = sink
	if r.Sink != nil {
		into = r.Sink(sink)
	}
	agent := r.Agent
	if agent == "" {
		agent = conv.agent
	}
	p := &adapter.Prompt{Ref: at.Ref, Title: excerpt(r.Text, 80), Author: r.By, Agent: agent, Blocks: r.Blocks,
		PermissionMode: r.PermissionMode, PermissionBy: r.PermissionBy, Sink: into}
	var author User
	if r.author != nil {
		author = *r.author
		p.Author, p.AuthorName = author.ID, author.display()
	}
	sink.observe(r.Text, author, p.AuthorName)
	if err := s.engine.Submit(conv.thread, p); err != nil {
		sink.refused(err)
		return out, err
	}
	return out, nil
}

// promptView is the message that shows a Request's prompt: who asks and
// what, cut to a message; a longer prompt is attached whole.
func (s *Server) promptView(r Request) View {
	head := r.By + ":\n"
	room := s.lim.MessageRunes - pieceMargin - len([]rune(head))
	v := View{NoPreview: true}
	text := r.Text
	if len([]rune(text)) > room {
		text = cut(text, room-80) + "\n-# … the whole prompt is attached as prompt.md."
		v.Files = []File{{Name: "prompt.md", Type: "text/markdown", Data: r.Text}}
	}
	v.Text = head + text
	return v
}

// startThreadFor opens a thread for a Request, with its approvers.
func (s *Server) startThreadFor(ctx context.Context, channel, id, name, agent string, approvers []string) (*conversation, error) {
	conv, err := s.startThread(ctx, channel, id, name, "", agent)
	if err != nil {
		return nil, err
	}
	s.addApprovers(conv, approvers)
	return conv, nil
}

// addApprovers lets more users answer a conversation's requests, for
// good.
func (s *Server) addApprovers(conv *conversation, approvers []string) {
	s.mu.Lock()
	added := false
	for _, a := range approvers {
		if a != "" && !slices.Contains(conv.approvers, a) {
			conv.approvers = append(conv.approvers, a)
			added = true
		}
	}
	s.mu.Unlock()
	if added {
		s.remember(conv)
	}
}

// approversOf are the users besides the approvers who may answer a
// conversation's requests.
func (s *Server) approversOf(conv *conversation) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(conv.approvers)
}

// ErrNotOpen is AnswerPermission's error when the request is answered
// already (in the chat or otherwise) or closed; ErrNoOption when the
// option is not one the request offers.
var (
	ErrNotOpen  = errors.New("the permission request is no longer open")
	ErrNoOption = errors.New("not one of the request's options")
)

// AnswerPermission answers the open permission request req (as a
// Sink's Ask was given it, through a Request's Sink) with option
// optionID, for by: a program, named in the thread with via ("the
// API"). The first answer decides, in the chat or here: after it,
// ErrNotOpen. The thread's request then says who chose what.
func (s *Server) AnswerPermission(req *acp.PermissionRequest, optionID string, by User, via string) error {
	return s.answerPermission(req, optionID, by, via, nil)
}

// answerPermission is AnswerPermission, for by alone when may (if set)
// says so of the request (else ErrNotAllowed); may is called with s.mu
// held.
func (s *Server) answerPermission(req *acp.PermissionRequest, optionID string, by User, via string, may func(*openPermission) bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, op := range s.perms {
		if op.req != req {
			continue
		}
		if op.ctx.Err() != nil {
			return ErrNotOpen
		}
		if may != nil && !may(op) {
			return ErrNotAllowed
		}
		i := slices.IndexFunc(op.options, func(o acp.PermissionOption) bool { return o.OptionID == optionID })
		if i < 0 {
			return ErrNoOption
		}
		delete(s.perms, key)
		opt := op.options[i]
		op.answer <- choice{optionID: opt.OptionID, name: opt.Name, kind: opt.Kind, by: by.ID, byName: by.handle(), via: via, display: by.display()}
		s.log.Info().Str("thread", op.thread).Str("by", by.ID).Str("via", via).Str("option", opt.OptionID).Msg("permission answered")
		return nil
	}
	return ErrNotOpen
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// ThreadChannel is the channel thread is in, when it is one of the
// bot's threads; else ErrNoThread.
func (s *Server) ThreadChannel(thread string) (string, error) {
	conv := s.conversation(thread)
	if conv == nil {
		return "", fmt.Errorf("thread %s: %w", thread, ErrNoThread)
	}
	return conv.channel, nil
}

// Tell posts text in one of the bot's threads, as Say does, on a
// goroutine the Server owns, within tellTimeout: it does not wait. What
// fails is logged. Once Close has begun it posts nothing.
func (s *Server) Tell(thread, text string) {
	s.spawnLate(func() {
		ctx, cancel := context.WithTimeout(s.ctx, tellTimeout)
		defer cancel()
		if err := s.Say(ctx, thread, text); err != nil {
			s.log.Warn().Err(err).Str("thread", thread).Msg("a notice could not be said in its thread")
		}
	})
}

// tellTimeout bounds one Tell's post.
const tellTimeout = 30 * time.Second

// Say posts text in one of the bot's threads (a schedule's run that was
// skipped, say).
func (s *Server) Say(ctx context.Context, thread, text string) error {
	_, err := s.post(ctx, thread, View{Text: cut(text, s.lim.MessageRunes-pieceMargin)})
	return err
}
