// Package fakeopenai is a scriptable stand-in for the OpenAI Responses API,
// enough for codex (codex-acp) to run a turn against it offline. It is a
// real HTTP server on a loopback port: point the agent's model provider at
// URL() with wire_api "responses".
//
// Every POST /v1/responses is answered as Server-Sent Events. A request
// that carries tools (a turn's main request) takes the next scripted Reply
// from the queue; a request without tools, or one that finds the queue
// empty, gets a short default text. Every request is recorded.
package fakeopenai

import (
	"bytes"
	"compress/gzip"
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
	kindCall
	kindHang
	kindStatus
)

// Reply is one scripted answer to a main request.
type Reply struct {
	kind   replyKind
	chunks []string
	delay  time.Duration
	name   string
	args   string
	status int
}

// Text answers with an assistant message streamed as one delta per chunk.
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

// FunctionCall answers with one function_call output item. args is
// marshalled to the JSON string the Responses API carries in "arguments".
func FunctionCall(name string, args any) Reply {
	b, err := json.Marshal(args)
	if err != nil {
		panic(fmt.Sprintf("fakeopenai: function call arguments: %v", err))
	}
	return Reply{kind: kindCall, name: name, args: string(b)}
}

// ExecCommand asks codex to run cmd in a shell with escalated sandbox
// permissions, which makes codex-acp ask the client for permission first.
func ExecCommand(cmd, justification string) Reply {
	return FunctionCall("exec_command", map[string]string{
		"cmd":                 cmd,
		"sandbox_permissions": "require_escalated",
		"justification":       justification,
	})
}

// Hang starts the event stream (response.created) and then sends nothing
// until the client disconnects or the server closes.
func Hang() Reply { return Reply{kind: kindHang} }

// Status answers with a plain HTTP error status and a JSON error body.
func Status(code int) Reply { return Reply{kind: kindStatus, status: code} }

// ToolOutput is a function_call_output item found in a request's input.
type ToolOutput struct {
	CallID string
	Output string
}

// Request is what the server received and how it answered.
type Request struct {
	Seq    int
	Method string
	Path   string
	Header http.Header
	// Body is the request body (decompressed); JSON for /v1/responses.
	Body []byte
	// Model is the body's "model".
	Model string
	// Tools is the number of tools the request offered.
	Tools int
	// Scripted is true when the answer came from the queue.
	Scripted bool
	// Served names the answer: "text", "function_call", "hang",
	// "status", "default", "not_found" or "bad_request".
	Served string
	// ToolOutputs lists the function_call_output items in the input; the
	// input is the whole conversation, so earlier outputs appear again.
	ToolOutputs []ToolOutput
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
	core, err := fakemodel.Start[Reply, Request]("fakeopenai", opts.Logf, func(mux *http.ServeMux) {
		mux.HandleFunc("POST /v1/responses", s.serveResponses)
		mux.HandleFunc("/", s.serveOther)
	})
	if err != nil {
		return nil, err
	}
	s.Server = core
	return s, nil
}

// URL is the base URL to configure as the provider's base_url; it ends in
// "/v1".
func (s *Server) URL() string { return s.BaseURL() + "/v1" }

func (s *Server) record(r *http.Request, body []byte) *Request {
	return s.Record(func(seq int) *Request {
		return &Request{Seq: seq, Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, Start: time.Now()}
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

func (s *Server) serveOther(w http.ResponseWriter, r *http.Request) {
	body, _ := readBody(r)
	req := s.record(r, body)
	s.Logf("fakeopenai: %s %s: unknown path, 404", r.Method, r.URL.Path)
	writeError(w, http.StatusNotFound, "not_found", "no such endpoint in the fake")
	s.Update(req, func(q *Request) { q.Served, q.End = "not_found", time.Now() })
}

// requestBody is the part of a Responses API request the fake looks at.
type requestBody struct {
	Model string            `json:"model"`
	Tools []json.RawMessage `json:"tools"`
	Input json.RawMessage   `json:"input"`
}

type inputItem struct {
	Type   string          `json:"type"`
	CallID string          `json:"call_id"`
	Output json.RawMessage `json:"output"`
}

func parseRequest(req *Request) error {
	var b requestBody
	if err := json.Unmarshal(req.Body, &b); err != nil {
		return err
	}
	req.Model = b.Model
	req.Tools = len(b.Tools)
	var items []inputItem
	if json.Unmarshal(b.Input, &items) == nil {
		for _, it := range items {
			if it.Type == "function_call_output" {
				req.ToolOutputs = append(req.ToolOutputs, ToolOutput{CallID: it.CallID, Output: outputText(it.Output)})
			}
		}
	}
	return nil
}

// outputText flattens a function_call_output "output": a string, or a list
// of content items with text.
func outputText(raw json.RawMessage) string {
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

func readBody(r *http.Request) ([]byte, error) {
	var rd io.Reader = r.Body
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		rd = zr
	}
	return io.ReadAll(io.LimitReader(rd, 64<<20))
}

func writeError(w http.ResponseWriter, code int, kind, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"error": map[string]any{"type": kind, "code": kind, "message": msg},
	})
}

func (s *Server) serveResponses(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	req := s.record(r, body)
	if err == nil {
		s.Update(req, func(q *Request) { err = parseRequest(q) })
	}
	if err != nil {
		s.Logf("fakeopenai: %s %s: unreadable body: %v", r.Method, r.URL.Path, err)
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		s.Update(req, func(q *Request) { q.Served, q.End = "bad_request", time.Now() })
		return
	}
	reply, scripted := s.next(req)
	served := map[replyKind]string{kindText: "text", kindCall: "function_call", kindHang: "hang", kindStatus: "status"}[reply.kind]
	if !scripted {
		served = "default"
	}
	s.Update(req, func(q *Request) { q.Scripted, q.Served = scripted, served })
	s.Logf("fakeopenai: %s %s #%d model=%s tools=%d tool_outputs=%d: %s", r.Method, r.URL.Path, req.Seq, req.Model, req.Tools, len(req.ToolOutputs), served)

	var gone bool
	if reply.kind == kindStatus {
		writeError(w, reply.status, "server_error", fmt.Sprintf("scripted status %d", reply.status))
	} else {
		gone = s.stream(w, r.Context(), req, reply)
	}
	s.Update(req, func(q *Request) { q.ClientGone, q.End = gone, time.Now() })
}

// stream writes one Responses API event stream. It reports whether the
// client went away before the stream was complete.
func (s *Server) stream(w http.ResponseWriter, ctx context.Context, req *Request, reply Reply) (gone bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("x-request-id", fmt.Sprintf("req_fake_%d", req.Seq))
	w.WriteHeader(http.StatusOK)
	e := &emitter{w: w, ctx: ctx, done: s.Done()}
	respID := fmt.Sprintf("resp_fake_%d", req.Seq)
	created := time.Now().Unix()
	model := req.Model
	if model == "" {
		model = "gpt-fake"
	}
	envelope := func(status string, output []any) map[string]any {
		return map[string]any{
			"id": respID, "object": "response", "created_at": created,
			"status": status, "model": model, "output": output,
		}
	}
	e.send("response.created", map[string]any{"response": envelope("in_progress", []any{})})
	e.send("response.in_progress", map[string]any{"response": envelope("in_progress", []any{})})
	if reply.kind == kindHang {
		e.hold()
		return e.gone
	}

	var item map[string]any
	switch reply.kind {
	case kindCall:
		itemID := fmt.Sprintf("fc_fake_%d", req.Seq)
		callID := fmt.Sprintf("call_fake_%d", req.Seq)
		added := map[string]any{"id": itemID, "type": "function_call", "status": "in_progress", "name": reply.name, "call_id": callID, "arguments": ""}
		e.send("response.output_item.added", map[string]any{"output_index": 0, "item": added})
		e.wait(reply.delay)
		e.send("response.function_call_arguments.delta", map[string]any{"item_id": itemID, "output_index": 0, "delta": reply.args})
		e.send("response.function_call_arguments.Done()", map[string]any{"item_id": itemID, "output_index": 0, "arguments": reply.args})
		item = map[string]any{"id": itemID, "type": "function_call", "status": "completed", "name": reply.name, "call_id": callID, "arguments": reply.args}
	default:
		itemID := fmt.Sprintf("msg_fake_%d", req.Seq)
		added := map[string]any{"id": itemID, "type": "message", "status": "in_progress", "role": "assistant", "content": []any{}}
		e.send("response.output_item.added", map[string]any{"output_index": 0, "item": added})
		e.send("response.content_part.added", map[string]any{"item_id": itemID, "output_index": 0, "content_index": 0, "part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
		var full strings.Builder
		for _, c := range reply.chunks {
			e.wait(reply.delay)
			full.WriteString(c)
			e.send("response.output_text.delta", map[string]any{"item_id": itemID, "output_index": 0, "content_index": 0, "delta": c})
		}
		part := map[string]any{"type": "output_text", "text": full.String(), "annotations": []any{}}
		e.send("response.output_text.done", map[string]any{"item_id": itemID, "output_index": 0, "content_index": 0, "text": full.String()})
		e.send("response.content_part.done", map[string]any{"item_id": itemID, "output_index": 0, "content_index": 0, "part": part})
		item = map[string]any{"id": itemID, "type": "message", "status": "completed", "role": "assistant", "content": []any{part}}
	}
	e.send("response.output_item.done", map[string]any{"output_index": 0, "item": item})
	final := envelope("completed", []any{item})
	final["usage"] = map[string]any{
		"input_tokens": 100, "input_tokens_details": map[string]any{"cached_tokens": 0},
		"output_tokens": 10, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens": 110,
	}
	e.send("response.completed", map[string]any{"response": final})
	return e.gone
}

// emitter writes SSE events, stopping at the first failure.
type emitter struct {
	w    http.ResponseWriter
	ctx  context.Context
	done <-chan struct{}
	seq  int
	err  error
	// gone is set when the client went away mid-stream.
	gone bool
}

func (e *emitter) send(kind string, payload map[string]any) {
	if e.err != nil {
		return
	}
	payload["type"] = kind
	payload["sequence_number"] = e.seq
	e.seq++
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
