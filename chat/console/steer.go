package console

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat"
)

// sessionsWait bounds /sessions, /resume and /fork, which may start an
// agent.
const sessionsWait = 2 * time.Minute

// steerCommand serves /steer, /queue, /sessions, /resume and /fork
// (name, without its "/"), rest being what follows it. The console's
// user may act on its conversation: a steer interrupts, and any waiting
// message may be sent now or removed.
func (c *Console) steerCommand(thread, name, rest string) {
	switch name {
	case "steer":
		if rest == "" {
			c.printf("[/steer TEXT stops the running turn and sends TEXT next, in the same session]\n")
			return
		}
		c.submitPrompt(thread, rest, true)
	case "queue":
		c.queue(thread, rest)
	case "sessions", "resume", "fork":
		se, ok := c.Engine.(chat.SessionEngine)
		if !ok {
			c.printf("[this broker keeps no agent sessions to list, resume or fork]\n")
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), sessionsWait)
		defer cancel()
		switch name {
		case "sessions":
			c.sessions(ctx, se, thread)
		case "resume":
			c.resume(ctx, se, thread, rest)
		default:
			c.fork(ctx, se, thread)
		}
	}
}

// queue lists the messages waiting in the conversation, or with "remove
// N" or "send N" removes one or sends it now.
func (c *Console) queue(thread, args string) {
	q, ok := c.Engine.(chat.QueueEngine)
	if !ok {
		c.printf("[this broker shows no queue]\n")
		return
	}
	waiting := q.Waiting(thread)
	verb, n, _ := strings.Cut(args, " ")
	if _, err := strconv.Atoi(verb); err == nil {
		verb, n = "remove", verb // "/queue 2" removes, as everywhere
	}
	if verb == "" {
		if len(waiting) == 0 {
			c.printf("[nothing is waiting]\n")
			return
		}
		for i, w := range waiting {
			next := ""
			if w.Next {
				next = ", next"
			}
			c.printf("[waiting %d: “%s” (%s%s)]\n", i+1, w.Prompt.Title, time.Since(w.Queued).Round(time.Second), next)
		}
		c.printf("[/queue send N sends one now, interrupting the running turn; /queue remove N removes one]\n")
		return
	}
	i, err := strconv.Atoi(strings.TrimSpace(n))
	if err != nil || i < 1 || i > len(waiting) || (verb != "send" && verb != "remove") {
		c.printf("[/queue send N or /queue remove N, N one of the %d waiting]\n", len(waiting))
		return
	}
	p := waiting[i-1].Prompt
	if verb == "send" {
		err = q.SendNow(thread, p, "console user")
	} else {
		err = q.Withdraw(thread, p, adapter.RemovedBy("console user"))
	}
	if err != nil {
		c.printf("[%v]\n", err)
	}
}

// submitPrompt is submit, interrupting the running turn when interrupt
// is set.
func (c *Console) submitPrompt(thread, line string, interrupt bool) {
	s := &sink{c: c}
	c.pending.Add(1)
	p := &adapter.Prompt{Ref: "console", Title: title(line), Author: "console user", AuthorName: "console user", Agent: c.agent,
		Blocks: []acp.ContentBlock{acp.TextBlock(line)}, Sink: s, Interrupt: interrupt, MayInterrupt: true}
	if err := c.Engine.Submit(thread, p); err != nil {
		c.pending.Done()
		c.printf("[refused: %v]\n", err)
	}
}

func (c *Console) sessions(ctx context.Context, se chat.SessionEngine, thread string) {
	list, err := se.Sessions(ctx, thread)
	switch {
	case err != nil:
		c.printf("[the sessions could not be listed: %v]\n", err)
		return
	case len(list.Sessions) == 0:
		c.printf("[no earlier sessions here]\n")
		return
	case list.FromAgent:
		c.printf("[sessions, as the agent lists them:]\n")
	default:
		c.printf("[sessions, as the broker recorded them:]\n")
	}
	for _, s := range list.Sessions {
		line := s.ID
		if s.Title != "" {
			line += " “" + s.Title + "”"
		}
		if !s.Updated.IsZero() {
			line += " " + s.Updated.Local().Format("Jan 2 15:04")
		}
		if s.ID == list.Current {
			line += " (this conversation's)"
		}
		c.printf("[  %s]\n", line)
	}
	c.printf("[/resume ID continues one here]\n")
}

func (c *Console) resume(ctx context.Context, se chat.SessionEngine, thread, id string) {
	if id == "" {
		c.printf("[/resume ID: /sessions lists them]\n")
		return
	}
	res, err := se.Resume(ctx, thread, id)
	if err != nil {
		c.printf("[not resumed: %v]\n", err)
		return
	}
	text := "[resumed session " + id
	if res.Title != "" {
		text += " “" + res.Title + "”"
	}
	c.printf("%s with %s: the agent continues it from here]\n", text, res.Method)
}

// fork starts a new conversation from this one's session, and the
// console goes on in it.
func (c *Console) fork(ctx context.Context, se chat.SessionEngine, thread string) {
	if err := se.CanFork(ctx, thread); err != nil {
		if errors.Is(err, adapter.ErrNoFork) {
			c.printf("[the agent does not offer session/fork, which is still unstable in ACP: this conversation cannot be forked]\n")
			return
		}
		c.printf("[not forked: %v]\n", err)
		return
	}
	child := fmt.Sprintf("console-%d", time.Now().UnixNano())
	f, err := se.Fork(ctx, thread, child)
	if err != nil {
		c.printf("[not forked: %v]\n", err)
		return
	}
	c.thread = child
	c.printf("[forked: a new conversation from session %s, in session %s, working in %s; the next message goes there]\n", f.From, f.SessionID, f.Dir)
}
