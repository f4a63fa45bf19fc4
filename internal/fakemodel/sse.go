package fakemodel

import (
	"bufio"
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
)

// Stream writes one answer as Server-Sent Events. It stops at the first
// failure: once the client is gone or the server closes, Send, Wait and
// Hold do nothing. A Stream belongs to one handler goroutine.
type Stream struct {
	w    http.ResponseWriter
	ctx  context.Context
	done <-chan struct{}
	err  error
	gone bool
}

// StartStream answers w with status 200 and an event stream; set other
// headers on w before. r's context tells when the client goes away.
func (s *Server[Request]) StartStream(w http.ResponseWriter, r *http.Request) *Stream {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &Stream{w: w, ctx: r.Context(), done: s.Done()}
}

// Send writes one event named kind whose data is payload, with "type"
// set to kind, and flushes it.
func (e *Stream) Send(kind string, payload map[string]any) {
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

// Wait pauses d, ending early when the client goes away or the server
// closes; either of those stops the stream.
func (e *Stream) Wait(d time.Duration) {
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

// Hold pauses until the client goes away or the server closes.
func (e *Stream) Hold() {
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

// Gone reports whether the client went away before the stream ended.
func (e *Stream) Gone() bool { return e.gone }

// Event is one Server-Sent Event as a Stream writes it.
type Event struct {
	Name string
	Data map[string]any
}

// ReadEvents reads a whole event stream written by a Stream. It fails on
// data that is not a JSON object or whose "type" is not the event's name.
func ReadEvents(r io.Reader) ([]Event, error) {
	var out []Event
	var cur Event
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.Name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.Data); err != nil {
				return out, fmt.Errorf("data is not a JSON object: %q", line)
			}
		case line == "":
			if cur.Data["type"] != cur.Name {
				return out, fmt.Errorf("event %q has type %v", cur.Name, cur.Data["type"])
			}
			out = append(out, cur)
			cur = Event{}
		}
	}
	return out, sc.Err()
}

// ReadBody reads a request body of up to limit bytes, decompressing it
// if it is gzip-encoded.
func ReadBody(r *http.Request, limit int64) ([]byte, error) {
	var rd io.Reader = r.Body
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		rd = zr
	}
	return io.ReadAll(io.LimitReader(rd, limit))
}

// WriteJSON answers with status code and v as JSON.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
