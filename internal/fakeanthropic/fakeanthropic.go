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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"acpbroker/internal/fakemodel"
)

// DefaultText is the answer to requests with no scripted reply.
const DefaultText = "ok"

type replyKind int

const (
	kindText replyKind = iota
	kindTool
	kindHang
	kindStatus
)

// Reply is one scripted answer to a main request.
type Reply struct {
	kind   replyKind
	chunks []string
	delay  time.Duration
	name   string
	input  string
	status int
}

// Text answers with a text block streamed as one delta per chunk, and stop
// reason end_turn.
func Text(chunks ...string) Reply {
	if len(chunks) == 0 {
		chunks = []string{DefaultText}
	}
	return Reply{kind: kindText, chunks: chunks}
}

// Slow makes the reply wait d before each streamed piece. The wait ends
// early when the client disconnects or the server closes.
func (r Reply) Slow(d time.Duration) Reply {
	r.delay = d
	return r
}

// ToolUse answers with one tool_use block (stop reason tool_use); input is
// marshalled to the tool's JSON input.
func ToolUse(name string, input any) Reply {
	b, err := json.Marshal(input)
	if err != nil {
		panic(fmt.Sprintf("fakeanthropic: tool input: %v", err))
	}
	return Reply{kind: kindTool, name: name, input: string(b)}
}

// Bash asks Claude Code to run command with its Bash tool, which needs the
// client's permission in the default mode.
func Bash(command, description string) Reply {
	return ToolUse("Bash", map[string]string{"command": command, "description": description})
}

// Hang starts the event stream (message_start) and then sends nothing
// until the client disconnects or the server closes.
func Hang() Reply { return Reply{kind: kindHang} }

// Status answers with a plain HTTP error status and an API error body.
func Status(code int) Reply { return Reply{kind: kindStatus, status: code} }

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
	*fakemodel.Server[Reply, Request]
}

// Start listens on 127.0.0.1 on a free port and serves until Close.
func Start(opts Options) (*Server, error) {
	s := &Server{}
	core, err := fakemodel.Start[Reply, Request]("fakeanthropic", opts.Logf, func(mux *http.ServeMux) {
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

func (s *Server) next(req *Request) (Reply, bool) {
	if req.Tools > 0 {
		if r, ok := s.Pop(); ok {
			return r, true
		}
	}
	return Text(DefaultText), false
}

func (s *Server) finish(req *Request, served string) {
	s.Update(req, func(q *Request) { q.Served, q.End = served, time.Now() })
}

func (s *Server) serveOther(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 16<<20))
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
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	req := s.record(r, body)
	writeJSON(w, map[string]any{"input_tokens": 100})
	s.finish(req, "count_tokens")
}

func (s *Server) serveModels(w http.ResponseWriter, r *http.Request) {
	req := s.record(r, nil)
	writeJSON(w, map[string]any{"data": []any{}, "has_more": false, "first_id": nil, "last_id": nil})
	s.finish(req, "models")
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, kind, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{
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
				req.ToolResults = append(req.ToolResults, ToolResult{ToolUseID: blk.ToolUseID, Content: blockText(blk.Content), IsError: blk.IsError})
			}
		}
	}
	return nil
}

// blockText flattens a tool_result "content": a string, or a list of
// blocks with text.
func blockText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		return b.String()
	}
	return string(raw)
}

func (s *Server) serveMessages(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
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
	reply, scripted := s.next(req)
	served := map[replyKind]string{kindText: "text", kindTool: "tool_use", kindHang: "hang", kindStatus: "status"}[reply.kind]
	if !scripted {
		served = "default"
	}
	s.Update(req, func(q *Request) { q.Scripted, q.Served = scripted, served })
	s.Logf("fakeanthropic: %s %s #%d model=%s stream=%v tools=%d tool_results=%d: %s", r.Method, r.URL.Path, req.Seq, req.Model, req.Stream, req.Tools, len(req.ToolResults), served)

	var gone bool
	switch {
	case reply.kind == kindStatus:
		writeError(w, reply.status, "api_error", fmt.Sprintf("scripted status %d", reply.status))
	case !req.Stream && reply.kind != kindHang:
		writeJSON(w, message(req, reply, true))
	default:
		gone = s.stream(w, r.Context(), req, reply)
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

func (r Reply) stopReason() string {
	if r.kind == kindTool {
		return "tool_use"
	}
	return "end_turn"
}

func (r Reply) toolUseID(req *Request) string {
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
	switch reply.kind {
	case kindTool:
		var input any
		_ = json.Unmarshal([]byte(reply.input), &input)
		m["content"] = []any{map[string]any{"type": "tool_use", "id": reply.toolUseID(req), "name": reply.name, "input": input}}
	default:
		m["content"] = []any{map[string]any{"type": "text", "text": strings.Join(reply.chunks, "")}}
	}
	m["stop_reason"] = reply.stopReason()
	m["usage"] = usage(outputTokens)
	return m
}

// stream writes one Messages API event stream. It reports whether the
// client went away before the stream was complete.
func (s *Server) stream(w http.ResponseWriter, ctx context.Context, req *Request, reply Reply) (gone bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("request-id", fmt.Sprintf("req_fake_%d", req.Seq))
	w.WriteHeader(http.StatusOK)
	e := &emitter{w: w, ctx: ctx, done: s.Done()}
	e.send("message_start", map[string]any{"message": message(req, reply, false)})
	if reply.kind == kindHang {
		e.send("ping", map[string]any{})
		e.hold()
		return e.gone
	}
	switch reply.kind {
	case kindTool:
		e.send("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "tool_use", "id": reply.toolUseID(req), "name": reply.name, "input": map[string]any{}}})
		e.wait(reply.delay)
		e.send("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "input_json_delta", "partial_json": reply.input}})
	default:
		e.send("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		for _, c := range reply.chunks {
			e.wait(reply.delay)
			e.send("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "text_delta", "text": c}})
		}
	}
	e.send("content_block_stop", map[string]any{"index": 0})
	e.send("message_delta", map[string]any{
		"delta": map[string]any{"stop_reason": reply.stopReason(), "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": outputTokens},
	})
	e.send("message_stop", map[string]any{})
	return e.gone
}

// emitter writes SSE events, stopping at the first failure.
type emitter struct {
	w    http.ResponseWriter
	ctx  context.Context
	done <-chan struct{}
	err  error
	// gone is set when the client went away mid-stream.
	gone bool
}

func (e *emitter) send(kind string, payload map[string]any) {
	if e.err != nil {
		return
	}
	payload["type"] = kind
	data, err := json.Marshal(payload)
	if err != nil {
		e.err = err
		return
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", kind, data)
	if _, err := e.w.Write(b.Bytes()); err != nil {
		e.err, e.gone = err, true
		return
	}
	if err := http.NewResponseController(e.w).Flush(); err != nil {
		e.err, e.gone = err, true
	}
}

// wait pauses d, ending early when the client goes away or the server
// closes; either of those stops the stream.
func (e *emitter) wait(d time.Duration) {
	if e.err != nil || d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-e.ctx.Done():
		e.err, e.gone = context.Cause(e.ctx), true
	case <-e.done:
		e.err = errors.New("server closed")
	}
}

// hold pauses until the client goes away or the server closes.
func (e *emitter) hold() {
	if e.err != nil {
		return
	}
	select {
	case <-e.ctx.Done():
		e.err, e.gone = context.Cause(e.ctx), true
	case <-e.done:
		e.err = errors.New("server closed")
	}
}
