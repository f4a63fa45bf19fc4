package thread

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"acpbroker/adapter"
)

// sessionsWait bounds a command on sessions: listing them, resuming
// one, or forking, which may start an agent.
const sessionsWait = 2 * time.Minute

// linkThread names a thread in a message's text: the platform's link to
// it where it has one (Linker), else in words.
func (s *Server) linkThread(thread, words string) string {
	if l, ok := s.p.(Linker); ok {
		if link := l.ThreadLink(thread); link != "" {
			return link
		}
	}
	return words
}

// onSessions lists the agent's earlier sessions this thread may resume:
// as the agent lists them in the thread's workspace, else as the broker
// recorded them for this profile and workspace.
func (s *Server) onSessions(c Command, conv *conversation) {
	c.Reply.Defer(s.ctx)
	ctx, cancel := context.WithTimeout(s.ctx, sessionsWait)
	defer cancel()
	list, err := s.sessions.Sessions(ctx, conv.thread)
	if err != nil {
		c.Reply.Public(s.ctx, "The sessions could not be listed: "+err.Error())
		return
	}
	if len(list.Sessions) == 0 {
		c.Reply.Public(s.ctx, "The agent has no earlier sessions here yet.")
		return
	}
	var b strings.Builder
	if list.FromAgent {
		b.WriteString("**Sessions** of this thread's agent here, as it lists them:\n")
	} else {
		b.WriteString("**Sessions** of this thread's agent here, as the broker recorded them (the agent does not list its sessions):\n")
	}
	for _, ses := range list.Sessions {
		title := ses.Title
		if title == "" {
			title = "(no title)"
		}
		fmt.Fprintf(&b, "• `%s` **%s**", ses.ID, excerpt(title, 80))
		if !ses.Updated.IsZero() {
			b.WriteString(" · " + ago(ses.Updated))
		}
		switch {
		case ses.ID == list.Current:
			b.WriteString(" · this thread's now")
		case ses.Thread != "" && ses.Thread != conv.thread:
			b.WriteString(" · in " + s.linkThread(ses.Thread, "another thread"))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "Continue one here with `%s`.", s.p.Usage("resume", Arg{Name: "session"}))
	c.Reply.Public(s.ctx, excerptLines(b.String(), s.listLimit()))
}

// onResume continues one of the agent's earlier sessions in this thread.
func (s *Server) onResume(c Command, conv *conversation) {
	id := strings.Trim(c.Args["session"], "`")
	if id == "" {
		s.tell(c.Reply, fmt.Sprintf("Name the session to continue: `%s`; `%s` lists them.", s.p.Usage("resume", Arg{Name: "session"}), s.p.Usage("sessions")))
		return
	}
	c.Reply.Defer(s.ctx)
	ctx, cancel := context.WithTimeout(s.ctx, sessionsWait)
	defer cancel()
	res, err := s.sessions.Resume(ctx, conv.thread, id)
	if err != nil {
		c.Reply.Public(s.ctx, s.resumeRefusal(id, err))
		return
	}
	s.log.Info().Str("thread", conv.thread).Str("user", c.From.ID).Str("session", id).Str("method", res.Method).Msg("session resumed")
	text := fmt.Sprintf("🔁 <@%s> resumed session `%s`", c.From.ID, id)
	if res.Title != "" {
		text += " “" + excerpt(res.Title, 80) + "”"
	}
	text += fmt.Sprintf(" in this thread (%s): the agent continues that conversation from here.", res.Method)
	c.Reply.Public(s.ctx, text)
	if res.Title != "" {
		s.retitle(conv.thread, res.Title)
	}
}

// resumeRefusal says why session id was not resumed.
func (s *Server) resumeRefusal(id string, err error) string {
	switch {
	case errors.Is(err, adapter.ErrThreadBusy):
		return fmt.Sprintf("A turn is running or waiting in this thread: wait for it to end, or `%s` it, before resuming another session.", s.p.Usage("cancel"))
	case errors.Is(err, adapter.ErrNoSuchSession):
		return fmt.Sprintf("The agent has no session `%s` here; `%s` lists those this thread can resume.", excerpt(id, 80), s.p.Usage("sessions"))
	case errors.Is(err, adapter.ErrSameSession):
		return fmt.Sprintf("This thread is in session `%s` already.", excerpt(id, 80))
	case errors.Is(err, adapter.ErrCannotResume):
		return "This thread's agent can neither resume (session/resume) nor load (session/load) a session, so it cannot continue another one here."
	}
	return "The session could not be resumed: " + err.Error()
}

// onFork opens a new thread beside this one, which starts from this
// thread's agent session (session/fork) with an agent and a copy of the
// workspace of its own, started by whoever forked it.
func (s *Server) onFork(c Command, conv *conversation) {
	c.Reply.Defer(s.ctx)
	ctx, cancel := context.WithTimeout(s.ctx, sessionsWait)
	defer cancel()
	if err := s.sessions.CanFork(ctx, conv.thread); err != nil {
		c.Reply.Public(s.ctx, forkRefusal(err))
		return
	}
	intro := fmt.Sprintf("🍴 <@%s> forked %s: the new thread starts from that conversation, with an agent and a copy of the workspace of its own.", c.From.ID, s.linkThread(conv.thread, "a conversation"))
	introID, err := s.post(ctx, conv.channel, View{Text: intro})
	if err != nil {
		c.Reply.Public(s.ctx, "The new thread could not be opened: "+err.Error())
		return
	}
	child, err := s.startThread(ctx, conv.channel, introID, "Fork of a conversation", c.From.ID, conv.agent)
	if err != nil {
		c.Reply.Public(s.ctx, "The new thread could not be opened: "+err.Error())
		return
	}
	forked, err := s.sessions.Fork(ctx, conv.thread, child.thread)
	if err != nil {
		s.log.Warn().Err(err).Str("thread", conv.thread).Str("fork", child.thread).Msg("fork failed")
		if _, perr := s.post(s.ctx, child.thread, View{Text: "⚠️ This thread could not start from the forked conversation: " + forkRefusal(err)}); perr != nil {
			s.log.Debug().Err(perr).Msg("fork: failure not posted in the new thread")
		}
		c.Reply.Public(s.ctx, forkRefusal(err))
		return
	}
	s.log.Info().Str("thread", conv.thread).Str("fork", child.thread).Str("user", c.From.ID).Str("session", forked.SessionID).Str("from", forked.From).Msg("thread forked")
	greeting := fmt.Sprintf("🍴 Forked from %s: session `%s`, which starts from `%s`. The agent remembers that conversation; it works in `%s`. Send your next message here.",
		s.linkThread(conv.thread, "a conversation"), forked.SessionID, forked.From, forked.Dir)
	if _, err := s.post(s.ctx, child.thread, View{Text: greeting}); err != nil {
		s.log.Debug().Err(err).Msg("fork: greeting not posted")
	}
	c.Reply.Public(s.ctx, fmt.Sprintf("🍴 <@%s> forked this conversation into %s: it goes on there apart from this one.", c.From.ID, s.linkThread(child.thread, "a new thread of this channel")))
	if forked.Title != "" {
		s.retitle(child.thread, forked.Title)
	}
}

// forkRefusal says why a thread was not forked.
func forkRefusal(err error) string {
	switch {
	case errors.Is(err, adapter.ErrNoSession):
		return "This thread has no agent session to fork yet; send it a message first."
	case errors.Is(err, adapter.ErrNoFork):
		return "This thread's agent does not offer session/fork, which is still marked unstable in ACP, so no thread can start from this conversation."
	case errors.Is(err, adapter.ErrThreadBusy):
		return "The new thread is busy already; try again."
	case errors.Is(err, adapter.ErrWorkspaceTooBig):
		return "This thread's workspace is too big to copy for a fork: " + err.Error()
	}
	return "The agent could not fork this conversation into a new thread: " + err.Error()
}

// ago says how long ago t was, roughly.
func ago(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
}
