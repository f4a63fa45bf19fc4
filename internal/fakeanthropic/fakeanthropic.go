// Package fakeanthropic is a scriptable stand-in for the Anthropic Messages
// API, enough for Claude Code (claude-agent-acp) to run a turn against it
// offline. It is a real HTTP server on a loopback port: set
// ANTHROPIC_BASE_URL to URL().
//
// POST /v1/messages is answered as Server-Sent Events (or one JSON message
// when the request does not ask for a stream). A request that carries tools
// (a turn's main request) takes the next scripted Reply from the queue; a
// request without tools (title or quota queries and the like), or one that
// finds the queue empty, gets a short default text. HEAD / and
// count_tokens are answered too; any other path gets a 404 and is recorded
// with the rest.
package fakeanthropic

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"acpbroker/internal/fakemodel"
)

// DefaultText is the answer to requests with no scripted reply.
const DefaultText = fakemodel.DefaultText

// Reply is one scripted answer to a main request.
type Reply = fakemodel.Reply

// Text answers with a text block streamed as one delta per chunk, and stop
// reason end_turn.
func Text(chunks ...string) Reply { return fakemodel.Text(chunks...) }

// ToolUse answers with one tool_use block (stop reason tool_use); input is
// marshalled to the tool's JSON input.
func ToolUse(name string, input any) Reply { return fakemodel.Call(name, input) }

// Bash asks Claude Code to run command with its Bash tool, which needs the
// client's permission in the default mode.
func Bash(command, description string) Reply {
	return ToolUse("Bash", map[string]string{"command": command, "description": description})
}

// Hang starts the event stream (message_start) and then sends nothing
// until the client disconnects or the server closes.
func Hang() Reply { return fakemodel.Hang() }

// Status answers with a plain HTTP error status and an API error body.
func Status(code int) Reply { return fakemodel.Status(code) }

// ToolResult is a tool_result block found in a request's messages.
type ToolResult struct {
	ToolUseID string
	Content   string
	IsError   bool
}

// Request is what the server received and how it answered.
type Request struct {
	Seq    int
	Method string
	// Path is the URL path; Query the raw query (the SDK adds "beta=true").
	Path   string
	Query  string
	Header http.Header
	Body   []byte
	// Model and Stream are the body's "model" and "stream".
	Model  string
	Stream bool
	// Tools is the number of tools the request offered.
	Tools int
	// Scripted is true when the answer came from the queue.
	Scripted bool
	// Served names the answer: "text", "tool_use", "hang", "status",
	// "default", "head", "count_tokens", "models", "not_found" or
	// "bad_request".
	Served string
	// ToolResults lists the tool_result blocks in the messages; they are
	// the whole conversation, so earlier results appear again.
	ToolResults []ToolResult
	Start       time.Time
	// End is when the handler returned; zero while it is running.
	End time.Time
	// ClientGone is true when the client went away before the answer ended.
	ClientGone bool
}

// Options tune a Server. The zero value works.
type Options struct {
	// Logf, if set, receives one line per request (method, path, answer).
	Logf func(format string, args ...any)
}

// Server is a running fake. Its methods are safe for concurrent use.
type Server struct {
	*fakemodel.Server[Request]
}

// Start listens on 127.0.0.1 on a free port and serves until Close.
func Start(opts Options) (*Server, error) {
	s := &Server{}
	core, err := fakemodel.Start[Request]("fakeanthropic", opts.Logf, func(mux *http.ServeMux) {
		mux.HandleFunc("POST /v1/messages", s.serveMessages)
		mux.HandleFunc("POST /v1/messages/count_tokens", s.serveCountTokens)
		mux.HandleFunc("GET /v1/models", s.serveModels)
		mux.HandleFunc("/", s.serveOther)
	})
	if err != nil {
		return nil, err
	}
	s.Server = core
	return s, nil
}

// URL is the base URL for ANTHROPIC_BASE_URL (no trailing slash, no path).
func (s *Server) URL() string { return s.BaseURL() }

func (s *Server) record(r *http.Request, body []byte) *Request {
	return s.Record(func(seq int) *Request {
		return &Request{Seq: seq, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body, Start: time.Now()}
	})
}

func (s *Server) finish(req *Request, served string) {
	s.Update(req, func(q *Request) { q.Served, q.End = served, time.Now() })
}

func (s *Server) serveOther(w http.ResponseWriter, r *http.Request) {
	body, _ := fakemodel.ReadBody(r, 16<<20)
	req := s.record(r, body)
	if r.URL.Path == "/" && (r.Method == http.MethodHead || r.Method == http.MethodGet) {
		w.WriteHeader(http.StatusOK)
		s.finish(req, "head")
		return
	}
	s.Logf("fakeanthropic: %s %s: unknown path, 404", r.Method, r.URL.Path)
	writeError(w, http.StatusNotFound, "not_found_error", "no such endpoint in the fake")
	s.finish(req, "not_found")
}

func (s *Server) serveCountTokens(w http.ResponseWriter, r *http.Request) {
	body, _ := fakemodel.ReadBody(r, 64<<20)
	req := s.record(r, body)
	writeJSON(w, map[string]any{"input_tokens": 100})
	s.finish(req, "count_tokens")
}

func (s *Server) serveModels(w http.ResponseWriter, r *http.Request) {
	req := s.record(r, nil)
	writeJSON(w, map[string]any{"data": []any{}, "has_more": false, "first_id": nil, "last_id": nil})
	s.finish(req, "models")
}

func writeJSON(w http.ResponseWriter, v any) { fakemodel.WriteJSON(w, http.StatusOK, v) }

func writeError(w http.ResponseWriter, code int, kind, msg string) {
	fakemodel.WriteJSON(w, code, map[string]any{
		"type":  "error",
		"error": map[string]any{"type": kind, "message": msg},
	})
}

// requestBody is the part of a Messages API request the fake looks at.
type requestBody struct {
	Model    string            `json:"model"`
	Stream   bool              `json:"stream"`
	Tools    []json.RawMessage `json:"tools"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

type contentBlock struct {
	Type      string          `json:"type"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

func parseRequest(req *Request) error {
	var b requestBody
	if err := json.Unmarshal(req.Body, &b); err != nil {
		return err
	}
	req.Model, req.Stream, req.Tools = b.Model, b.Stream, len(b.Tools)
	for _, m := range b.Messages {
		var blocks []contentBlock
		if json.Unmarshal(m.Content, &blocks) != nil {
			continue
		}
		for _, blk := range blocks {
			if blk.Type == "tool_result" {
				req.ToolResults = append(req.ToolResults, ToolResult{ToolUseID: blk.ToolUseID, Content: fakemodel.FlatText(blk.Content), IsError: blk.IsError})
			}
		}
	}
	return nil
}

func (s *Server) serveMessages(w http.ResponseWriter, r *http.Request) {
	body, err := fakemodel.ReadBody(r, 64<<20)
	req := s.record(r, body)
	if err == nil {
		s.Update(req, func(q *Request) { err = parseRequest(q) })
	}
	if err != nil {
		s.Logf("fakeanthropic: %s %s: unreadable body: %v", r.Method, r.URL.Path, err)
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		s.finish(req, "bad_request")
		return
	}
	reply, scripted := s.Next(req.Tools > 0)
	served := map[fakemodel.Kind]string{fakemodel.KindText: "text", fakemodel.KindCall: "tool_use", fakemodel.KindHang: "hang", fakemodel.KindStatus: "status"}[reply.Kind]
	if !scripted {
		served = "default"
	}
	s.Update(req, func(q *Request) { q.Scripted, q.Served = scripted, served })
	s.Logf("fakeanthropic: %s %s #%d model=%s stream=%v tools=%d tool_results=%d: %s", r.Method, r.URL.Path, req.Seq, req.Model, req.Stream, req.Tools, len(req.ToolResults), served)

	var gone bool
	switch {
	case reply.Kind == fakemodel.KindStatus:
		writeError(w, reply.Status, "api_error", fmt.Sprintf("scripted status %d", reply.Status))
	case !req.Stream && reply.Kind != fakemodel.KindHang:
		writeJSON(w, message(req, reply, true))
	default:
		gone = s.stream(w, r, req, reply)
	}
	s.Update(req, func(q *Request) { q.ClientGone, q.End = gone, time.Now() })
}

const (
	inputTokens  = 100
	outputTokens = 10
)

func usage(output int) map[string]any {
	return map[string]any{
		"input_tokens": inputTokens, "output_tokens": output,
		"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
	}
}

func stopReason(r Reply) string {
	if r.Kind == fakemodel.KindCall {
		return "tool_use"
	}
	return "end_turn"
}

func toolUseID(req *Request) string {
	return fmt.Sprintf("toolu_fake_%d", req.Seq)
}

// message is the whole assistant message; complete says whether its
// content and stop reason are filled in (false: the message_start form).
func message(req *Request, reply Reply, complete bool) map[string]any {
	model := req.Model
	if model == "" {
		model = "claude-fake"
	}
	m := map[string]any{
		"id": fmt.Sprintf("msg_fake_%d", req.Seq), "type": "message", "role": "assistant",
		"model": model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": usage(1),
	}
	if !complete {
		return m
	}
	switch reply.Kind {
	case fakemodel.KindCall:
		var input any
		_ = json.Unmarshal([]byte(reply.Args), &input)
		m["content"] = []any{map[string]any{"type": "tool_use", "id": toolUseID(req), "name": reply.Name, "input": input}}
	default:
		m["content"] = []any{map[string]any{"type": "text", "text": reply.Whole()}}
	}
	m["stop_reason"] = stopReason(reply)
	m["usage"] = usage(outputTokens)
	return m
}

// stream writes one Messages API event stream. It reports whether the
// client went away before the stream was complete.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, req *Request, reply Reply) (gone bool) {
	w.Header().Set("request-id", fmt.Sprintf("req_fake_%d", req.Seq))
	e := s.StartStream(w, r)
	e.Send("message_start", map[string]any{"message": message(req, reply, false)})
	if reply.Kind == fakemodel.KindHang {
		e.Send("ping", map[string]any{})
		e.Hold()
		return e.Gone()
	}
	switch reply.Kind {
	case fakemodel.KindCall:
		e.Send("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "tool_use", "id": toolUseID(req), "name": reply.Name, "input": map[string]any{}}})
		e.Wait(reply.Delay)
		e.Send("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "input_json_delta", "partial_json": reply.Args}})
	default:
		e.Send("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		for _, c := range reply.Chunks {
			e.Wait(reply.Delay)
			e.Send("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "text_delta", "text": c}})
		}
	}
	e.Send("content_block_stop", map[string]any{"index": 0})
	e.Send("message_delta", map[string]any{
		"delta": map[string]any{"stop_reason": stopReason(reply), "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": outputTokens},
	})
	e.Send("message_stop", map[string]any{})
	return e.Gone()
}
