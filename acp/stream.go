package acp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
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
	// over scans the line being skipped for being too long, and long
	// counts its bytes, so that it can be answered.
	over topScan
	long int64

	closeOnce sync.Once
	closeErr  error
}

// errLineTooLong marks a line that exceeded the cap; its bytes were discarded.
var errLineTooLong = errors.New("acp: line exceeds the size cap")

// readLine returns the next line without its newline. A line longer than the
// cap is consumed and reported as errLineTooLong, so the next call starts on a
// fresh line.
func (s *lineStream) readLine() ([]byte, error) {
	if cap(s.buf) > 64<<10 && s.r.Buffered() == 0 {
		// An idle agent does not keep a big line's memory; one whose
		// next line is here already reuses it.
		s.buf = nil
	}
	s.buf = s.buf[:0]
	tooLong := false
	for {
		frag, err := s.r.ReadSlice('\n')
		switch {
		case tooLong:
			s.over.feed(frag)
			s.long += int64(len(frag))
		case len(s.buf)+len(frag) > s.max+1: // +1: the newline does not count
			tooLong = true
			s.over = topScan{}
			s.over.feed(bytes.TrimLeft(s.buf, " \t\r"))
			s.over.feed(frag)
			s.long = int64(len(s.buf) + len(frag))
			s.buf = s.buf[:0]
		default:
			s.buf = append(s.buf, frag...)
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

// ReadObject implements jsonrpc2.ObjectStream. Every message is consumed
// here (see dispatch): it returns only the error that ends the agent's
// output, and jsonrpc2 is left to write.
func (s *lineStream) ReadObject(any) error {
	for {
		line, err := s.readLine()
		if errors.Is(err, errLineTooLong) {
			s.conn.stats.oversizeLines.Add(1)
			s.conn.noisy.Warn().Int("cap", s.max).Int64("len", s.long).Msg("agent wrote a line over the size cap; skipped")
			s.over.finish()
			s.conn.answerScanned(&s.over, fmt.Sprintf("the message is longer than the %d bytes a line may have", s.max), false)
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
		s.dispatch(line)
	}
}

// envelope is a JSON-RPC message decoded once: enough to route it. The
// id is kept as the agent wrote it, to be answered with. Params and
// Result are where they lie in the line, not copied: whatever keeps them
// past the line copies them.
type envelope struct {
	Method string          `json:"method"`
	ID     json.RawMessage `json:"id"`
	Params rawRef          `json:"params"`
	Result rawRef          `json:"result"`
	Error  *jsonrpc2.Error `json:"error"`
}

// rawRef is a JSON value as it lies in what is being decoded, not
// copied (json.RawMessage copies): valid while that is. For the values
// that are the bulk of a message, a copy less.
type rawRef []byte

// UnmarshalJSON implements json.Unmarshaler.
func (r *rawRef) UnmarshalJSON(b []byte) error {
	*r = b
	return nil
}

// dispatch classifies one line, decoding it once, and routes it: a
// response to the call waiting for its id, a session/update to its
// session's queue (the hot path), a request or another notification to
// its handler. It runs on the read loop and never blocks.
func (s *lineStream) dispatch(line []byte) {
	c := s.conn
	if line[0] == '[' {
		c.batch(line)
		return
	}
	var e envelope
	if line[0] != '{' {
		c.junk(line, "not a JSON-RPC message")
		return
	}
	if err := json.Unmarshal(line, &e); err != nil {
		if !c.undecodable(line, err) {
			c.junk(line, "not a JSON-RPC message: "+err.Error())
		}
		return
	}
	if string(e.ID) == "null" {
		e.ID = nil // no id: a notification
	}
	switch {
	case e.Method == MethodSessionUpdate && e.ID == nil:
		c.routeUpdate(json.RawMessage(e.Params)) // decoded before the next line is read
		return
	case e.Method != "":
		// A method makes it a request or notification, whatever its id.
		// It is served here, on the read loop, its params as the agent
		// wrote them: jsonrpc2 would decode them into a tree of
		// interfaces and encode them again.
		req := &jsonrpc2.Request{Method: e.Method, Notif: e.ID == nil}
		if e.ID != nil {
			id, err := parseID(e.ID)
			if err != nil {
				c.answerUnusableID(e.ID)
				return
			}
			req.ID = id
		}
		if e.Params != nil {
			raw := append(json.RawMessage(nil), e.Params...)
			req.Params = &raw
		}
		c.handle(req)
		return
	case e.ID != nil && (e.Result != nil || e.Error != nil):
		id, err := parseID(e.ID)
		if err != nil {
			c.stats.staleResponses.Add(1)
			c.noisy.Warn().Str("req", excerptBytes(e.ID, 40)).Msg("dropped a response with an id the broker never uses")
			return
		}
		var result json.RawMessage
		if e.Result != nil {
			result = append(json.RawMessage(nil), e.Result...)
		}
		c.deliver(id, result, e.Error)
		return
	default:
		c.junk(line, "neither request nor response")
		return
	}
}

// parseID reads an id the broker can answer through jsonrpc2: a string,
// or a whole number from 0 that fits in an int64.
func parseID(raw json.RawMessage) (jsonrpc2.ID, error) {
	var id jsonrpc2.ID
	if err := json.Unmarshal(raw, &id); err != nil {
		return id, err
	}
	if !id.IsString && id.Num > math.MaxInt64 {
		return id, errors.New("id out of range")
	}
	return id, nil
}

// answerUnusableID answers a request whose id is not a string or a
// whole number from 0: with the id as written when it is a number (1.5,
// -1), else with a null id, as JSON-RPC has it for an id that cannot be
// read.
func (c *Conn) answerUnusableID(raw json.RawMessage) {
	why := fmt.Errorf("%w: %s", errInvalidID, excerptBytes(raw, 40))
	if readableID(raw, false) {
		c.answerInvalid(raw, why)
		return
	}
	c.answerInvalid(nil, why)
}

// undecodable answers what can be answered of a line that is not a
// JSON-RPC message encoding/json can decode (err says why): a request
// whose id can be read is answered -32602 when its params are at fault
// (nested too deep, cut short), else -32600, with its id as written; a
// response whose id can be read fails the call it answers, which would
// otherwise wait for ever. It reports whether the line was either.
func (c *Conn) undecodable(line []byte, err error) bool {
	sc := scanMessage(line)
	why := err.Error()
	paramsAtFault := false
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		paramsAtFault = sc.inParams(se.Offset - 1)
	}
	return c.answerScanned(sc, why, paramsAtFault)
}

// answerScanned answers a message known by its scan alone; why says what
// is wrong with it, paramsAtFault whether its params are.
func (c *Conn) answerScanned(sc *topScan, why string, paramsAtFault bool) bool {
	readable := sc.hasID && readableID(sc.id, sc.idLong)
	switch {
	case sc.hasMethod && sc.hasID && string(sc.id) != "null" && !sc.idLong && !readable:
		c.answerInvalid(nil, fmt.Errorf("%w: %s", errInvalidID, excerptBytes(sc.id, 40)))
	case sc.hasMethod && readable:
		c.stats.badMessages.Add(1)
		var m string
		switch {
		case sc.methodLong || json.Unmarshal(sc.method, &m) != nil:
			c.answerInvalid(sc.id, fmt.Errorf("%w: its method is not a string (%s)", errInvalidReqt, why))
		case paramsAtFault:
			c.answerInvalid(sc.id, fmt.Errorf("%w: %s: %s", ErrInvalidParams, excerpt(m, 80), why))
		default:
			c.answerInvalid(sc.id, fmt.Errorf("%w: %s: %s", errInvalidReqt, excerpt(m, 80), why))
		}
	case !sc.hasMethod && readable && (sc.hasResult || sc.hasError):
		c.unreadableAnswer(sc.id, why)
	default:
		return false
	}
	return true
}

// unreadableAnswer fails the call an answer the broker cannot read was
// for, if one waits: with the answer lost, it would wait for ever.
func (c *Conn) unreadableAnswer(raw []byte, why string) {
	c.stats.badMessages.Add(1)
	id, err := parseID(raw)
	c.mu.Lock()
	call := c.pending[id]
	if err != nil {
		call = nil
	}
	delete(c.pending, id)
	c.mu.Unlock()
	if call == nil {
		c.stats.staleResponses.Add(1)
		c.noisy.Warn().Str("req", excerptBytes(raw, 40)).Str("why", why).Msg("dropped an unreadable response with no live request")
		return
	}
	c.noisy.Warn().Str("req", logged(id.String())).Str("method", call.Method).Str("why", why).Msg("the agent's answer could not be read; the call fails")
	call.finish(nil, fmt.Errorf("%s: %w: %s", call.Method, ErrUnreadableAnswer, why))
}

// batch answers a JSON-RPC batch, which ACP does not use: each request in
// it with a readable id gets -32600 (with its id as written), and a batch
// with none gets one -32600 with a null id. Nothing in it is served.
func (c *Conn) batch(line []byte) {
	elems, ok := arrayElements(line)
	if !ok {
		c.junk(line, "not a JSON-RPC message")
		return
	}
	answered := false
	for _, el := range elems {
		sc := scanMessage(el)
		if sc.hasMethod && readableID(sc.id, sc.idLong) {
			c.answerInvalid(sc.id, errBatch)
			answered = true
		}
	}
	if !answered {
		c.answerInvalid(nil, errBatch)
	}
}

// answerInvalid sends an error for id (null when nil) as a notice, and
// counts it: -32600, or -32602 for params at fault.
func (c *Conn) answerInvalid(id json.RawMessage, err error) {
	c.stats.invalid.Add(1)
	c.noisy.Warn().Str("error", logged(err.Error())).Msg("invalid request from the agent; answered with an error")
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
