package acp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// nested is n arrays one in another.
func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// Every request whose id can be read is answered, however malformed the
// rest: params nested deeper than encoding/json goes, cut short or of
// the wrong type get -32602, anything else -32600, each with the id
// exactly as the agent wrote it. What has no readable id is junk, and a
// notification is never answered.
func TestRoute_RequestsThatCannotBeDecodedAreAnsweredWithTheirId(t *testing.T) {
	c, p := newPair(t, Options{})
	c.register("s", t.TempDir())
	deep := nested(100_000)
	for _, tc := range []struct {
		name, line, id, code, says string
	}{
		{"params nested 100,000 deep", `{"jsonrpc":"2.0","id":7,"method":"fs/read_text_file","params":{"sessionId":"s","x":` + deep + `}}`,
			`7`, "-32602", "exceeded max depth"},
		{"params nested deep, the id last", `{"jsonrpc":"2.0","method":"session/request_permission","params":` + deep + `,"id":"late"}`,
			`"late"`, "-32602", "exceeded max depth"},
		{"an id with escapes and markup", `{"jsonrpc":"2.0","id":"\u0041<&>\"","method":"x","params":` + deep + `}`,
			`"\u0041<&>\""`, "-32602", "max depth"},
		{"a method that is not a string", `{"jsonrpc":"2.0","id":3,"method":5,"params":{}}`, `3`, "-32600", "method is not a string"},
		{"params cut off", `{"jsonrpc":"2.0","id":9,"method":"fs/read_text_file","params":{"sessionId":`, `9`, "-32602", "unexpected end"},
		{"params that are not JSON", `{"jsonrpc":"2.0","id":10,"method":"fs/read_text_file","params":{"a":nope}}`, `10`, "-32602", "invalid character"},
		{"more after the object", `{"jsonrpc":"2.0","id":11,"method":"x"} and more`, `11`, "-32600", "after top-level value"},
		{"an error member of the wrong type", `{"jsonrpc":"2.0","id":12,"method":"x","error":"oops"}`, `12`, "-32600", "cannot unmarshal"},
		{"a number id out of jsonrpc2's range", `{"jsonrpc":"2.0","id":18446744073709551615,"method":"fs/read_text_file"}`,
			`18446744073709551615`, "-32600", "whole number"},
		{"a batch with a deep request", `[{"jsonrpc":"2.0","id":13,"method":"x","params":` + deep + `}]`, `13`, "-32600", "batch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p.Send(tc.line)
			m := p.Next()
			if string(m["id"]) != tc.id || !strings.Contains(string(m["error"]), tc.code) || !strings.Contains(string(m["error"]), tc.says) {
				t.Fatalf("answered id %s error %s; want id %s, %s saying %q", m["id"], m["error"], tc.id, tc.code, tc.says)
			}
		})
	}
	// Nothing to answer: no id, or one that is null; both are junk.
	junk := c.Stats().JunkLines
	p.Send(`{"jsonrpc":"2.0","method":"session/update","params":` + deep + `}`)
	p.Send(`{"jsonrpc":"2.0","id":null,"method":"x","params":` + deep + `}`)
	p.Send(`{"jsonrpc":"2.0","id":` + deep + `,"method":"x"}`)
	// The Conn still serves: a round trip comes after all three.
	call, err := c.Start(context.Background(), "ping", nil)
	if err != nil {
		t.Fatal(err)
	}
	m := p.Next()
	if string(m["method"]) != `"ping"` {
		t.Fatalf("after the unanswerable lines the Conn wrote %v", m)
	}
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":null}`, m["id"]))
	waitDone(t, call)
	if got := c.Stats().JunkLines - junk; got != 3 {
		t.Fatalf("%d junk lines counted, want 3", got)
	}
}

// A request on a line longer than the line cap is skipped without being
// kept, and still answered -32600 with its id, wherever the id is on the
// line; an answer too long fails the call it was for instead of leaving
// it waiting.
func TestStream_AnOversizeLineIsAnsweredWithItsId(t *testing.T) {
	c, p := newPair(t, Options{MaxLineBytes: 1 << 20})
	big := strings.Repeat("x", 3<<20)
	p.Send(`{"jsonrpc":"2.0","id":"first","method":"fs/write_text_file","params":{"sessionId":"s","content":"` + big + `"}}`)
	p.Send(`{"jsonrpc":"2.0","method":"fs/write_text_file","params":{"content":"` + big + `\"]}"},"id":42}`)
	for _, id := range []string{`"first"`, `42`} {
		m := p.Next()
		if string(m["id"]) != id || !strings.Contains(string(m["error"]), "-32600") || !strings.Contains(string(m["error"]), "longer than the 1048576 bytes") {
			t.Fatalf("an oversize request answered id %s %s; want id %s", m["id"], m["error"], id)
		}
	}
	call, err := c.Start(context.Background(), "session/prompt", nil)
	if err != nil {
		t.Fatal(err)
	}
	id := p.Next()["id"]
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"text":"%s"}}`, id, big))
	waitDone(t, call)
	if err := call.Result(nil); !errors.Is(err, ErrUnreadableAnswer) || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("a call whose answer was too long: %v", err)
	}
	if s := c.Stats(); s.OversizeLines != 3 || s.PendingRequests != 0 {
		t.Fatalf("oversize lines %d, pending requests %d; want 3 and 0", s.OversizeLines, s.PendingRequests)
	}
}

// An answer nested deeper than encoding/json goes fails the call it was
// for, which would otherwise wait for ever; one for no live call is
// counted stale.
func TestRoute_AnAnswerThatCannotBeDecodedFailsItsCall(t *testing.T) {
	c, p := newPair(t, Options{})
	call, err := c.Start(context.Background(), "session/prompt", nil)
	if err != nil {
		t.Fatal(err)
	}
	id := p.Next()["id"]
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`, id, nested(20_000)))
	waitDone(t, call)
	if err := call.Result(nil); !errors.Is(err, ErrUnreadableAnswer) || !strings.Contains(err.Error(), "session/prompt") {
		t.Fatalf("a call answered too deep: %v", err)
	}
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`, id, nested(20_000)))
	// A round trip orders the check after the second answer.
	call, _ = c.Start(context.Background(), "ping", nil)
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":null}`, p.Next()["id"]))
	waitDone(t, call)
	if s := c.Stats(); s.StaleResponses != 1 || s.PendingRequests != 0 {
		t.Fatalf("stale %d, pending %d; want 1 and 0", s.StaleResponses, s.PendingRequests)
	}
}

// The scan finds the members of an object however deep its values and
// in whatever pieces it comes.
func TestTopScan_FindsTheMembersInAnyPieces(t *testing.T) {
	line := `{"jsonrpc":"2.0", "params" : {"a":"}\"{[",` + `"b":` + nested(50) + `} ,"method":"m\"x","id":"i\\d"}`
	for _, size := range []int{1, 2, 3, 7, len(line)} {
		var s topScan
		for i := 0; i < len(line); i += size {
			s.feed([]byte(line[i:min(i+size, len(line))]))
		}
		s.finish()
		params := line[s.paramsAt[0]:s.paramsAt[1]]
		if s.bad != "" || string(s.id) != `"i\\d"` || string(s.method) != `"m\"x"` || !s.hasParams || !strings.HasPrefix(params, `{"a"`) || !strings.HasSuffix(params, "]]}") {
			t.Fatalf("pieces of %d: bad %q, id %s, method %s, params %q", size, s.bad, s.id, s.method, params)
		}
	}
	for _, bad := range []string{`{"id":1`, `{"id":1,}`, `{"id" 1}`, `{"id":1}x`, `[1]`, `{"id":}`} {
		if s := scanMessage([]byte(bad)); s.bad == "" {
			t.Errorf("%s scanned as well-formed", bad)
		}
	}
}

// A big line's buffer serves the next line when that one is there
// already, and is let go once nothing more waits: an idle agent does not
// keep a big line's memory.
func TestStream_ABigLineBufferIsKeptOnlyWhileLinesWait(t *testing.T) {
	big := strings.Repeat("b", 1<<20)
	s := &lineStream{r: bufio.NewReaderSize(strings.NewReader(big+"\n"+"small\n"), 4<<10), max: 2 << 20}
	if line, err := s.readLine(); err != nil || len(line) != len(big) {
		t.Fatalf("first line: %d bytes, %v", len(line), err)
	}
	held := cap(s.buf)
	if line, err := s.readLine(); err != nil || string(line) != "small" || cap(s.buf) != held {
		t.Fatalf("second line %q, %v: buffer of %d bytes, was %d", line, err, cap(s.buf), held)
	}
	if _, err := s.readLine(); err == nil || cap(s.buf) > 64<<10 {
		t.Fatalf("at the end (%v) the buffer holds %d bytes", err, cap(s.buf))
	}
}

// An agent's error answer keeps a few KiB of its message: it goes to the
// thread, the log and the state store.
func TestCall_AnErrorMessageIsCut(t *testing.T) {
	c, p := newPair(t, Options{})
	call, err := c.Start(context.Background(), "session/prompt", nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32603,"message":"%s"}}`, p.Next()["id"], strings.Repeat("e", 8<<20)))
	waitDone(t, call)
	rpcErr, ok := errors.AsType[*RPCError](call.Result(nil))
	if !ok || len(rpcErr.Message) > maxErrorMessage || !strings.HasPrefix(rpcErr.Message, "eee") {
		t.Fatalf("error answer: %v", call.Result(nil))
	}
}

// What the agent chose (a session id, a method, a path) reaches the log
// cut to maxLogged bytes: a line of the log stays short however long
// they are.
func TestConn_TheLogCutsWhatTheAgentChose(t *testing.T) {
	var log lockedBuffer
	agentOutR, agentOutW := io.Pipe()
	c := NewConn(agentOutR, nopWriteCloser{io.Discard}, Options{Logger: zerolog.New(&log)})
	long := strings.Repeat("L", 1<<20)
	c.register("s", t.TempDir())
	fmt.Fprintf(agentOutW, `{"jsonrpc":"2.0","id":1,"method":"session/request_permission","params":{"sessionId":%q,"toolCall":{"toolCallId":"t"},"options":[]}}`+"\n", long)
	fmt.Fprintf(agentOutW, `{"jsonrpc":"2.0","id":2,"method":"fs/read_text_file","params":{"sessionId":"s","path":"/%s"}}`+"\n", long)
	fmt.Fprintf(agentOutW, `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":%q}}}`+"\n", long)
	agentOutW.Close()
	<-c.Done()
	c.Close()
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if len(lines) < 2 {
		t.Fatalf("logged %q", log.String())
	}
	for _, l := range lines {
		if len(l) > 4*maxLogged {
			t.Fatalf("a log line of %d bytes: %.200s…", len(l), l)
		}
	}
}
