package acp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/sourcegraph/jsonrpc2"
)

// DefaultMaxLineBytes is the largest message line read from an agent when
// no other cap is configured. Longer lines are skipped, not fatal.
const DefaultMaxLineBytes = 32 << 20

// lineStream is the jsonrpc2.ObjectStream over an agent's stdio: one JSON
// message per line each way. It never hands jsonrpc2 something it cannot
// decode: junk and oversize lines are counted and skipped, and responses
// are routed by the Conn before jsonrpc2 sees them, so that jsonrpc2's own
// pending table (which cannot forget an abandoned call) is never used.
type lineStream struct {
	r       *bufio.Reader
	max     int
	buf     []byte
	conn    *Conn
	closeFn func() error

	closeOnce sync.Once
	closeErr  error
}

// errLineTooLong marks a line that exceeded the cap; its bytes were discarded.
var errLineTooLong = errors.New("acp: line exceeds the size cap")

// readLine returns the next line without its newline. A line longer than the
// cap is consumed and reported as errLineTooLong, so the next call starts on a
// fresh line.
func (s *lineStream) readLine() ([]byte, error) {
	if cap(s.buf) > 64<<10 {
		s.buf = nil // an idle agent does not keep a big line's memory
	}
	s.buf = s.buf[:0]
	tooLong := false
	for {
		frag, err := s.r.ReadSlice('\n')
		if !tooLong {
			if len(s.buf)+len(frag) > s.max+1 { // +1: the newline does not count
				tooLong = true
				s.buf = s.buf[:0]
			} else {
				s.buf = append(s.buf, frag...)
			}
		}
		switch {
		case err == nil:
			if tooLong {
				return nil, errLineTooLong
			}
			return bytes.TrimRight(s.buf, "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case len(s.buf) > 0 && !tooLong && errors.Is(err, io.EOF):
			// A last line without a newline is still a line.
			line := s.buf
			s.buf = nil
			return line, nil
		default:
			return nil, err
		}
	}
}

// ReadObject implements jsonrpc2.ObjectStream. It returns only requests and
// notifications; everything else is consumed here.
func (s *lineStream) ReadObject(v any) error {
	for {
		line, err := s.readLine()
		if errors.Is(err, errLineTooLong) {
			s.conn.stats.oversizeLines.Add(1)
			s.conn.log.Warn().Int("cap", s.max).Msg("agent wrote a line over the size cap; skipped")
			continue
		}
		if err != nil {
			s.conn.readEnded(err)
			return err
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if s.dispatch(line, v) {
			return nil
		}
	}
}

// envelope is a JSON-RPC message decoded once: enough to route it.
type envelope struct {
	Method string          `json:"method"`
	ID     *jsonrpc2.ID    `json:"id"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *jsonrpc2.Error `json:"error"`
}

// dispatch classifies one line, decoding it once. Responses and
// session/update notifications (the hot path) are routed here; it reports
// true when v holds a request or another notification for jsonrpc2.
func (s *lineStream) dispatch(line []byte, v any) bool {
	var e envelope
	if line[0] == '[' {
		s.conn.batch(line)
		return false
	}
	if line[0] != '{' || json.Unmarshal(line, &e) != nil {
		if !s.conn.invalidRequest(line) {
			s.conn.junk(line, "not a JSON-RPC message")
		}
		return false
	}
	switch {
	case e.Method == MethodSessionUpdate && e.ID == nil:
		s.conn.routeUpdate(e.Params)
		return false
	case e.Method != "":
		// A method makes it a request or notification, whatever its id.
		if err := json.Unmarshal(line, v); err != nil {
			s.conn.junk(line, err.Error())
			if e.ID != nil {
				s.conn.answerInvalid(e.ID, fmt.Errorf("%w: %v", errInvalidReqt, err))
			}
			return false
		}
		// jsonrpc2 re-encodes params (sorting keys, escaping <, > and &);
		// its handler, which runs next on this goroutine, takes the
		// agent's own bytes from here.
		s.conn.params = e.Params
		return true
	case e.ID != nil && (e.Result != nil || e.Error != nil):
		s.conn.deliver(*e.ID, e.Result, e.Error)
		return false
	default:
		s.conn.junk(line, "neither request nor response")
		return false
	}
}

// batch answers a JSON-RPC batch, which ACP does not use: each request in
// it with a usable id gets -32600, and a batch with none gets one -32600
// with a null id. Nothing in it is served.
func (c *Conn) batch(line []byte) {
	var elems []json.RawMessage
	if json.Unmarshal(line, &elems) != nil {
		c.junk(line, "not a JSON-RPC message")
		return
	}
	answered := false
	for _, el := range elems {
		var e envelope
		if json.Unmarshal(el, &e) == nil && e.Method != "" && e.ID != nil {
			c.answerInvalid(e.ID, errBatch)
			answered = true
		}
	}
	if !answered {
		c.answerInvalid(nil, errBatch)
	}
}

// invalidRequest answers a request whose id cannot be read (an object, an
// array, a boolean) with -32600 and a null id, as JSON-RPC has it: the
// agent is told instead of waiting for ever. It reports whether line was
// such a request.
func (c *Conn) invalidRequest(line []byte) bool {
	var m struct {
		Method string          `json:"method"`
		ID     json.RawMessage `json:"id"`
	}
	if json.Unmarshal(line, &m) != nil || m.Method == "" || len(m.ID) == 0 || string(m.ID) == "null" {
		return false
	}
	c.answerInvalid(nil, fmt.Errorf("%w: %s", errInvalidID, excerptBytes(m.ID, 40)))
	return true
}

// answerInvalid sends a -32600 error for id (null when nil) as a notice,
// and counts it.
func (c *Conn) answerInvalid(id *jsonrpc2.ID, err error) {
	c.stats.invalid.Add(1)
	c.noisy.Warn().Err(err).Msg("invalid request from the agent; answered -32600")
	c.answerNow(id, nil, err, "answer to an invalid request")
}

func excerptBytes(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// WriteObject implements jsonrpc2.ObjectStream: it queues one whole message
// for the Conn's writer.
func (s *lineStream) WriteObject(obj any) error {
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	return s.conn.enqueue(context.Background(), b)
}

// Close implements jsonrpc2.ObjectStream. Safe to call more than once.
func (s *lineStream) Close() error {
	s.closeOnce.Do(func() {
		if s.closeFn != nil {
			s.closeErr = s.closeFn()
		}
	})
	return s.closeErr
}
