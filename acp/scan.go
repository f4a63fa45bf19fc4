package acp

import (
	"bytes"
	"encoding/json"
)

// topScan reads the top level of a JSON object without decoding it and
// with no bound on nesting: where the members' values lie, and the raw
// id and method. It is what the Conn learns of a message it cannot decode
// (nested deeper than encoding/json goes, of the wrong types, cut short,
// too long to keep), so that a request whose id it can read is answered
// all the same. It takes the bytes in pieces (feed): a line too long to
// keep is scanned as it is skipped, in one pass and constant memory.
//
// It checks the top level's syntax and that brackets balance; what is
// inside the members' values is checked by whoever decodes them.
type topScan struct {
	// id and method are the raw values of the members so named; idLong
	// and methodLong say they were longer than maxKeptValue, and not kept.
	id, method         []byte
	idLong, methodLong bool
	// hasID … hasError say which members were seen.
	hasID, hasMethod, hasParams, hasResult, hasError bool
	// paramsAt is where the params value lies in what was fed.
	paramsAt [2]int64
	// bad says why the top level is not one well-formed object ("" if it
	// is), and badIn names the member whose value was being read then.
	bad, badIn string

	pos     int64 // bytes fed before the current piece
	st      scanState
	depth   int64 // of objects and arrays within the value being read
	inStr   bool  // within a string of that value
	esc     bool  // just after a backslash in a string
	key     []byte
	keyLong bool   // the name is none of those looked for
	cur     string // the member whose value is being read
	start   int64  // where that value began
}

type scanState uint8

const (
	scanStart  scanState = iota // before the '{'
	scanFirst                   // after the '{': a name or '}'
	scanName                    // after a ',': a name
	scanKey                     // within a name
	scanColon                   // after a name
	scanValue                   // after the ':'
	scanString                  // within a string value
	scanNested                  // within an object or array value
	scanScalar                  // within a number or a literal
	scanAfter                   // after a value: ',' or '}'
	scanDone                    // after the '}'
	scanBad
)

// maxKeptValue bounds the id and method kept of a message that cannot be
// decoded: one with a longer id is not answered.
const maxKeptValue = 4 << 10

// scanMessage scans one whole message.
func scanMessage(line []byte) *topScan {
	s := &topScan{}
	s.feed(line)
	s.finish()
	return s
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

func (s *topScan) fail(why string) {
	if s.st == scanString || s.st == scanNested || s.st == scanScalar {
		s.badIn = s.cur
	}
	s.bad, s.st = why, scanBad
}

// feed scans the next piece of the message.
func (s *topScan) feed(b []byte) {
	defer func() { s.pos += int64(len(b)) }()
	for i := 0; i < len(b) && s.st != scanBad; {
		c := b[i]
		switch s.st {
		case scanKey:
			switch {
			case s.esc:
				s.esc = false
				s.keyLong = true // an escaped name is taken for none of those looked for
			case c == '\\':
				s.esc = true
			case c == '"':
				s.st = scanColon
			case len(s.key) < 8:
				s.key = append(s.key, c)
			default:
				s.keyLong = true
			}
			i++
		case scanString, scanNested:
			i += s.within(b[i:])
			if s.st == scanAfter {
				s.endValue(s.pos + int64(i))
			}
		case scanScalar:
			if isSpace(c) || c == ',' || c == '}' {
				s.endValue(s.pos + int64(i))
				continue // the delimiter is read after the value
			}
			s.keep(b[i : i+1])
			i++
		default:
			if !isSpace(c) {
				s.punct(c, s.pos+int64(i))
			}
			i++
		}
	}
}

// punct reads a character outside names and values.
func (s *topScan) punct(c byte, at int64) {
	switch {
	case s.st == scanStart && c == '{':
		s.st = scanFirst
	case s.st == scanFirst && c == '}', s.st == scanAfter && c == '}':
		s.st = scanDone
	case (s.st == scanFirst || s.st == scanName) && c == '"':
		s.st, s.key, s.keyLong, s.esc = scanKey, s.key[:0], false, false
	case s.st == scanColon && c == ':':
		s.st = scanValue
	case s.st == scanAfter && c == ',':
		s.st = scanName
	case s.st == scanValue:
		s.beginValue(c, at)
	case s.st == scanDone:
		s.fail("there is more after the message's object")
	default:
		s.fail("the message is not a JSON object")
	}
}

// beginValue starts reading a member's value at its first character.
func (s *topScan) beginValue(c byte, at int64) {
	s.cur, s.start = "", at
	if !s.keyLong {
		switch k := string(s.key); k {
		case "id", "method", "params", "result", "error":
			s.cur = k
		}
	}
	switch s.cur {
	case "id":
		s.hasID, s.id, s.idLong = true, s.id[:0], false
	case "method":
		s.hasMethod, s.method, s.methodLong = true, s.method[:0], false
	case "params":
		s.hasParams = true
	case "result":
		s.hasResult = true
	case "error":
		s.hasError = true
	}
	s.keep([]byte{c})
	switch c {
	case '"':
		s.st, s.inStr, s.esc = scanString, true, false
	case '{', '[':
		s.st, s.depth, s.inStr, s.esc = scanNested, 1, false, false
	case '}', ']', ',', ':':
		s.fail("a member of the message has no value")
	default:
		s.st = scanScalar
	}
}

// within reads a string or nested value as far as b goes or the value
// ends (the state is then scanAfter), and returns how much it read.
func (s *topScan) within(b []byte) int {
	i := 0
	for i < len(b) {
		if s.esc {
			s.esc = false
			i++
			continue
		}
		if s.inStr {
			j := bytes.IndexAny(b[i:], "\"\\")
			if j < 0 {
				i = len(b)
				break
			}
			i += j
			if b[i] == '\\' {
				s.esc = true
				i++
				continue
			}
			i++ // the closing quote
			s.inStr = false
			if s.st == scanString {
				s.st = scanAfter
				break
			}
			continue
		}
		j := bytes.IndexAny(b[i:], "\"{}[]")
		if j < 0 {
			i = len(b)
			break
		}
		i += j
		switch b[i] {
		case '"':
			s.inStr = true
		case '{', '[':
			s.depth++
		default:
			s.depth--
		}
		i++
		if s.depth == 0 {
			s.st = scanAfter
			break
		}
	}
	s.keep(b[:i])
	return i
}

// keep adds to the id or method being read, up to maxKeptValue.
func (s *topScan) keep(b []byte) {
	switch s.cur {
	case "id":
		s.id, s.idLong = keepUpTo(s.id, b, s.idLong)
	case "method":
		s.method, s.methodLong = keepUpTo(s.method, b, s.methodLong)
	}
}

func keepUpTo(dst, b []byte, long bool) ([]byte, bool) {
	if long || len(dst)+len(b) > maxKeptValue {
		return dst[:0], true
	}
	return append(dst, b...), false
}

// endValue records the end of the value being read, at end.
func (s *topScan) endValue(end int64) {
	if s.cur == "params" {
		s.paramsAt = [2]int64{s.start, end}
	}
	s.cur, s.st = "", scanAfter
}

// finish ends the scan: a message cut short is bad.
func (s *topScan) finish() {
	switch s.st {
	case scanScalar:
		s.endValue(s.pos)
		s.fail("the message ends before its object does")
	case scanDone, scanBad:
	default:
		s.fail("the message ends before its object does")
	}
}

// readableID reports whether raw is an id the broker can answer with: a
// JSON string or number (null is no id: a notification).
func readableID(raw []byte, long bool) bool {
	if long || len(raw) == 0 {
		return false
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		return json.Unmarshal(raw, &s) == nil
	case c == '-' || (c >= '0' && c <= '9'):
		var n json.Number
		return json.Unmarshal(raw, &n) == nil
	}
	return false
}

// inParams reports whether offset lies within the message's params.
func (s *topScan) inParams(offset int64) bool {
	return s.hasParams && offset >= s.paramsAt[0] && (offset <= s.paramsAt[1] || s.badIn == "params")
}

// arrayElements cuts a JSON array into its elements, with no bound on
// nesting; ok is false when line is not one array whose brackets balance.
// What is inside the elements is not checked.
func arrayElements(line []byte) (elems [][]byte, ok bool) {
	line = bytes.TrimSpace(line)
	if len(line) < 2 || line[0] != '[' || line[len(line)-1] != ']' {
		return nil, false
	}
	depth, inStr, esc, from := 0, false, false, 1
	for i := 1; i < len(line)-1; i++ {
		c := line[i]
		switch {
		case esc:
			esc = false
		case inStr:
			esc, inStr = c == '\\', c != '"'
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth--; depth < 0 {
				return nil, false
			}
		case c == ',' && depth == 0:
			elems = append(elems, bytes.TrimSpace(line[from:i]))
			from = i + 1
		}
	}
	if depth != 0 || inStr {
		return nil, false
	}
	if last := bytes.TrimSpace(line[from : len(line)-1]); len(last) > 0 || len(elems) > 0 {
		elems = append(elems, last)
	}
	return elems, true
}
