package fakemodel

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// DefaultText is the answer to requests with no scripted reply.
const DefaultText = "ok"

// Kind says what a Reply answers with.
type Kind int

const (
	KindText   Kind = iota // assistant text, streamed one delta per chunk
	KindCall               // one tool call
	KindHang               // the stream starts, then nothing comes
	KindStatus             // a plain HTTP error status
)

// Reply is one scripted answer to a main request, in terms both APIs
// share; each fake shapes it into its own events.
type Reply struct {
	Kind   Kind
	Chunks []string      // KindText: the text, one streamed delta each
	Delay  time.Duration // the pause before each streamed piece
	Name   string        // KindCall: the tool's name
	Args   string        // KindCall: the tool's input, as JSON
	Status int           // KindStatus: the HTTP status
}

// Text answers with assistant text streamed as one delta per chunk
// (DefaultText without chunks).
func Text(chunks ...string) Reply {
	if len(chunks) == 0 {
		chunks = []string{DefaultText}
	}
	return Reply{Kind: KindText, Chunks: chunks}
}

// Call answers with one call of the tool name; args is marshalled to the
// JSON the call carries, and Call panics if it cannot be.
func Call(name string, args any) Reply {
	b, err := json.Marshal(args)
	if err != nil {
		panic(fmt.Sprintf("fakemodel: arguments of a call to %s: %v", name, err))
	}
	return Reply{Kind: KindCall, Name: name, Args: string(b)}
}

// Hang starts the event stream and then sends nothing until the client
// disconnects or the server closes.
func Hang() Reply { return Reply{Kind: KindHang} }

// Status answers with a plain HTTP error status and an error body.
func Status(code int) Reply { return Reply{Kind: KindStatus, Status: code} }

// Slow makes the reply wait d before each streamed piece. The wait ends
// early when the client disconnects or the server closes.
func (r Reply) Slow(d time.Duration) Reply {
	r.Delay = d
	return r
}

// Whole is a text reply's chunks joined.
func (r Reply) Whole() string { return strings.Join(r.Chunks, "") }

// FlatText flattens the content of a tool result as the APIs carry it:
// a string, or a list of parts with text (joined). Anything else is
// returned raw.
func FlatText(raw json.RawMessage) string {
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
