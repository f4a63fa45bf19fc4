package thread

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"acpbroker/adapter"
)

// The controls of a thread's web page beyond cancel, send and answers:
// the queue, the agent's options, its sessions. Each goes through the
// path of the chat's own command or button, so the same rule decides who
// may, and the thread shows what was done and where.

// WebCommands are the commands a web page may give in a thread, as
// CommandFor takes them.
var WebCommands = []string{"model", "mode", "config", "resume", "fork"}

// errShuttingDown: the Server takes no more commands.
var errShuttingDown = errors.New("the broker is shutting down; try again in a moment")

// ErrNotWaiting: the message is no longer waiting in the thread's queue.
var ErrNotWaiting = errors.New("this message is no longer waiting")

// CommandFor gives the command name with args in thread for u, as the
// chat's command would be given there: what the chat would show u alone
// comes back as the error; what it would show everyone is posted in the
// thread, saying it was done via, and comes back as said. Each of them
// changes the thread, so u must be allowed to act on it. It returns
// once the command is answered (an option's change waits for the agent,
// within its own bound), or ctx ends first: the command, run by the
// Server as the chat's are, then goes on and the thread still says what
// came of it.
func (s *Server) CommandFor(ctx context.Context, thread string, u User, via, name string, args map[string]string) (said string, err error) {
	switch {
	case !slices.Contains(WebCommands, name):
		return "", fmt.Errorf("%s is not a command of a thread's page", name)
	case !s.MayAct(thread, u):
		return "", ErrNotAllowed
	}
	r := &webReply{s: s, where: thread, via: via}
	done := make(chan struct{})
	s.mu.Lock()
	accepting := s.accepting
	s.mu.Unlock()
	if !accepting || !s.spawnLate(func() {
		defer close(done)
		s.command(Command{Name: name, Args: args, Where: thread, From: u, Reply: r})
	}) {
		return "", errShuttingDown
	}
	select {
	case <-done:
	case <-ctx.Done():
		return "", context.Cause(ctx)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.told != "" {
		return "", errors.New(r.told)
	}
	return r.said, nil
}

// webReply answers a command given on a web page.
type webReply struct {
	s          *Server
	where, via string

	mu         sync.Mutex
	said, told string
}

func (r *webReply) Private(_ context.Context, v View) {
	r.mu.Lock()
	r.told = v.Text
	r.mu.Unlock()
}

func (r *webReply) Public(ctx context.Context, text string) {
	r.mu.Lock()
	r.said = text
	r.mu.Unlock()
	if _, err := r.s.post(ctx, r.where, View{Text: text + "\n-# " + r.via}); err != nil {
		r.s.log.Warn().Err(err).Str("thread", r.where).Msg("what was done on the web not shown in the thread")
	}
}

func (r *webReply) Posted(context.Context) (Origin, error) {
	return Origin{}, errors.New("a command given on the web has no message")
}
func (r *webReply) Update(ctx context.Context, v View) { r.Private(ctx, v) }
func (r *webReply) Ack(context.Context)                {}
func (r *webReply) Defer(context.Context)              {}
func (r *webReply) Form(context.Context, Form)         {}

// Options are the choices the agent of thread offers (its model, mode
// and configuration), as the chat's commands offer them.
func (s *Server) Options(thread string) adapter.ThreadOptions {
	if s.conversation(thread) == nil {
		return adapter.ThreadOptions{}
	}
	return s.engine.Options(thread)
}

// WaitingMessage is a message waiting in a thread's queue, as a web page
// shows it to one person.
type WaitingMessage struct {
	// Key names it for SendNowFor and RemoveFor ("": it has no note, and
	// nothing can be done with it).
	Key      string
	AuthorID string
	Author   string
	Title    string
	Queued   time.Time
	// Next: it goes next, the running turn being interrupted for it.
	Next bool
	// MaySendNow, MayRemove: what the person may do with it, by the
	// rules of its note's buttons.
	MaySendNow, MayRemove bool
}

// QueueFor lists the messages waiting in thread, in the order they will
// run, with what u may do with each; nil if u may not see the thread.
func (s *Server) QueueFor(thread string, u User) []WaitingMessage {
	conv := s.conversation(thread)
	if conv == nil || s.queue == nil || !s.MaySee(thread, u) {
		return nil
	}
	access := s.acl()
	mayAct := access.mayAct(conv.channel, s.starterOf(conv), u)
	var out []WaitingMessage
	for _, w := range s.queue.Waiting(conv.thread) {
		wm := WaitingMessage{AuthorID: w.Prompt.Author, Title: w.Prompt.Title, Queued: w.Queued, Next: w.Next}
		if t, ok := w.Prompt.Sink.(*turnSink); ok {
			wm.Author = t.from.display()
			s.mu.Lock()
			if s.notes[t.noteKey] == t {
				wm.Key = t.noteKey
			}
			s.mu.Unlock()
		}
		if wm.Key != "" {
			wm.MaySendNow = mayAct && !w.Next
			wm.MayRemove = wm.AuthorID == u.ID || access.approver(u)
		}
		out = append(out, wm)
	}
	return out
}

// waitingIn is the sink of the waiting message key of thread, or nil.
func (s *Server) waitingIn(thread, key string) *turnSink {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.notes[key]
	if t == nil || t.conv.thread != thread {
		return nil
	}
	return t
}

// SendNowFor sends thread's waiting message key next for u, as its Send
// now button would: the running turn is interrupted, its end naming u
// and via.
func (s *Server) SendNowFor(thread, key string, u User, via string) error {
	t := s.waitingIn(thread, key)
	if t == nil {
		return ErrNotWaiting
	}
	r := &webReply{s: s, where: thread, via: via}
	s.sendNow(r, t, User{ID: u.ID, Name: u.display() + " (" + via + ")", Roles: u.Roles})
	if r.told != "" {
		return errors.New(r.told)
	}
	return nil
}

// RemoveFor takes thread's waiting message key out of the queue for u,
// its author or an approver, as its Remove button would: its note says
// who removed it, and via.
func (s *Server) RemoveFor(thread, key string, u User, via string) error {
	t := s.waitingIn(thread, key)
	if t == nil {
		return ErrNotWaiting
	}
	r := &webReply{s: s, where: thread, via: via}
	if !s.remove(r, t, User{ID: u.ID, Name: u.display() + " (" + via + ")", Roles: u.Roles}) {
		return errors.New(strings.TrimSpace(r.told))
	}
	return nil
}

// MessageLink is the platform's link to the message ref names (as
// TurnStart.Ref), for people to follow there; "" where it has none.
func (s *Server) MessageLink(ref string) string {
	if ref == "" {
		return ""
	}
	_, _, link, ok := s.p.Locate(ref)
	if !ok {
		return ""
	}
	return link
}
