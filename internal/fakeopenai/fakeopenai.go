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
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"acpbroker/internal/fakemodel"
)

// DefaultText is the answer to requests with no scripted reply.
const DefaultText = fakemodel.DefaultText

// Reply is one scripted answer to a main request.
type Reply = fakemodel.Reply

// Text answers with an assistant message streamed as one delta per chunk.
func Text(chunks ...string) Reply { return fakemodel.Text(chunks...) }

// FunctionCall answers with one function_call output item. args is
// marshalled to the JSON string the Responses API carries in "arguments".
func FunctionCall(name string, args any) Reply { return fakemodel.Call(name, args) }

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
func Hang() Reply { return fakemodel.Hang() }

// Status answers with a plain HTTP error status and a JSON error body.
func Status(code int) Reply { return fakemodel.Status(code) }

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
	*fakemodel.Server[Request]
}

// Start listens on 127.0.0.1 on a free port and serves until Close.
func Start(opts Options) (*Server, error) {
	s := &Server{}
	core, err := fakemodel.Start[Request]("fakeopenai", opts.Logf, func(mux *http.ServeMux) {
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

func (s *Server) serveOther(w http.ResponseWriter, r *http.Request) {
	body, _ := fakemodel.ReadBody(r, 64<<20)
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
				req.ToolOutputs = append(req.ToolOutputs, ToolOutput{CallID: it.CallID, Output: fakemodel.FlatText(it.Output)})
			}
		}
	}
	return nil
}

func writeError(w http.ResponseWriter, code int, kind, msg string) {
	fakemodel.WriteJSON(w, code, map[string]any{
		"error": map[string]any{"type": kind, "code": kind, "message": msg},
	})
}

func (s *Server) serveResponses(w http.ResponseWriter, r *http.Request) {
	body, err := fakemodel.ReadBody(r, 64<<20)
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
	reply, scripted := s.Next(req.Tools > 0)
	served := map[fakemodel.Kind]string{fakemodel.KindText: "text", fakemodel.KindCall: "function_call", fakemodel.KindHang: "hang", fakemodel.KindStatus: "status"}[reply.Kind]
	if !scripted {
		served = "default"
	}
	s.Update(req, func(q *Request) { q.Scripted, q.Served = scripted, served })
	s.Logf("fakeopenai: %s %s #%d model=%s tools=%d tool_outputs=%d: %s", r.Method, r.URL.Path, req.Seq, req.Model, req.Tools, len(req.ToolOutputs), served)

	var gone bool
	if reply.Kind == fakemodel.KindStatus {
		writeError(w, reply.Status, "server_error", fmt.Sprintf("scripted status %d", reply.Status))
	} else {
		gone = s.stream(w, r, req, reply)
	}
	s.Update(req, func(q *Request) { q.ClientGone, q.End = gone, time.Now() })
}

// stream writes one Responses API event stream. It reports whether the
// client went away before the stream was complete.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, req *Request, reply Reply) (gone bool) {
	w.Header().Set("x-request-id", fmt.Sprintf("req_fake_%d", req.Seq))
	e := s.StartStream(w, r)
	// Every event carries its number in the stream.
	seq := 0
	send := func(kind string, payload map[string]any) {
		payload["sequence_number"] = seq
		seq++
		e.Send(kind, payload)
	}
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
	send("response.created", map[string]any{"response": envelope("in_progress", []any{})})
	send("response.in_progress", map[string]any{"response": envelope("in_progress", []any{})})
	if reply.Kind == fakemodel.KindHang {
		e.Hold()
		return e.Gone()
	}

	var item map[string]any
	switch reply.Kind {
	case fakemodel.KindCall:
		itemID := fmt.Sprintf("fc_fake_%d", req.Seq)
		callID := fmt.Sprintf("call_fake_%d", req.Seq)
		added := map[string]any{"id": itemID, "type": "function_call", "status": "in_progress", "name": reply.Name, "call_id": callID, "arguments": ""}
		send("response.output_item.added", map[string]any{"output_index": 0, "item": added})
		e.Wait(reply.Delay)
		send("response.function_call_arguments.delta", map[string]any{"item_id": itemID, "output_index": 0, "delta": reply.Args})
		send("response.function_call_arguments.done", map[string]any{"item_id": itemID, "output_index": 0, "arguments": reply.Args})
		item = map[string]any{"id": itemID, "type": "function_call", "status": "completed", "name": reply.Name, "call_id": callID, "arguments": reply.Args}
	default:
		itemID := fmt.Sprintf("msg_fake_%d", req.Seq)
		added := map[string]any{"id": itemID, "type": "message", "status": "in_progress", "role": "assistant", "content": []any{}}
		send("response.output_item.added", map[string]any{"output_index": 0, "item": added})
		send("response.content_part.added", map[string]any{"item_id": itemID, "output_index": 0, "content_index": 0, "part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
		var full strings.Builder
		for _, c := range reply.Chunks {
			e.Wait(reply.Delay)
			full.WriteString(c)
			send("response.output_text.delta", map[string]any{"item_id": itemID, "output_index": 0, "content_index": 0, "delta": c})
		}
		part := map[string]any{"type": "output_text", "text": full.String(), "annotations": []any{}}
		send("response.output_text.done", map[string]any{"item_id": itemID, "output_index": 0, "content_index": 0, "text": full.String()})
		send("response.content_part.done", map[string]any{"item_id": itemID, "output_index": 0, "content_index": 0, "part": part})
		item = map[string]any{"id": itemID, "type": "message", "status": "completed", "role": "assistant", "content": []any{part}}
	}
	send("response.output_item.done", map[string]any{"output_index": 0, "item": item})
	final := envelope("completed", []any{item})
	final["usage"] = map[string]any{
		"input_tokens": 100, "input_tokens_details": map[string]any{"cached_tokens": 0},
		"output_tokens": 10, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens": 110,
	}
	send("response.completed", map[string]any{"response": final})
	return e.Gone()
}
