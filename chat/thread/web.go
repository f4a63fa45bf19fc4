package thread

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
)

// Web is a web front end as a Server serves it: the sign-in links of
// the web command, and an Observer of every turn.
type Web struct {
	// SignIn makes a sign-in link for u, to thread ("": to the list of
	// threads); an error is told to u.
	SignIn func(u User, thread string) (string, error)
	// ThreadURL is the address of thread's page, for the Open in browser
	// button ("": none).
	ThreadURL func(thread string) string
	// Observer, if set, sees every turn.
	Observer Observer
}

// Observer sees every turn of the Server's threads as the turn's view is
// told it. Turn is called once a prompt is submitted; the TurnObserver's
// methods are called from the engine's calls to the turn's sink, in
// their order, and must not block.
type Observer interface {
	Turn(thread string, t TurnStart) TurnObserver
}

// TurnStart is a turn as it is submitted.
type TurnStart struct {
	// Prompt is what the person wrote; Author who wrote it, for people,
	// and AuthorID their id ("" for a turn the broker started).
	Prompt, Author, AuthorID string
	Started                  time.Time
	// Ref is the message that shows the turn's status, as Message.Ref
	// ("" if none): Server.MessageLink gives a link to it.
	Ref string
}

// TurnObserver sees one turn.
type TurnObserver interface {
	Status(adapter.Status)
	Update(acp.Update)
	Notice(text string)
	// Ask: the agent asks permission with req, open until Asked.
	Ask(req *acp.PermissionRequest)
	Asked(req *acp.PermissionRequest)
	// Elicit: the agent asks the question req, open until Elicited.
	Elicit(req *acp.ElicitationRequest)
	Elicited(req *acp.ElicitationRequest)
	Done(adapter.Outcome)
}

// SetWeb sets the web front end the Server serves: before Accept, so
// that every turn is seen.
func (s *Server) SetWeb(w Web) {
	s.mu.Lock()
	s.web = w
	s.mu.Unlock()
}

func (s *Server) webFront() Web {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.web
}

// observe tells the Server's Observer, if any, of the turn t shows,
// submitted by author with text.
func (t *turnSink) observe(text string, author User, authorName string) {
	o := t.s.webFront().Observer
	if o == nil {
		return
	}
	if authorName == "" {
		authorName = author.display()
	}
	t.obs = o.Turn(t.conv.thread, TurnStart{Prompt: text, Author: authorName, AuthorID: author.ID, Started: time.Now(), Ref: t.at.Ref})
}

// onWeb answers the web command: a private sign-in link, to the thread
// it was given in, if it is one of the bot's.
func (s *Server) onWeb(c Command) {
	w := s.webFront()
	if w.SignIn == nil {
		s.tell(c.Reply, "This broker has no web pages.")
		return
	}
	thread := ""
	if conv := s.conversation(c.Where); conv != nil {
		thread = conv.thread
	}
	link, err := w.SignIn(c.From, thread)
	if err != nil {
		s.tell(c.Reply, "No sign-in link now: "+err.Error())
		return
	}
	s.log.Info().Str("user", c.From.ID).Str("thread", thread).Msg("web sign-in link given")
	s.tell(c.Reply, fmt.Sprintf("Your link to the broker's web pages (for you alone, once, within 10 minutes): %s", link))
}

// MaySee reports whether u may see thread: it is one of the bot's
// threads in a channel it serves, and u may use the bot there, or may
// act on it. The access lists in force now decide.
func (s *Server) MaySee(thread string, u User) bool {
	conv := s.conversation(thread)
	if conv == nil {
		return false
	}
	a := s.acl()
	if !a.channel(conv.channel) {
		return false
	}
	return a.user(u) || a.approver(u) || slices.Contains(s.approversOf(conv), u.ID)
}

// MayAct reports whether u may act on thread (cancel it, answer its
// requests), by the one rule (see Access.mayAct), checked against the
// lists in force now.
func (s *Server) MayAct(thread string, u User) bool {
	conv := s.conversation(thread)
	if conv == nil {
		return false
	}
	return s.acl().mayAct(conv.channel, s.starterOf(conv), u)
}

// ErrNotAllowed: the user may not act on the thread.
var ErrNotAllowed = errors.New("only the thread's starter or an approver may do this")

// CancelFor cancels thread's running turn for u, who must be allowed to
// act on it; false if nothing was running.
func (s *Server) CancelFor(thread string, u User, via string) (bool, error) {
	if !s.MayAct(thread, u) {
		return false, ErrNotAllowed
	}
	conv := s.conversation(thread)
	ok := s.engine.Cancel(conv.thread, adapter.CancelledBy(u.display()+" ("+via+")"))
	if ok {
		s.log.Info().Str("thread", thread).Str("user", u.ID).Str("via", via).Msg("turn cancelled")
	}
	return ok, nil
}

// PermitFor answers the open permission request req for u, as a click
// on its button would: u must be allowed to answer it, and the first
// answer decides (ErrNotOpen after it); the thread's request then says
// who chose what, through via.
func (s *Server) PermitFor(req *acp.PermissionRequest, optionID string, u User, via string) error {
	access := s.acl() // read before answerPermission takes s.mu
	return s.answerPermission(req, optionID, u, via, func(op *openPermission) bool {
		return access.mayAct(op.channel, op.starter, u) || (access.user(u) && slices.Contains(op.approvers, u.ID))
	})
}

// SendFor writes text into thread for u, who must be allowed to see it,
// as a prompt shown by a message of the bot's that names u and via.
func (s *Server) SendFor(ctx context.Context, thread string, u User, via, text string) error {
	if !s.MaySee(thread, u) {
		return ErrNotAllowed
	}
	_, err := s.Start(ctx, Request{Thread: thread, By: fmt.Sprintf("<@%s> (%s)", u.ID, via), Text: text,
		Blocks: []acp.ContentBlock{acp.TextBlock(text)}, author: &u})
	return err
}

// OutcomeText says how a turn ended, as the line under its answer in
// the chat does (without the small print).
func OutcomeText(o adapter.Outcome) string {
	return strings.TrimPrefix(outcomeFooter(o), "-# ")
}

// AnswerFor answers the agent's open question req for u, who must be
// allowed to act on its thread, as its form or buttons in the chat
// would: with res (an accepted form's content is checked against the
// question), the first answer deciding (ErrNotOpen after it); the
// chat's question then says who answered, through via.
func (s *Server) AnswerFor(req *acp.ElicitationRequest, res acp.ElicitationResult, u User, via string) error {
	access := s.acl()
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, oq := range s.questions {
		if oq.req != req {
			continue
		}
		switch {
		case oq.ctx.Err() != nil:
			return ErrNotOpen
		case !access.mayAct(oq.channel, oq.starter, u):
			return ErrNotAllowed
		case res.Action == acp.ActionAccept && req.Mode == acp.ElicitForm:
			if err := req.Check(res.Content); err != nil {
				return fmt.Errorf("the answer is not complete: %w", err)
			}
		}
		delete(s.questions, key)
		oq.said = fmt.Sprintf("📝 <@%s> answered %s.", u.ID, via)
		if res.Action == acp.ActionDecline {
			oq.said = fmt.Sprintf("🚫 <@%s> declined %s.", u.ID, via)
		}
		oq.answer <- adapter.ElicitAnswer{Result: res, By: u.ID, ByName: u.handle()}
		s.log.Info().Str("thread", oq.thread).Str("user", u.ID).Str("via", via).Str("action", res.Action).Msg("question answered")
		return nil
	}
	return ErrNotOpen
}
