package thread

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"acpbroker/acp"
	"acpbroker/adapter"
)

// What a permission request's and a question's messages start with.
const (
	markPermission = "🔐"
	markQuestion   = "❓"
)

// openPermission is a permission request waiting for a click. It leaves
// the table on every terminal outcome: a click, a timeout, the turn's end.
type openPermission struct {
	thread  string
	channel string
	starter string
	title   string
	options []acp.PermissionOption
	answer  chan choice // buffered; written once, by the click that claims it
	ctx     context.Context
	// req is the request as the turn's Sink was given it (see
	// AnswerPermission); approvers may answer it besides those who may
	// act on the thread.
	req       *acp.PermissionRequest
	approvers []string
}

type choice struct {
	optionID string
	name     string
	by       string // the clicker's user id
	byName   string // and unique name
	// via is how a program answered (AnswerPermission), "" for a click;
	// kind and display are for the message that then says so.
	via, kind, display string
}

// permPrefix starts the action id of every permission button; the nonce
// keeps buttons of an earlier run of the broker from matching this one's.
var permPrefix = "perm:" + nonce() + ":"

// nonce is 8 random hex digits.
func nonce() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// ask posts the request in the thread with one button per option and
// waits for an allowed user's click, returned with the user's id and
// name, or for ctx to end (the permission timeout, or the turn's end),
// which answers "cancelled" and says so.
func (s *Server) ask(ctx context.Context, conv *conversation, req *acp.PermissionRequest) adapter.Answer {
	title := req.ToolCall.Title
	if title == "" {
		title = req.ToolCall.ToolCallID
	}
	starter := s.starterOf(conv)
	op := &openPermission{thread: conv.thread, channel: conv.channel, starter: starter, title: title, options: req.Options,
		answer: make(chan choice, 1), ctx: ctx, req: req, approvers: s.approversOf(conv)}
	s.mu.Lock()
	s.sweepPermissionsLocked()
	s.permSeq++
	key := permPrefix + strconv.FormatUint(s.permSeq, 36)
	s.perms[key] = op
	s.mu.Unlock()
	defer s.closePermission(key)

	who := whoMayAct(starter)
	text := fmt.Sprintf("%s **Permission needed**: the agent wants to run **%s**", markPermission, oneLine(title, 200))
	if in := rawInput(req); in != "" {
		text += "\n```\n" + in + "\n```"
	}
	text += "\n-# " + who + " can answer."
	closed := func(cause error) string {
		return fmt.Sprintf("%s ~~%s~~\n-# ⌛ Closed without an answer (%v); the agent was told *cancelled*.", markPermission, oneLine(title, 200), cause)
	}
	id, err := s.postAsk(ctx, conv.thread, View{Text: text, Actions: s.buttons(key, req.Options)}, closed)
	if err != nil {
		s.log.Warn().Err(err).Str("thread", conv.thread).Msg("permission request not posted; answering cancelled")
		return adapter.Answer{}
	}
	select {
	case ch := <-op.answer:
		if ch.via != "" {
			// Answered by a program: the thread is told who chose what.
			mark := "✅"
			if strings.HasPrefix(ch.kind, "reject") {
				mark = "⛔"
			}
			text := fmt.Sprintf("%s %s\n-# %s %s chose **%s** through %s", markPermission, oneLine(title, 200), mark, oneLine(ch.display, 80), oneLine(ch.name, 80), ch.via)
			s.spawnLate(func() { s.closeAsk(conv.thread, id, text) })
		}
		return adapter.Answer{Outcome: acp.PermissionOutcome{OptionID: ch.optionID}, By: ch.by, ByName: ch.byName}
	case <-ctx.Done():
	}
	if !s.closePermission(key) {
		// A click claimed it at the same moment; the turn already moved
		// on, and the agent is told "cancelled".
		<-op.answer
		return adapter.Answer{}
	}
	// The agent's answer must not wait on the platform: the edit that
	// closes the message runs on its own goroutine.
	text = closed(context.Cause(ctx))
	s.spawnLate(func() { s.closeAsk(conv.thread, id, text) })
	return adapter.Answer{}
}

// closePermission removes key from the table and reports whether it was
// still there.
func (s *Server) closePermission(key string) bool { return take(s, s.perms, key) }

// take removes key from one of the Server's tables of open questions
// (guarded by s.mu) and reports whether it was still there: whoever
// takes it answers.
func take[V any](s *Server, table map[string]V, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := table[key]
	delete(table, key)
	return ok
}

// sweepPermissionsLocked drops requests whose wait has ended; their
// owners are already answering "cancelled". s.mu must be held.
func (s *Server) sweepPermissionsLocked() {
	for k, op := range s.perms {
		if op.ctx.Err() != nil {
			delete(s.perms, k)
		}
	}
}

// buttons are a button per option, as many as a message holds.
func (s *Server) buttons(key string, options []acp.PermissionOption) []Action {
	var out []Action
	for i, o := range options {
		if i == s.lim.Buttons {
			break
		}
		style := Secondary
		switch {
		case strings.HasPrefix(o.Kind, "allow"):
			style = Success
		case strings.HasPrefix(o.Kind, "reject"):
			style = Danger
		}
		label := oneLine(o.Name, 80)
		if label == "" {
			label = o.OptionID
		}
		out = append(out, Action{ID: key + ":" + strconv.Itoa(i), Label: label, Style: style})
	}
	return out
}

// rawInput shows what the tool call will do, if the agent said.
func rawInput(req *acp.PermissionRequest) string {
	raw := strings.TrimSpace(string(req.ToolCall.RawInput))
	if raw == "" || raw == "null" || raw == "{}" {
		return ""
	}
	raw = strings.ReplaceAll(raw, "```", "'''")
	if r := []rune(raw); len(r) > 800 {
		raw = string(r[:799]) + "…"
	}
	return raw
}

// oneLine is s excerpted to n characters with its asterisks escaped,
// for a title in bold.
func oneLine(s string, n int) string {
	return strings.ReplaceAll(excerpt(s, n), "*", "\\*")
}

// onPermissionClick answers a button click: the first allowed click
// claims the request and the buttons are replaced by who chose what;
// anyone else, and any click on a request no longer open, gets a
// private reply.
func (s *Server) onPermissionClick(c Click) {
	cut := strings.LastIndexByte(c.Action, ':')
	key := c.Action[:max(cut, 0)]
	idx, _ := strconv.Atoi(c.Action[cut+1:])
	access := s.acl()
	s.mu.Lock()
	op := s.perms[key]
	switch {
	case op == nil || op.ctx.Err() != nil:
		s.mu.Unlock()
		s.tell(c.Reply, "This permission request is no longer open.")
		return
	case !access.channel(op.channel):
		s.mu.Unlock()
		s.tell(c.Reply, "This channel is no longer served by the bot; the request can't be answered here.")
		return
	case !access.mayAct(op.channel, op.starter, c.From) && !(access.user(c.From) && slices.Contains(op.approvers, c.From.ID)):
		s.mu.Unlock()
		s.tell(c.Reply, whoMayAct(op.starter)+" can answer this request; you can't.")
		return
	case idx < 0 || idx >= len(op.options):
		s.mu.Unlock()
		s.tell(c.Reply, "That button is not one of the request's options.")
		return
	}
	delete(s.perms, key)
	opt := op.options[idx]
	op.answer <- choice{optionID: opt.OptionID, name: opt.Name, by: c.From.ID, byName: c.From.handle()}
	s.mu.Unlock()
	s.log.Info().Str("thread", op.thread).Str("user", c.From.ID).Str("option", opt.OptionID).Msg("permission answered")
	mark := "✅"
	if strings.HasPrefix(opt.Kind, "reject") {
		mark = "⛔"
	}
	c.Reply.Update(s.ctx, View{Text: fmt.Sprintf("%s %s\n-# %s <@%s> chose **%s**", markPermission, oneLine(op.title, 200), mark, c.From.ID, oneLine(opt.Name, 80))})
}

// postAsk posts a question of a turn's (a permission request, the
// agent's question) whose ctx may end while the post is on its way. The
// post itself is the Server's, so that a message the platform took is
// always known; the turn waits for it no longer than ctx. When ctx ends
// first, postAsk returns ctx's cause at once, and the message, once
// posted, is edited to closed(cause) (its actions taken off).
func (s *Server) postAsk(ctx context.Context, thread string, v View, closed func(cause error) string) (string, error) {
	type result struct {
		id  string
		err error
	}
	done := make(chan result, 1)
	abandoned := make(chan struct{})
	var once sync.Once
	closeOnce := func(id string) { once.Do(func() { s.closeAsk(thread, id, closed(context.Cause(ctx))) }) }
	started := s.spawnLate(func() {
		id, err := s.post(s.ctx, thread, v)
		done <- result{id, err}
		select {
		case <-abandoned:
			if err == nil {
				closeOnce(id)
			}
		default:
		}
	})
	if !started {
		return "", errClosing
	}
	select {
	case r := <-done:
		return r.id, r.err
	case <-ctx.Done():
	}
	close(abandoned)
	select {
	case r := <-done: // posted as ctx ended: the poster may have returned
		if r.err == nil {
			s.spawnLate(func() { closeOnce(r.id) })
		}
	default:
	}
	return "", context.Cause(ctx)
}

// closeAsk edits a question's message to closed, taking its actions off.
func (s *Server) closeAsk(thread, id, closed string) {
	if err := s.p.Edit(s.ctx, thread, id, View{Text: closed}); err != nil {
		s.log.Debug().Err(err).Msg("closed question not updated")
	}
}
