package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/store"
)

// Attachment is a text file given with a prompt, inlined as a chat
// inlines one attached to a message.
type Attachment struct {
	Name    string `json:"name"`
	Content string `json:"content"`
}

// StartRequest is POST /v1/prompts's body.
type StartRequest struct {
	Platform    string       `json:"platform,omitempty"`
	Channel     string       `json:"channel,omitempty"`
	Thread      string       `json:"thread,omitempty"`
	Agent       string       `json:"agent,omitempty"`
	Text        string       `json:"text"`
	Attachments []Attachment `json:"attachments,omitempty"`
}

// StartResponse is POST /v1/prompts's answer.
type StartResponse struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	Platform string `json:"platform,omitempty"`
	Channel  string `json:"channel,omitempty"`
	Thread   string `json:"thread"`
	Link     string `json:"link,omitempty"`
	Events   string `json:"events"`
}

// badRequest is a request's fault, with the field it is in.
type badRequest struct {
	status int
	field  string
	msg    string
}

func (e *badRequest) Error() string { return e.msg }

func bad(status int, field, format string, args ...any) *badRequest {
	return &badRequest{status: status, field: field, msg: fmt.Sprintf(format, args...)}
}

// maxAttachments bounds a prompt's attachments, as a chat message's.
const maxAttachments = 10

// decodeStart reads and checks a POST /v1/prompts body against the
// token and the configuration; nothing is started.
func decodeStart(body []byte, maxText int64) (StartRequest, *badRequest) {
	var req StartRequest
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &typeErr):
			return req, bad(http.StatusBadRequest, typeErr.Field, "%s must be a %s", typeErr.Field, typeErr.Type)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return req, bad(http.StatusBadRequest, field, "unknown field %q: the fields are platform, channel, thread, agent, text, attachments", field)
		}
		return req, bad(http.StatusBadRequest, "", "the body is not a JSON object: %v", err)
	}
	if dec.More() {
		return req, bad(http.StatusBadRequest, "", "the body holds more than one JSON object")
	}
	switch {
	case strings.TrimSpace(req.Text) == "" && len(req.Attachments) == 0:
		return req, bad(http.StatusBadRequest, "text", "text is required: what the agent is asked")
	case req.Channel != "" && req.Thread != "":
		return req, bad(http.StatusBadRequest, "thread", "give channel or thread, not both")
	case req.Thread != "" && req.Agent != "":
		return req, bad(http.StatusBadRequest, "agent", "a thread keeps the agent it began with: name an agent only for a new thread")
	case len(req.Attachments) > maxAttachments:
		return req, bad(http.StatusRequestEntityTooLarge, "attachments", "%d attachments, more than %d", len(req.Attachments), maxAttachments)
	}
	for i, a := range req.Attachments {
		field := fmt.Sprintf("attachments[%d]", i)
		switch {
		case strings.TrimSpace(a.Name) == "" || strings.ContainsAny(a.Name, "/\x00\n"):
			return req, bad(http.StatusBadRequest, field+".name", "%s.name must be a file name", field)
		case int64(len(a.Content)) > maxText:
			return req, bad(http.StatusRequestEntityTooLarge, field+".content", "%s (%s) is %d bytes, more than the %d a text file may have", field, a.Name, len(a.Content), maxText)
		}
	}
	return req, nil
}

// blocks is what the agent is given: the text, then each attachment as
// an embedded text resource, as a chat gives a text file.
func (req StartRequest) blocks() []acp.ContentBlock {
	var out []acp.ContentBlock
	if strings.TrimSpace(req.Text) != "" {
		out = append(out, acp.TextBlock(req.Text))
	}
	for _, a := range req.Attachments {
		out = append(out, acp.TextBlock(fmt.Sprintf("Attached file %s:\n```\n%s\n```", a.Name, strings.TrimRight(a.Content, "\n"))))
	}
	return out
}

func (s *Server) postPrompt(w http.ResponseWriter, r *http.Request, tok *tokenEntry) {
	cfg := s.config()
	r.Body = http.MaxBytesReader(w, r.Body, cfg.MaxBodyBytes)
	body, err := readAll(r)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			fail(w, http.StatusRequestEntityTooLarge, "", "the body is more than api.max_body_bytes (%d bytes)", cfg.MaxBodyBytes)
			return
		}
		fail(w, http.StatusBadRequest, "", "the body could not be read: %v", err)
		return
	}
	req, berr := decodeStart(body, cfg.MaxTextBytes)
	if berr != nil {
		fail(w, berr.status, berr.field, "%s", berr.msg)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if len(key) > maxKeyLen {
		fail(w, http.StatusBadRequest, "Idempotency-Key", "the Idempotency-Key is longer than %d characters", maxKeyLen)
		return
	}
	digest := sha256.Sum256(body)
	sum := hex.EncodeToString(digest[:])
	var entry *keyEntry
	if key != "" {
		var prior *keyEntry
		prior, entry = s.keys.claim(tok.Name, key, sum)
		if prior != nil {
			s.replay(w, r, prior, sum)
			return
		}
	}
	resp, berr := s.start(r.Context(), tok, req, key, sum)
	if entry != nil {
		s.keys.settle(tok.Name, key, entry, resp)
	}
	if berr != nil {
		fail(w, berr.status, berr.field, "%s", berr.msg)
		return
	}
	w.Header().Set("Location", "/v1/prompts/"+resp.ID)
	reply(w, http.StatusAccepted, resp)
}

// start checks what the token may do and starts the prompt; nothing is
// started when it refuses.
func (s *Server) start(ctx context.Context, tok *tokenEntry, req StartRequest, key, digest string) (*StartResponse, *badRequest) {
	cfg := s.config()
	platform := req.Platform
	if platform == "" {
		platform = cfg.Default
	}
	front := cfg.Fronts[platform]
	headless := platform == HeadlessPlatform
	switch {
	case req.Platform == "" && cfg.Default == "":
		return nil, bad(http.StatusBadRequest, "platform", "platform is required: the broker serves %s", strings.Join(sortedFronts(cfg.Fronts), ", "))
	case front == nil:
		return nil, bad(http.StatusBadRequest, "platform", "platform %q is not served: one of %s", req.Platform, strings.Join(sortedFronts(cfg.Fronts), ", "))
	case req.Agent != "" && !cfg.Profile(req.Agent):
		return nil, bad(http.StatusBadRequest, "agent", "there is no agent profile %q", req.Agent)
	case req.Agent != "" && !tok.MayName(req.Agent):
		return nil, bad(http.StatusForbidden, "agent", "token %s may not name the agent %q", tok.Name, req.Agent)
	}
	if !headless && req.Channel == "" && req.Thread == "" {
		return nil, bad(http.StatusBadRequest, "channel", "channel (a new thread there) or thread (one of the bot's) is required")
	}
	channel := req.Channel
	if req.Thread != "" {
		if headless {
			owner, ok := s.threads.owner(req.Thread)
			if !ok || owner != tok.Name {
				return nil, bad(http.StatusNotFound, "thread", "no thread %s of token %s's", req.Thread, tok.Name)
			}
		} else {
			ch, err := front.Channel(ctx, req.Thread)
			if err != nil {
				return nil, bad(http.StatusNotFound, "thread", "thread %s is not one of the bot's on %s", req.Thread, platform)
			}
			channel = ch
		}
	}
	if !headless && !tok.MayUse(platform, channel) {
		field := "channel"
		if req.Thread != "" {
			field = "thread"
		}
		return nil, bad(http.StatusForbidden, field, "token %s may not use channel %s on %s", tok.Name, channel, platform)
	}
	now := s.now().UTC()
	rec := store.Prompt{ID: "p-" + randomHex(10), Token: tok.Name, Key: key, Digest: digest, Created: now, State: StateQueued}
	if !headless {
		rec.Platform = platform
	}
	p := newPrompt(s, front, tok.Name, rec)
	placed, err := front.Start(ctx, Job{Channel: req.Channel, Thread: req.Thread, Agent: req.Agent, Client: tok.Name,
		Text: req.Text, Blocks: req.blocks(), Sink: func(inner adapter.Sink) adapter.Sink {
			s.prompts.add(rec.ID, p)
			return p.sink(inner)
		}})
	if err != nil {
		s.prompts.remove(rec.ID)
		return nil, startError(err, platform)
	}
	p.mu.Lock()
	p.rec.Thread, p.rec.Link = placed.Thread, placed.Link
	rec = p.rec
	p.mu.Unlock()
	if headless {
		s.threads.use(placed.Thread, tok.Name, now)
	}
	cfg.Store.PutPrompt(rec, nil)
	s.log.Info().Str("prompt", rec.ID).Str("token", tok.Name).Str("platform", platform).Str("thread", placed.Thread).Msg("API prompt started")
	view := p.view()
	return &StartResponse{ID: rec.ID, State: view.State, Platform: rec.Platform, Channel: placed.Channel, Thread: placed.Thread,
		Link: placed.Link, Events: "/v1/prompts/" + rec.ID + "/events"}, nil
}

// startError is a Front's refusal as the API answers it.
func startError(err error, platform string) *badRequest {
	switch {
	case errors.Is(err, ErrNotServed):
		return bad(http.StatusForbidden, "channel", "%v on %s", err, platform)
	case errors.Is(err, ErrNoThread):
		return bad(http.StatusNotFound, "thread", "%v on %s", err, platform)
	case errors.Is(err, adapter.ErrQueueFull):
		return bad(http.StatusTooManyRequests, "thread", "%v", err)
	case errors.Is(err, ErrOffline), errors.Is(err, adapter.ErrShutdown):
		return bad(http.StatusServiceUnavailable, "", "%v: try again later", err)
	}
	return bad(http.StatusBadGateway, "", "the prompt could not be started: %v", err)
}

func sortedFronts(m map[string]Front) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// readAll reads a request's body (bounded by MaxBytesReader).
func readAll(r *http.Request) ([]byte, error) { return io.ReadAll(r.Body) }
