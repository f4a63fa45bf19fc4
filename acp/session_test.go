package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// asyncResult runs f on a goroutine and returns its error on a channel.
func asyncResult(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

func waitErr(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("no result within 5s")
		return nil
	}
}

// initialize sends protocol version 1, our capabilities and client info,
// and refuses an agent that answers with another version. With no Host,
// neither files nor terminals are offered (host's tests show them offered
// with one).
func TestInitialize_SendsOurCapabilitiesAndRefusesAnotherVersion(t *testing.T) {
	c, p := newPair(t, Options{ClientInfo: Implementation{Name: "acp-broker", Version: "1.2.3"}})
	var caps AgentCapabilities
	done := asyncResult(func() error {
		res, err := c.Initialize(context.Background())
		if err == nil {
			caps = res.AgentCapabilities
		}
		return err
	})
	req := p.NextMethod("initialize")
	var params struct {
		ProtocolVersion    int
		ClientCapabilities struct {
			FS       struct{ ReadTextFile, WriteTextFile bool }
			Terminal bool
		}
		ClientInfo struct{ Name, Version string }
	}
	json.Unmarshal(req["params"], &params)
	if params.ProtocolVersion != 1 || params.ClientCapabilities.FS.ReadTextFile || params.ClientCapabilities.FS.WriteTextFile ||
		params.ClientCapabilities.Terminal || params.ClientInfo.Name != "acp-broker" || params.ClientInfo.Version != "1.2.3" {
		t.Fatalf("initialize params = %s", req["params"])
	}
	p.Reply(req, `{"protocolVersion":1,"agentCapabilities":{"loadSession":true,"promptCapabilities":{"image":true}},"authMethods":[],"_meta":{"x":1}}`)
	if err := waitErr(t, done); err != nil {
		t.Fatal(err)
	}
	if !caps.LoadSession || !caps.PromptCapabilities.Image || caps.PromptCapabilities.Audio {
		t.Fatalf("capabilities = %+v", caps)
	}

	c2, p2 := newPair(t, Options{})
	done = asyncResult(func() error { _, err := c2.Initialize(context.Background()); return err })
	p2.Reply(p2.NextMethod("initialize"), `{"protocolVersion":2}`)
	if err := waitErr(t, done); !errors.Is(err, ErrProtocolVersion) {
		t.Fatalf("Initialize against version 2 = %v, want ErrProtocolVersion", err)
	}
}

// session/new is sent with an absolute cwd; when the agent says
// authentication is required, the configured method is used and
// session/new retried. Updates sent before the answer come back with it.
func TestNewSession_AuthenticatesWhenRequiredAndKeepsEarlyUpdates(t *testing.T) {
	c, p := newPair(t, Options{AuthMethod: "api-key"})
	var sid string
	var early []Update
	done := asyncResult(func() error {
		var err error
		sid, early, err = c.NewSession(context.Background(), ".", nil)
		return err
	})
	first := p.NextMethod("session/new")
	var params NewSessionParams
	json.Unmarshal(first["params"], &params)
	if !filepath.IsAbs(params.Cwd) || params.MCPServers == nil {
		t.Fatalf("session/new params = %s, want an absolute cwd and an mcpServers list", first["params"])
	}
	p.ReplyErr(first, CodeAuthRequired, "Authentication required")
	auth := p.NextMethod("authenticate")
	if !strings.Contains(string(auth["params"]), `"methodId":"api-key"`) {
		t.Fatalf("authenticate params = %s", auth["params"])
	}
	p.Reply(auth, `{}`)
	second := p.NextMethod("session/new")
	p.Send(update("S1", "before the answer"))
	p.Reply(second, `{"sessionId":"S1"}`)
	if err := waitErr(t, done); err != nil {
		t.Fatal(err)
	}
	if sid != "S1" || len(early) != 1 || early[0].Content.Text != "before the answer" {
		t.Fatalf("session %q, early updates %+v", sid, early)
	}
}

func TestNewSession_AuthRequiredWithoutAMethodNamesTheSetting(t *testing.T) {
	c, p := newPair(t, Options{})
	done := asyncResult(func() error {
		_, err := c.Initialize(context.Background())
		if err != nil {
			return err
		}
		_, _, err = c.NewSession(context.Background(), t.TempDir(), nil)
		return err
	})
	p.Reply(p.NextMethod("initialize"), `{"protocolVersion":1,"authMethods":[{"id":"oauth","name":"Log in"},{"id":"api-key","name":"Key"}]}`)
	p.ReplyErr(p.NextMethod("session/new"), CodeAuthRequired, "Authentication required")
	err := waitErr(t, done)
	if !errors.Is(err, ErrAuthRequired) || !strings.Contains(err.Error(), "agent.auth_method") || !strings.Contains(err.Error(), "oauth, api-key") {
		t.Fatalf("err = %v, want ErrAuthRequired naming agent.auth_method and the offered methods", err)
	}
}

// session/load accepts null or an object as its answer; a refusal is an
// error the caller can fall back from.
func TestLoadSession_AcceptsNullOrObjectAndReportsRefusal(t *testing.T) {
	c, p := newPair(t, Options{})
	for _, result := range []string{`null`, `{"modes":null}`} {
		done := asyncResult(func() error { _, err := c.LoadSession(context.Background(), "S9", t.TempDir(), nil); return err })
		req := p.NextMethod("session/load")
		if !strings.Contains(string(req["params"]), `"sessionId":"S9"`) {
			t.Fatalf("session/load params = %s", req["params"])
		}
		p.Reply(req, result)
		if err := waitErr(t, done); err != nil {
			t.Fatalf("answer %s: %v", result, err)
		}
	}
	done := asyncResult(func() error { _, err := c.LoadSession(context.Background(), "gone", t.TempDir(), nil); return err })
	p.ReplyErr(p.NextMethod("session/load"), CodeNotFound, "session not found")
	var rpcErr *RPCError
	if err := waitErr(t, done); !errors.As(err, &rpcErr) || rpcErr.Code != CodeNotFound {
		t.Fatalf("refused load = %v", err)
	}
}

// Many goroutines writing at once never interleave: each message is one
// whole line.
func TestConn_ConcurrentWritesAreWholeLines(t *testing.T) {
	c, p := newPair(t, Options{})
	var wg sync.WaitGroup
	big := strings.Repeat("z", 200<<10) // larger than a pipe buffer
	for i := range 20 {
		wg.Go(func() {
			call, err := c.Start(context.Background(), "x/echo", map[string]string{"pad": big, "n": fmt.Sprint(i)})
			if err == nil {
				call.Abandon()
			}
		})
	}
	// Each call, and its withdrawal once abandoned.
	for range 40 {
		m := p.Next() // next fails the test on a line that is not JSON
		if method := str(m["method"]); method != "x/echo" && method != MethodCancelRequest {
			t.Fatalf("unexpected message %v", m["method"])
		}
	}
	wg.Wait()
}

// session/cancel is a notification: no id, and nothing waits for an answer.
func TestCancelSession_IsANotification(t *testing.T) {
	c, p := newPair(t, Options{})
	c.CancelSession("S1")
	m := p.NextMethod("session/cancel")
	if _, hasID := m["id"]; hasID || string(m["params"]) != `{"sessionId":"S1"}` {
		t.Fatalf("session/cancel = %v", m)
	}
	if n := c.Stats().PendingRequests; n != 0 {
		t.Fatalf("pending = %d after a notification", n)
	}
}

// A permission request reaches the approver with the tool call's input as
// the agent wrote it: keys in its order, and <, > and & not escaped, so a
// person sees the command that will run.
func TestPermission_RawInputAsTheAgentWroteIt(t *testing.T) {
	c, p := newPair(t, Options{})
	got := make(chan string, 1)
	sub, _ := c.Subscribe("s", ApproverFunc(func(ctx context.Context, r *PermissionRequest) PermissionOutcome {
		got <- string(r.ToolCall.RawInput)
		return PermissionOutcome{}
	}))
	defer sub.Close()
	input := `{"command":"printf x > out.txt && cat < in.txt","description":"write"}`
	p.Send(`{"jsonrpc":"2.0","id":3,"method":"session/request_permission","params":{"sessionId":"s","toolCall":{"toolCallId":"t","rawInput":` + input + `},"options":[{"optionId":"a","name":"Allow","kind":"allow_once"}]}}`)
	select {
	case raw := <-got:
		if raw != input {
			t.Fatalf("raw input = %s, want %s", raw, input)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("approver not asked")
	}
	p.Next()
}
