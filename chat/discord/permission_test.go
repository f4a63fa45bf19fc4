package discord_test

import (
	"strings"
	"testing"
	"time"

	"acpbroker/adapter"
	"acpbroker/internal/fakediscord"
)

// permissionMessage waits for the permission request in thread and
// returns it.
func (h *harness) permissionMessage(thread string) fakediscord.Message {
	h.t.Helper()
	var msg fakediscord.Message
	h.srv.Await("permission request", func() bool {
		for _, m := range h.srv.Messages(thread) {
			if strings.HasPrefix(m.Content, "🔐 **Permission needed**") && len(m.Buttons()) > 0 {
				msg = m
				return true
			}
		}
		return false
	})
	return msg
}

// response waits for the bot's answer to an interaction and checks it came
// within Discord's 3 seconds.
func (h *harness) response(id string) fakediscord.InteractionResponse {
	h.t.Helper()
	h.srv.Await("interaction answered", func() bool { return len(h.srv.InteractionResponses(id)) > 0 })
	r := h.srv.InteractionResponses(id)[0]
	if r.Late || r.Latency > 3*time.Second {
		h.t.Fatalf("interaction answered after %s", r.Latency)
	}
	return r
}

// The agent's permission request shows one button per option. Only the
// thread's starter (or an approver) may click: anyone else is told so
// privately. The click is answered within 3 seconds, the buttons give way
// to who chose what, and the agent gets the choice.
func TestPermission_StarterClicksAllow(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "permission")
	msg := h.permissionMessage(thread)
	if got := len(msg.Buttons()); got != 3 {
		t.Fatalf("%d buttons, want one per option", got)
	}
	wrong := h.srv.ClickButton(thread, msg.ID, bob.ID, msg.ButtonID(t, "Allow"))
	if r := h.response(wrong); !r.Ephemeral() || !strings.Contains(r.Content, "can answer this request; you can't") {
		t.Fatalf("bob's click answered %+v", r)
	}
	id := h.srv.ClickButton(thread, msg.ID, alice.ID, msg.ButtonID(t, "Allow"))
	r := h.response(id)
	if r.Type != 7 || !strings.Contains(r.Content, "<@"+alice.ID+"> chose **Allow**") {
		t.Fatalf("alice's click answered %+v", r)
	}
	after, _ := h.srv.Message(thread, msg.ID)
	if len(after.Buttons()) != 0 {
		t.Fatal("buttons still on the message after the choice")
	}
	h.answer(thread, "permission granted: allow")
	if s := h.client.Stats(); s.OpenPermissions != 0 {
		t.Fatalf("open permissions = %d after the answer", s.OpenPermissions)
	}
}

// Reject reaches the agent as a reject; an approver who did not start the
// thread may answer it.
func TestPermission_ApproverClicksReject(t *testing.T) {
	h := newHarness(t, setup{})
	a := accessFor(h)
	a.Approvers = []string{carol.ID}
	h.client.SetAccess(a)
	thread := h.mention(alice, "permission")
	msg := h.permissionMessage(thread)
	r := h.response(h.srv.ClickButton(thread, msg.ID, carol.ID, msg.ButtonID(t, "Reject")))
	if !strings.Contains(r.Content, "⛔ <@"+carol.ID+"> chose **Reject**") {
		t.Fatalf("carol's click answered %q", r.Content)
	}
	h.answer(thread, "permission denied: reject")
	if s := h.client.Stats(); s.OpenPermissions != 0 {
		t.Fatalf("open permissions = %d after the reject", s.OpenPermissions)
	}
}

// /cancel while a request waits for a click closes the request at once
// (saying so, buttons gone), tells the agent "cancelled" and frees its
// slot; the turn ends cancelled.
func TestPermission_CancelClosesTheOpenRequest(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "permission")
	msg := h.permissionMessage(thread)
	if s := h.client.Stats(); s.OpenPermissions != 1 {
		t.Fatalf("open permissions = %d while the request waits", s.OpenPermissions)
	}
	h.response(h.srv.SlashCommand(thread, alice.ID, "cancel", nil))
	h.srv.Await("request closed", func() bool {
		m, _ := h.srv.Message(thread, msg.ID)
		return len(m.Buttons()) == 0 && strings.Contains(m.Content, "cancelled")
	})
	h.answer(thread, "⏹️ cancelled by Alice")
	if s := h.client.Stats(); s.OpenPermissions != 0 {
		t.Fatalf("open permissions = %d after the cancel", s.OpenPermissions)
	}
	if m, _ := h.srv.Message(thread, msg.ID); strings.Contains(m.Content, "chose") {
		t.Fatalf("the cancelled request reads %q", m.Content)
	}
}

// turn.permission_timeout: with no click, the request closes (saying so,
// buttons gone), the agent is told "cancelled", and the slot is freed.
func TestPermission_TimeoutFailsClosed(t *testing.T) {
	h := newHarness(t, setup{engine: adapter.Config{PermissionTimeout: time.Second}})
	thread := h.mention(alice, "permission")
	msg := h.permissionMessage(thread)
	h.srv.Await("request closed", func() bool {
		m, _ := h.srv.Message(thread, msg.ID)
		return strings.Contains(m.Content, "Closed without an answer (no answer within 1s); the agent was told *cancelled*") && len(m.Buttons()) == 0
	})
	msgs := h.answer(thread, "permission cancelled")
	if !strings.Contains(joined(msgs), "was not answered within 1s; answered cancelled") {
		t.Fatalf("answer does not say the request timed out: %q", joined(msgs))
	}
	if s := h.client.Stats(); s.OpenPermissions != 0 {
		t.Fatalf("open permissions = %d after the timeout", s.OpenPermissions)
	}
}

// A button still showing after its request ended (here the edit that
// would have removed it failed) gets a polite private "no longer open".
func TestPermission_ClickAfterTheRequestEndedIsRefusedPolitely(t *testing.T) {
	h := newHarness(t, setup{engine: adapter.Config{PermissionTimeout: time.Second}})
	h.srv.InjectError(func(r fakediscord.Request) bool {
		return r.Route == fakediscord.RouteEditMessage && strings.Contains(string(r.Body), "Closed without an answer")
	}, 1, 500)
	thread := h.mention(alice, "permission")
	msg := h.permissionMessage(thread)
	h.answer(thread, "permission cancelled")
	r := h.response(h.srv.ClickButton(thread, msg.ID, alice.ID, msg.ButtonID(t, "Allow")))
	if !r.Ephemeral() || r.Content != "This permission request is no longer open." {
		t.Fatalf("late click answered %+v", r)
	}
}

// Two users clicking the same request at once: the first click decides,
// the other is told the request is no longer open.
func TestPermission_TwoClicksOneDecision(t *testing.T) {
	h := newHarness(t, setup{})
	a := accessFor(h)
	a.Approvers = []string{carol.ID}
	h.client.SetAccess(a)
	thread := h.mention(alice, "permission")
	msg := h.permissionMessage(thread)
	ids := h.srv.ClickTogether(thread, msg.ID,
		fakediscord.Click{UserID: alice.ID, CustomID: msg.ButtonID(t, "Allow")},
		fakediscord.Click{UserID: carol.ID, CustomID: msg.ButtonID(t, "Reject")})
	var decided, refused int
	for _, id := range ids {
		r := h.response(id)
		switch {
		case r.Type == 7 && strings.Contains(r.Content, "chose"):
			decided++
		case r.Ephemeral() && strings.Contains(r.Content, "no longer open"):
			refused++
		default:
			t.Fatalf("unexpected answer %+v", r)
		}
	}
	if decided != 1 || refused != 1 {
		t.Fatalf("%d decisions and %d refusals, want one of each", decided, refused)
	}
	h.answer(thread, "permission")
}

// With turn.permission_mode = allow or deny, requests are answered
// automatically (the agent's allow_once or reject_once option), no
// buttons are shown, and the thread says so.
func TestPermission_AutoModesAnswerAndSaySo(t *testing.T) {
	for _, tc := range []struct{ mode, answer, say string }{
		{adapter.PermissionAllow, "permission granted: allow", "Allowed “Run rm -rf build” by turn.permission_mode = allow."},
		{adapter.PermissionDeny, "permission denied: reject", "Denied “Run rm -rf build” by turn.permission_mode = deny."},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			h := newHarness(t, setup{engine: adapter.Config{PermissionMode: tc.mode}})
			thread := h.mention(alice, "permission")
			msgs := h.answer(thread, tc.answer)
			if !strings.Contains(joined(msgs), tc.say) {
				t.Fatalf("the thread was not told %q: %q", tc.say, joined(msgs))
			}
			for _, m := range h.srv.Messages(thread) {
				if len(m.Buttons()) > 0 {
					t.Fatalf("buttons shown in %s mode", tc.mode)
				}
			}
		})
	}
}

// Cancelling a turn answers its open permission request "cancelled" at
// once; closing the request's message on Discord comes after and never
// holds the answer up, even when Discord is slow to take the edit.
func TestPermission_CancelAnswersTheAgentBeforeDiscordTakesTheEdit(t *testing.T) {
	h := newHarness(t, setup{engine: adapter.Config{CancelGrace: 2 * time.Second}})
	const stall = 8 * time.Second
	h.srv.InjectStall(func(r fakediscord.Request) bool {
		return r.Route == fakediscord.RouteEditMessage && strings.Contains(string(r.Body), "Closed without an answer")
	}, 1, stall)
	thread := h.mention(alice, "permission")
	h.permissionMessage(thread)
	pid := h.pool.Lookup(thread).Proc.PID()
	h.response(h.srv.SlashCommand(thread, alice.ID, "cancel", nil))
	h.answer(thread, "⏹️ cancelled by Alice")
	// The fake agent answers the cancelled prompt only once its permission
	// request is answered. It answered within the 2s grace, so it was
	// kept: the permission answer did not wait for the 8s edit.
	h.srv.SendMessage(thread, alice, "stream 1")
	h.answer(thread, "chunk 1")
	if a := h.pool.Lookup(thread); a != nil && a.Proc.PID() != pid {
		t.Fatalf("the agent was replaced (pid %d, was %d): its permission answer came too late", a.Proc.PID(), pid)
	}
	if s := h.client.Stats(); s.OpenPermissions != 0 {
		t.Fatalf("open permissions = %d after the cancel", s.OpenPermissions)
	}
}

// A permission request whose post Discord is slow to confirm does not
// hold the agent's answer either: the turn cancelled meanwhile answers
// "cancelled" at once, and the message, once Discord confirms it, is
// closed (it never keeps buttons nobody can use).
func TestPermission_CancelWhileThePostIsOnItsWay(t *testing.T) {
	h := newHarness(t, setup{engine: adapter.Config{CancelGrace: 2 * time.Second}})
	const stall = 6 * time.Second
	thread := h.mention(alice, "hello")
	h.answer(thread, "✅")
	h.srv.InjectStall(func(r fakediscord.Request) bool {
		return r.Route == fakediscord.RouteCreateMessage && r.Major == thread && strings.Contains(string(r.Body), "Permission needed")
	}, 1, stall)
	h.srv.SendMessage(thread, alice, "permission")
	h.permissionMessage(thread) // Discord has it; the broker waits for Discord's answer
	pid := h.pool.Lookup(thread).Proc.PID()
	h.response(h.srv.SlashCommand(thread, alice.ID, "cancel", nil))
	// The thread's own messages queue behind the slow one (requests of one
	// channel go one at a time), but the agent does not: it got its
	// answer within the 2s cancel grace, or it would have been replaced.
	h.answer(thread, "⏹️ cancelled by Alice")
	if a := h.pool.Lookup(thread); a == nil || a.Proc.PID() != pid {
		t.Fatalf("the agent was replaced: its permission answer waited for Discord")
	}
	h.srv.Await("the request closed", func() bool {
		for _, m := range h.srv.Messages(thread) {
			if strings.Contains(m.Content, "Closed without an answer (cancelled by Alice)") && len(m.Buttons()) == 0 {
				return true
			}
		}
		return false
	})
	if s := h.client.Stats(); s.OpenPermissions != 0 {
		t.Fatalf("open permissions = %d after the cancel", s.OpenPermissions)
	}
}
