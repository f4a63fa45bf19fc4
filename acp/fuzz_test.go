package acp

import (
	"bytes"
	"testing"
	"time"
)

// FuzzConn_AgentOutput feeds arbitrary bytes to a live Conn as the agent's
// stdout. Whatever they are, the Conn survives them: a request sent after
// them is still answered, nothing is left pending, and nothing panics or
// blocks.
func FuzzConn_AgentOutput(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}}`,
		`{"jsonrpc":"2.0","id":0,"result":{"stopReason":"end_turn"}}`,
		`{"jsonrpc":"2.0","id":"7","error":{"code":-32603,"message":"boom"}}`,
		`{"jsonrpc":"2.0","id":3,"method":"session/request_permission","params":{"sessionId":"s","toolCall":{"toolCallId":"c"},"options":[{"optionId":"a","name":"A","kind":"allow_once"}]}}`,
		`{"jsonrpc":"2.0","id":4,"method":"fs/read_text_file","params":{"sessionId":"s","path":"/etc/passwd"}}`,
		`{"jsonrpc":"2.0","id":5,"method":"fs/write_text_file","params":{"sessionId":"s","path":"/tmp/x","content":"x"}}`,
		`{"jsonrpc":"2.0","id":6,"method":"no/such","params":{}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":null}`,
		`[{"jsonrpc":"2.0","id":1,"method":"no/such"}]`,
		`{"jsonrpc":"2.0","id":{"a":1},"method":"no/such"}`,
		`{"jsonrpc":"2.0","id":1.5,"result":null}`,
		`{"jsonrpc":"2.0","id":8,"method":"elicitation/create","params":{"sessionId":"s","mode":"form","message":"m","requestedSchema":{"type":"object","properties":{"a":{"type":"string"}}}}}`,
		`{"jsonrpc":"2.0","id":9,"method":"elicitation/create","params":{"sessionId":"s","mode":"url","message":"m","url":"https://x","elicitationId":"e"}}`,
		`{"jsonrpc":"2.0","method":"elicitation/complete","params":{"elicitationId":"e"}}`,
		`{"jsonrpc":"2.0","id":10,"method":"terminal/create","params":{"sessionId":"s","command":"sh","args":["-c","yes"],"outputByteLimit":1}}`,
		`{"jsonrpc":"2.0","id":11,"method":"terminal/output","params":{"sessionId":"s","terminalId":"t"}}`,
		`{"jsonrpc":"2.0","id":12,"method":"terminal/wait_for_exit","params":{"sessionId":"s","terminalId":"t"}}`,
		`{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":12}}`,
		`{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":{"x":[]}}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"config_option_update","configOptions":[{"id":"m","name":"M","type":"select","currentValue":"a","options":[{"group":"g","name":"G","options":[{"value":"a","name":"A"}]}]}]}}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"usage_update","used":-1,"size":1e309}}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"tool_call","toolCallId":"c","content":[{"type":"diff","path":"/x","oldText":null,"newText":"a"}]}}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"no_such_kind"}}}`,
		`{"jsonrpc":"2.0","id":13,"method":"fs/read_text_file","params":{"sessionId":"s","path":` + nested(12000) + `}}`,
		`{"jsonrpc":"2.0","method":5,"id":"m","params":{}}`,
		`{"jsonrpc":"2.0","id":14,"result":` + nested(12000) + `}`,
		`{"jsonrpc":"2.0","id":15,"method":"x","params":{"a":}} tail`,
		`[{"jsonrpc":"2.0","id":16,"method":"x","params":` + nested(12000) + `},{"id":17,"method":5}]`,
		"not json at all",
		"{\"jsonrpc\":\"2.0\",\"method\":\"session/update\"",
		"\x00\xff\xfe",
		"",
	} {
		f.Add([]byte(s + "\n"))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, p := newPair(t, Options{MaxLineBytes: 1 << 16})
		if !bytes.HasSuffix(data, []byte("\n")) {
			data = append(data, '\n')
		}
		wrote := make(chan error, 1)
		go func() { _, err := p.W.Write(data); wrote <- err }()
		select {
		case err := <-wrote:
			if err != nil {
				t.Fatalf("the Conn stopped reading: %v", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("the Conn stopped reading the agent's output")
		}
		// A request nobody listens to is answered "cancelled": the read
		// loop and the router are still alive.
		const probe = `"fuzz-probe-1f0c"`
		p.Send(`{"jsonrpc":"2.0","id":` + probe + `,"method":"session/request_permission","params":{"sessionId":"nobody","toolCall":{"toolCallId":"c"},"options":[]}}`)
		deadline := time.After(2 * time.Second)
		for answered := false; !answered; {
			select {
			case m := <-p.Msg:
				answered = string(m["id"]) == probe
			case <-deadline:
				t.Fatal("the Conn did not answer a request after the input")
			}
		}
		st := c.Stats()
		if st.PendingRequests != 0 || st.Subscribers != 0 {
			t.Fatalf("left behind: %+v", st)
		}
	})
}
