package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/store"
)

// PromptView is GET /v1/prompts/{id}'s answer.
type PromptView struct {
	ID         string     `json:"id"`
	State      string     `json:"state"`
	Platform   string     `json:"platform,omitempty"`
	Thread     string     `json:"thread"`
	Link       string     `json:"link,omitempty"`
	Created    time.Time  `json:"created"`
	Started    *time.Time `json:"started,omitempty"`
	Ended      *time.Time `json:"ended,omitempty"`
	StopReason string     `json:"stop_reason,omitempty"`
	Error      string     `json:"error,omitempty"`
	Summary    string     `json:"summary,omitempty"`
	Answer     string     `json:"answer"`
	// AnswerBytes is the whole answer's length; Answer keeps its first
	// and last 128 KiB of a longer one.
	AnswerBytes int64           `json:"answer_bytes"`
	Usage       json.RawMessage `json:"usage,omitempty"`
	// Permissions are the open permission requests.
	Permissions []PermissionAsked `json:"permissions"`
}

func viewOf(rec store.Prompt, answer string) PromptView {
	v := PromptView{ID: rec.ID, State: rec.State, Platform: rec.Platform, Thread: rec.Thread, Link: rec.Link, Created: rec.Created,
		StopReason: rec.StopReason, Error: rec.Error, Summary: rec.Summary, Answer: answer, AnswerBytes: rec.AnswerBytes, Usage: rec.Usage,
		Permissions: []PermissionAsked{}}
	if !rec.Started.IsZero() {
		v.Started = &rec.Started
	}
	if !rec.Ended.IsZero() {
		v.Ended = &rec.Ended
	}
	return v
}

// lookup is a prompt as GET shows it, from memory or the store.
func (s *Server) lookup(id string) (PromptView, bool) {
	p := s.prompts.get(id)
	if p != nil {
		return p.view(), true
	}
	rec, answer, ok, err := s.config().Store.Prompt(id)
	if !ok || err != nil {
		return PromptView{}, false
	}
	if !final(rec.State) {
		// Recorded running by a broker that stopped.
		rec.State, rec.Error = StateFailed, "the broker stopped while the prompt ran"
	}
	return viewOf(rec, answer), true
}

// owned finds the token's prompt id, in memory (p) or only recorded;
// it answers 404 itself when there is none.
func (s *Server) owned(w http.ResponseWriter, r *http.Request, tok *tokenEntry) (*prompt, *store.Prompt, bool) {
	id := r.PathValue("id")
	p := s.prompts.get(id)
	if p != nil {
		p.mu.Lock()
		owner := p.client
		p.mu.Unlock()
		if owner == tok.Name {
			return p, nil, true
		}
	} else if rec, _, ok, err := s.config().Store.Prompt(id); ok && err == nil && rec.Token == tok.Name {
		return nil, &rec, true
	}
	fail(w, http.StatusNotFound, "id", "no prompt %s of token %s's", id, tok.Name)
	return nil, nil, false
}

func (s *Server) getPrompt(w http.ResponseWriter, r *http.Request, tok *tokenEntry) {
	if _, _, ok := s.owned(w, r, tok); !ok {
		return
	}
	v, _ := s.lookup(r.PathValue("id"))
	reply(w, http.StatusOK, v)
}

// CancelResponse is POST /v1/prompts/{id}/cancel's answer.
type CancelResponse struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

func (s *Server) cancelPrompt(w http.ResponseWriter, r *http.Request, tok *tokenEntry) {
	p, rec, ok := s.owned(w, r, tok)
	if !ok {
		return
	}
	if p == nil {
		fail(w, http.StatusConflict, "", "prompt %s has ended: %s", rec.ID, cmpOr(rec.State, "failed"))
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if final(p.rec.State) {
		fail(w, http.StatusConflict, "", "prompt %s has ended: %s", p.rec.ID, p.rec.State)
		return
	}
	if !p.cancel {
		p.cancel, p.cancelCause = true, adapter.CancelledBy(tok.Name+" (through the API)")
		if p.started {
			p.front.Cancel(p.rec.Thread, p.cancelCause)
		}
		s.log.Info().Str("prompt", p.rec.ID).Str("token", tok.Name).Bool("running", p.started).Msg("API prompt cancelled")
	}
	reply(w, http.StatusAccepted, CancelResponse{ID: p.rec.ID, State: stateCancelling})
}

// PermissionRequest is POST /v1/prompts/{id}/permission's body.
type PermissionRequest struct {
	Request string `json:"request"`
	Option  string `json:"option"`
}

func (s *Server) answerPermission(w http.ResponseWriter, r *http.Request, tok *tokenEntry) {
	if !tok.MayApprove {
		fail(w, http.StatusForbidden, "", "token %s may not answer permission requests (may_approve)", tok.Name)
		return
	}
	p, rec, ok := s.owned(w, r, tok)
	if !ok {
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	var req PermissionRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			fail(w, http.StatusRequestEntityTooLarge, "", "the body is more than 64 KiB")
			return
		}
		fail(w, http.StatusBadRequest, "", "the body is not {\"request\": …, \"option\": …}: %v", err)
		return
	}
	switch {
	case req.Request == "":
		fail(w, http.StatusBadRequest, "request", "request is required: the id a permission_asked event gave")
		return
	case req.Option == "":
		fail(w, http.StatusBadRequest, "option", "option is required: one of the request's options' ids")
		return
	case p == nil:
		fail(w, http.StatusConflict, "request", "prompt %s has ended: %s", rec.ID, rec.State)
		return
	}
	p.mu.Lock()
	pr := p.perms[req.Request]
	switch {
	case pr == nil:
		p.mu.Unlock()
		fail(w, http.StatusNotFound, "request", "prompt %s has no permission request %s", p.rec.ID, req.Request)
		return
	case !pr.open:
		msg := answeredText(pr)
		p.mu.Unlock()
		fail(w, http.StatusConflict, "request", "%s", msg)
		return
	case !slices.ContainsFunc(pr.req.Options, func(o acp.PermissionOption) bool { return o.OptionID == req.Option }):
		p.mu.Unlock()
		fail(w, http.StatusBadRequest, "option", "%q is not one of the request's options: %s", req.Option, optionIDs(pr.req))
		return
	}
	pr.mine = true
	p.mu.Unlock()
	if err := p.front.Answer(pr.req, req.Option, tok.Name); err != nil {
		// Someone in the chat was first (or the request closed): the
		// turn's Ask returns with that, which the request then says.
		p.mu.Lock()
		pr.mine = false
		p.mu.Unlock()
		fail(w, http.StatusConflict, "request", "%s", p.awaitClosed(r.Context(), pr))
		return
	}
	s.log.Info().Str("prompt", p.rec.ID).Str("token", tok.Name).Str("request", req.Request).Str("option", req.Option).Msg("API answered a permission request")
	reply(w, http.StatusOK, PermissionAnswered{Request: req.Request, Option: req.Option, By: tok.Name, Via: "api"})
}

// awaitClosed waits, within ctx and a second, for a request another
// answer claimed to say how it was answered, and says it.
func (p *prompt) awaitClosed(ctx context.Context, pr *perm) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	for pr.open && ctx.Err() == nil {
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		p.mu.Lock()
	}
	return answeredText(pr)
}

// answeredText says how a request that is no longer open was closed.
func answeredText(pr *perm) string {
	switch {
	case pr.open:
		return "the permission request is being answered elsewhere; try again"
	case pr.via == "chat" && pr.outcome != "":
		return fmt.Sprintf("the permission request was answered first in the chat, by %s: %s", pr.by, pr.outcome)
	case pr.via == "chat":
		return fmt.Sprintf("the permission request was answered first in the chat, by %s", pr.by)
	case pr.via == "api":
		return fmt.Sprintf("the permission request was answered already through the API, by %s: %s", pr.by, pr.outcome)
	}
	return fmt.Sprintf("the permission request is closed (%s); the agent was told cancelled", pr.via)
}

func optionIDs(req *acp.PermissionRequest) string {
	var ids []string
	for _, o := range req.Options {
		ids = append(ids, o.OptionID)
	}
	return strings.Join(ids, ", ")
}
