// Package acptest is the agent's end of a connection under test: real
// bytes over pipes, one JSON-RPC message a line, scripted by the test.
package acptest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"
)

// Peer is the agent's end. What the client writes arrives on Msg, one
// decoded message each; Send writes as the agent.
type Peer struct {
	T   *testing.T
	W   io.WriteCloser // the agent's stdout, the client's input
	R   *bufio.Reader  // the agent's stdin, the client's output
	Msg chan map[string]json.RawMessage
}

// NewPeer makes the pipes between a client and the agent's end: the
// client reads agentOut and writes agentIn. The pipes are closed, and the
// reader is waited for, in t's cleanup: make the client after NewPeer, so
// that its own cleanup (closing it) runs first.
func NewPeer(t *testing.T) (p *Peer, agentOut io.ReadCloser, agentIn io.WriteCloser) {
	t.Helper()
	agentOutR, agentOutW := io.Pipe() // agent stdout -> client
	clientOutR, clientOutW := io.Pipe()
	p = &Peer{T: t, R: bufio.NewReader(clientOutR), W: agentOutW, Msg: make(chan map[string]json.RawMessage, 100)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			line, err := p.R.ReadBytes('\n')
			if err != nil {
				return
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(line, &m); err != nil {
				t.Errorf("the client wrote a non-JSON line: %q", line)
				continue
			}
			p.Msg <- m
		}
	}()
	t.Cleanup(func() {
		agentOutW.Close()
		clientOutR.Close()
		<-done
	})
	return p, agentOutR, clientOutW
}

// Send writes v (a string as it is, anything else as JSON) as one line.
func (p *Peer) Send(v any) {
	p.T.Helper()
	var b []byte
	switch v := v.(type) {
	case string:
		b = []byte(v)
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			p.T.Fatal(err)
		}
	}
	if _, err := p.W.Write(append(b, '\n')); err != nil {
		p.T.Fatalf("peer write: %v", err)
	}
}

// Next returns the next message the client wrote, failing the test unless
// one comes within 5s.
func (p *Peer) Next() map[string]json.RawMessage {
	p.T.Helper()
	select {
	case m := <-p.Msg:
		return m
	case <-time.After(5 * time.Second):
		p.T.Fatal("no message from the client within 5s")
		return nil
	}
}

// NextMethod returns the next message of method, skipping others.
func (p *Peer) NextMethod(method string) map[string]json.RawMessage {
	p.T.Helper()
	for {
		m := p.Next()
		if Str(m["method"]) == method {
			return m
		}
	}
}

// Withdrawn fails unless the next message is $/cancel_request for id.
func (p *Peer) Withdrawn(id json.RawMessage) {
	p.T.Helper()
	m := p.Next()
	var params struct{ RequestID json.RawMessage }
	json.Unmarshal(m["params"], &params)
	if Str(m["method"]) != "$/cancel_request" || string(params.RequestID) != string(id) {
		p.T.Fatalf("got %s %s, want $/cancel_request for request %s", m["method"], m["params"], id)
	}
}

// Reply answers req with result, JSON as written.
func (p *Peer) Reply(req map[string]json.RawMessage, result string) {
	p.T.Helper()
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`, req["id"], result))
}

// ReplyErr answers req with an error.
func (p *Peer) ReplyErr(req map[string]json.RawMessage, code int, msg string) {
	p.T.Helper()
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":%d,"message":%q}}`, req["id"], code, msg))
}

// Str is a JSON string's value ("" for anything else).
func Str(raw json.RawMessage) string {
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}
