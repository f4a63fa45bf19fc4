package interop

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"acpbroker/acp"
)

const (
	// cancelBound is how long an agent may take to answer a cancelled
	// prompt here; the observed times are milliseconds (SDK example: up to
	// its one-second step).
	cancelBound = 10 * time.Second
	// eofWindow is how long an agent that keeps running after stdin EOF is
	// watched before it is signalled.
	eofWindow = 2 * time.Second
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*startTimeout)
	t.Cleanup(cancel)
	return ctx
}

func chunkTexts(updates []acp.Update) []string {
	var out []string
	for _, u := range updates {
		if u.Kind == acp.UpdateMessageChunk && u.Content != nil && u.Content.Text != "" {
			out = append(out, u.Content.Text)
		}
	}
	return out
}

// inOrder reports whether want appears in got as consecutive elements.
func inOrder(got, want []string) bool {
	for i := 0; i+len(want) <= len(got); i++ {
		if slices.Equal(got[i:i+len(want)], want) {
			return true
		}
	}
	return false
}

// waitWire polls the wire record until one message satisfies match.
func (a *agent) waitWire(ctx context.Context, match func(wireMsg) bool) bool {
	return pollUntil(ctx, 5*time.Millisecond, func() bool {
		return slices.ContainsFunc(a.wire.snapshot(), match)
	})
}

func sentCancel(m wireMsg) bool { return m.Out && m.Method == acp.MethodSessionCancel }

func lateKinds(after []wireMsg) string {
	var out []string
	for _, m := range after {
		var n acp.SessionNotification
		if err := json.Unmarshal(m.Params, &n); err == nil {
			out = append(out, n.Update.Kind)
		}
	}
	return strings.Join(out, ",")
}

// TestTextTurn proves the basic exchange with each real agent over its
// stdio: initialize answers protocol version 1, session/new returns a
// session id, and a prompt gets its answer streamed as separate
// agent_message_chunk updates (for codex-acp and claude-agent-acp exactly
// the chunks the fake model streamed, in order), then stopReason end_turn.
// The SDK example's fixed turn also asks one permission, allowed here.
func TestTextTurn(t *testing.T) {
	forEachAgent(t, func(t *testing.T, s *subject) {
		ctx := testContext(t)
		a := startAgent(t, s.spec)
		_, sid, _ := a.handshake(ctx)
		chunks := []string{"Hello", " from", " the fake", " model."}
		s.text(chunks...)
		r := a.startTurn(ctx, sid, "Say hello.", newApprover(allowOnce)).wait()
		if r.Err != nil || r.Stop != acp.StopEndTurn {
			t.Fatalf("prompt answered stop=%q err=%v, want end_turn", r.Stop, r.Err)
		}
		got := chunkTexts(r.Updates)
		if s.model {
			if !inOrder(got, chunks) {
				t.Errorf("message chunks = %q, want %q among them as separate updates", got, chunks)
			}
		} else if len(got) < 2 || !strings.Contains(messageText(r.Updates), "I'll help you with that") {
			t.Errorf("message chunks = %q, want the example agent's streamed text", got)
		}
		t.Logf("%s: turn took %v; updates %s; chunks %q; model requests %q", s.spec.Name, r.Elapsed.Round(time.Millisecond), kinds(r.Updates), got, s.modelRequests())
	})
}

// TestPermissionRunsCommand proves the permission round trip. A tool call
// that needs approval reaches the acp.Approver as
// session/request_permission with allow_once and reject_once options; its
// id is carried as the agent wrote it (string UUIDs from codex-acp,
// numbers from the TypeScript agents) and the answer echoes it. After
// "allow" the command really runs in the session's directory (the file it
// writes exists), its output goes back to the model, and the turn ends
// end_turn with the model's final text. The SDK example runs nothing; it
// reports its tool call completed.
func TestPermissionRunsCommand(t *testing.T) {
	forEachAgent(t, func(t *testing.T, s *subject) {
		ctx := testContext(t)
		a := startAgent(t, s.spec)
		_, sid, cwd := a.handshake(ctx)
		const final = "The file is written."
		s.command("printf interop > allowed.txt", final)
		appr := newApprover(allowOnce)
		r := a.startTurn(ctx, sid, "Write allowed.txt.", appr).wait()
		if r.Err != nil || r.Stop != acp.StopEndTurn {
			t.Fatalf("prompt answered stop=%q err=%v, want end_turn", r.Stop, r.Err)
		}

		var req *acp.PermissionRequest
		select {
		case req = <-appr.seen:
		default:
			t.Fatal("the approver saw no permission request")
		}
		var optKinds []string
		for _, o := range req.Options {
			optKinds = append(optKinds, o.Kind)
		}
		if !slices.Contains(optKinds, acp.OptionAllowOnce) || !slices.Contains(optKinds, acp.OptionRejectOnce) {
			t.Errorf("permission options %+v lack allow_once or reject_once", req.Options)
		}
		ids := a.permissionIDs()
		if len(ids) != 1 || idKind(ids[0]) != s.expect.permissionID {
			t.Errorf("permission request ids on the wire = %v, want one %s id", ids, s.expect.permissionID)
		}
		answers := a.permissionAnswers()
		if len(answers) != 1 || !strings.Contains(answers[0], `"outcome":"selected"`) {
			t.Errorf("permission answers on the wire = %v, want one selected outcome", answers)
		}
		t.Logf("%s: permission id %v, tool call %q (%s), options %+v; answer %v", s.spec.Name, ids, req.ToolCall.Title, req.ToolCall.Kind, req.Options, answers)

		if !s.model {
			done := slices.ContainsFunc(r.Updates, func(u acp.Update) bool {
				return u.Kind == acp.UpdateToolCallUpdate && u.ToolCallID == req.ToolCall.ToolCallID && u.Status == "completed"
			})
			if !done {
				t.Errorf("no completed tool_call_update for %q in %s", req.ToolCall.ToolCallID, kinds(r.Updates))
			}
			return
		}
		b, err := os.ReadFile(filepath.Join(cwd, "allowed.txt"))
		if err != nil || string(b) != "interop" {
			t.Errorf("allowed.txt = %q, %v; want the command to have written \"interop\"", b, err)
		}
		outs := s.toolOutputs()
		if len(outs) != 1 || strings.HasPrefix(outs[0], "error: ") {
			t.Errorf("tool output sent back to the model = %q, want one successful result", outs)
		}
		if !strings.Contains(messageText(r.Updates), final) {
			t.Errorf("turn text = %q, want the model's final answer %q", messageText(r.Updates), final)
		}
		t.Logf("%s: turn took %v; updates %s; tool output %q; model requests %q; processes now %q", s.spec.Name, r.Elapsed.Round(time.Millisecond), kinds(r.Updates), outs, s.modelRequests(), a.descendants())
	})
}

// TestCancelWhileThinking proves that session/cancel ends a turn while the
// agent waits on its model (a fake model call that never answers; for the
// SDK example, one of its one-second pauses): the prompt is answered with
// stopReason cancelled within cancelBound. It then sends one more prompt
// on the same session. codex-acp and the SDK example run it normally.
// claude-agent-acp 0.23.1 answers it at once with end_turn and zero usage
// (the cancelled turn's leftover "idle" state ends it) while Claude Code
// still asks the model in the background, and the answer is delivered
// during the following prompt: from then on every turn carries the
// previous prompt's output.
func TestCancelWhileThinking(t *testing.T) {
	forEachAgent(t, func(t *testing.T, s *subject) {
		ctx := testContext(t)
		a := startAgent(t, s.spec)
		_, sid, _ := a.handshake(ctx)
		s.hang()
		tn := a.startTurn(ctx, sid, "Think forever.", newApprover(holdUntilCancelled))
		if s.model {
			if err := s.hanging(ctx); err != nil {
				t.Fatalf("the agent never called the model: %v", err)
			}
		} else {
			select {
			case <-tn.first:
			case <-time.After(turnTimeout):
				t.Fatal("no update from the turn")
			}
		}
		cancelAt := time.Now()
		a.conn.CancelSession(sid)
		a.conn.CancelPermissions(sid, context.Canceled)
		select {
		case <-tn.call.Done():
		case <-time.After(cancelBound):
			t.Fatalf("no answer within %v of session/cancel", cancelBound)
		}
		took := time.Since(cancelAt)
		r := tn.wait()
		if r.Err != nil || r.Stop != acp.StopCancelled {
			t.Fatalf("cancelled prompt answered stop=%q err=%v, want cancelled", r.Stop, r.Err)
		}
		_, after := a.promptWire(tn.call, sid)
		aborted := "n/a"
		if s.model {
			aborted = "no"
			if pollUntil(withTimeout(ctx, time.Second), 20*time.Millisecond, s.hangAborted) {
				aborted = "yes"
			}
		}
		t.Logf("%s: answered cancelled %v after session/cancel; updates before the answer %s; after it (%v) [%s]; hung model request closed by the agent: %s", s.spec.Name, took.Round(time.Millisecond), kinds(r.Updates), lateGrace, lateKinds(after), aborted)

		s.text("After", " the cancel.")
		next := a.startTurn(ctx, sid, "Are you there?", newApprover(allowOnce))
		nr := next.wait()
		if nr.Err != nil || nr.Stop != acp.StopEndTurn {
			t.Fatalf("prompt after the cancel answered stop=%q err=%v, want end_turn", nr.Stop, nr.Err)
		}
		text := messageText(nr.Updates)
		t.Logf("%s: prompt after the cancel: end_turn after %v, text %q", s.spec.Name, nr.Elapsed.Round(time.Millisecond), text)
		switch {
		case !s.model:
		case !s.expect.staleAnswerAfterCancel:
			if !strings.Contains(text, "After the cancel.") {
				t.Errorf("text of the prompt after the cancel = %q, want the model's answer", text)
			}
		default:
			if strings.Contains(text, "After the cancel.") {
				t.Fatalf("the prompt after the cancel got its own answer %q: the stale end_turn is gone", text)
			}
			// The model is still asked, in the background...
			if err := s.scriptUsed(withTimeout(ctx, turnTimeout)); err != nil {
				t.Fatalf("the model was never asked for the second prompt: %v", err)
			}
			// ...and its answer is delivered in the next turn.
			s.text("Third answer.")
			third := a.startTurn(ctx, sid, "And now?", newApprover(allowOnce)).wait()
			thirdText := messageText(third.Updates)
			t.Logf("%s: third prompt: %s after %v, text %q; model requests %q", s.spec.Name, third.Stop, third.Elapsed.Round(time.Millisecond), thirdText, s.modelRequests())
			if third.Err != nil || third.Stop != acp.StopEndTurn || !strings.Contains(thirdText, "After the cancel.") {
				t.Errorf("third prompt answered stop=%q err=%v text %q, want end_turn carrying the second prompt's answer", third.Stop, third.Err, thirdText)
			}
		}
	})
}

// TestCancelDuringPermission proves the cancellation rule for a pending
// permission request, in the order the protocol describes: session/cancel
// goes out first, then the request is answered {"outcome":"cancelled"}
// (with the agent's own id). codex-acp and claude-agent-acp answer the
// prompt cancelled; the SDK example answers end_turn (it returns normally
// from a cancelled permission). Either way the command never runs.
func TestCancelDuringPermission(t *testing.T) {
	forEachAgent(t, func(t *testing.T, s *subject) {
		ctx := testContext(t)
		a := startAgent(t, s.spec)
		_, sid, cwd := a.handshake(ctx)
		s.command("printf no > denied.txt", "This must not be reached.")
		appr := newApprover(holdUntilCancelled)
		tn := a.startTurn(ctx, sid, "Write denied.txt.", appr)
		select {
		case <-appr.seen:
		case <-time.After(turnTimeout):
			t.Fatal("no permission request")
		}
		cancelAt := time.Now()
		a.conn.CancelSession(sid)
		if !a.waitWire(ctx, sentCancel) {
			t.Fatal("session/cancel never reached the wire")
		}
		a.conn.CancelPermissions(sid, context.Canceled)
		select {
		case <-tn.call.Done():
		case <-time.After(cancelBound):
			t.Fatalf("no answer within %v of session/cancel", cancelBound)
		}
		took := time.Since(cancelAt)
		r := tn.wait()
		if r.Err != nil || r.Stop != s.expect.cancelledPermissionStop {
			t.Errorf("prompt answered stop=%q err=%v, want %s", r.Stop, r.Err, s.expect.cancelledPermissionStop)
		}
		ids, answers := a.permissionIDs(), a.permissionAnswers()
		if len(ids) != 1 || len(answers) != 1 || !strings.Contains(answers[0], `"outcome":{"outcome":"cancelled"}`) || !strings.Contains(answers[0], `"id":`+ids[0]) {
			t.Errorf("permission %v answered %v, want {\"outcome\":\"cancelled\"} with the same id", ids, answers)
		}
		if _, err := os.Stat(filepath.Join(cwd, "denied.txt")); !os.IsNotExist(err) {
			t.Errorf("denied.txt: %v; the refused command must not run", err)
		}
		_, after := a.promptWire(tn.call, sid)
		t.Logf("%s: answered %s %v after session/cancel; updates %s; after the answer [%s]; model requests %q; tool outputs %q", s.spec.Name, r.Stop, took.Round(time.Millisecond), kinds(r.Updates), lateKinds(after), s.modelRequests(), s.toolOutputs())
	})
}

// TestPermissionCancelledBeforeSessionCancel shows why that order matters.
// Here the pending request is answered "cancelled" first and session/cancel
// follows only after the turn settled (or two seconds). codex-acp treats the
// cancelled permission as an abort and answers cancelled at once.
// claude-agent-acp treats it as a failed tool call: it sends the failure
// ("Tool use aborted") back to the model, goes on with the model's next
// answer and ends the turn end_turn; the command never runs in either.
func TestPermissionCancelledBeforeSessionCancel(t *testing.T) {
	forEachAgent(t, func(t *testing.T, s *subject) {
		if !s.model {
			t.Skip("the SDK example ends its turn on any cancelled permission (see TestCancelDuringPermission)")
		}
		ctx := testContext(t)
		a := startAgent(t, s.spec)
		_, sid, cwd := a.handshake(ctx)
		const final = "Carrying on without the tool."
		s.command("printf no > denied.txt", final)
		appr := newApprover(holdUntilCancelled)
		tn := a.startTurn(ctx, sid, "Write denied.txt.", appr)
		select {
		case <-appr.seen:
		case <-time.After(turnTimeout):
			t.Fatal("no permission request")
		}
		a.conn.CancelPermissions(sid, context.Canceled)
		if !pollUntil(ctx, 5*time.Millisecond, func() bool { return len(a.permissionAnswers()) == 1 }) {
			t.Fatal("the cancelled answer never reached the wire")
		}
		select {
		case <-tn.call.Done():
		case <-time.After(2 * time.Second):
		}
		a.conn.CancelSession(sid)
		r := tn.wait()
		outs := s.toolOutputs()
		switch s.spec.Name {
		case "codex-acp":
			if r.Err != nil || r.Stop != acp.StopCancelled {
				t.Errorf("prompt answered stop=%q err=%v, want cancelled", r.Stop, r.Err)
			}
		case "claude-agent-acp":
			if r.Err != nil || r.Stop != acp.StopEndTurn {
				t.Errorf("prompt answered stop=%q err=%v, want end_turn", r.Stop, r.Err)
			}
			if len(outs) != 1 || !strings.Contains(outs[0], "Tool use aborted") {
				t.Errorf("tool results sent to the model = %q, want the aborted tool use", outs)
			}
			if !strings.Contains(messageText(r.Updates), final) {
				t.Errorf("turn text = %q, want the model's next answer %q", messageText(r.Updates), final)
			}
		}
		if _, err := os.Stat(filepath.Join(cwd, "denied.txt")); !os.IsNotExist(err) {
			t.Errorf("denied.txt: %v; the refused command must not run", err)
		}
		t.Logf("%s: answered %s; updates %s; model requests %q; tool outputs %q", s.spec.Name, r.Stop, kinds(r.Updates), s.modelRequests(), outs)
	})
}

// TestStdinEOF records what each agent does when its stdin closes, before
// any session and with a live session: the SDK example exits at once in
// both cases; codex-acp keeps running in both, with its stdout open;
// claude-agent-acp exits when it has no session but keeps running (with
// its Claude Code child) when it has one. Whatever keeps running ends when
// its process group gets SIGTERM, children included.
func TestStdinEOF(t *testing.T) {
	for _, sub := range subjects {
		for _, withSession := range []bool{false, true} {
			name := "idle"
			if withSession {
				name = "session"
			}
			t.Run(sub.name+"/"+name, func(t *testing.T) {
				s := sub.make(t)
				wantExit := s.expect.exitsOnEOF
				if withSession {
					wantExit = s.expect.exitsOnEOFWithSession
				}
				ctx := testContext(t)
				a := startAgent(t, s.spec)
				if withSession {
					a.handshake(ctx)
				} else if _, err := a.conn.Initialize(ctx); err != nil {
					t.Fatal(err)
				}
				tree := a.descendants()
				closedAt := time.Now()
				if err := a.stdin.Close(); err != nil {
					t.Fatal(err)
				}
				if wantExit {
					if !a.waitExit(startTimeout) {
						t.Fatalf("still running %v after stdin EOF", startTimeout)
					}
					t.Logf("%s/%s: exited %v after stdin EOF (children before: %q)", s.spec.Name, name, time.Since(closedAt).Round(time.Millisecond), tree)
					select {
					case <-a.conn.Done():
					case <-time.After(10 * time.Second):
						t.Error("stdout still open after the agent exited")
					}
					return
				}
				if a.waitExit(eofWindow) {
					t.Fatalf("exited %v after stdin EOF; it was seen to keep running", time.Since(closedAt).Round(time.Millisecond))
				}
				select {
				case <-a.conn.Done():
					t.Errorf("stdout closed after stdin EOF, though the agent runs on: %v", a.conn.Err())
				default:
				}
				members := a.groupMembers()
				termAt := time.Now()
				if err := syscall.Kill(-a.pid, syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				if !a.waitExit(10 * time.Second) {
					t.Fatal("still running 10s after SIGTERM to its group")
				}
				exited := time.Since(termAt)
				if !pollUntil(ctx, 20*time.Millisecond, func() bool { return len(a.groupMembers()) == 0 }) {
					t.Errorf("group members left after SIGTERM: %v", a.groupMembers())
				}
				t.Logf("%s/%s: still running %v after stdin EOF (group %v, children %q); exited %v after SIGTERM, group empty %v after it", s.spec.Name, name, eofWindow, members, tree, exited.Round(time.Millisecond), time.Since(termAt).Round(time.Millisecond))
			})
		}
	}
}

// withTimeout is ctx bounded by d; the bound is released when ctx ends.
func withTimeout(ctx context.Context, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(ctx, d)
	context.AfterFunc(ctx, cancel)
	return ctx
}
