package discord_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"acpbroker/chat"
	"acpbroker/internal/agenttest"
	"acpbroker/internal/fakediscord"
	"acpbroker/pool"
)

// A storm of 429s on message calls loses nothing: every rate-limited call
// waits out its retry_after, and the whole answer arrives.
func TestResilience_429StormLosesNothing(t *testing.T) {
	h := newHarness(t, setup{})
	// In place before the thread's first post: the thread is the only
	// channel but the parent the bot writes in.
	inAThread := func(route string) fakediscord.Match {
		return func(r fakediscord.Request) bool { return r.Route == route && r.Major != h.channel }
	}
	h.srv.Inject429(inAThread(fakediscord.RouteCreateMessage), 3, 300*time.Millisecond)
	h.srv.Inject429(inAThread(fakediscord.RouteEditMessage), 8, 300*time.Millisecond)
	thread := h.srv.SendMessage(h.channel, alice, h.srv.Bot().Mention()+" stream 12 100ms")
	msgs := h.answer(thread, "✅ done")
	var want strings.Builder
	for i := 1; i <= 12; i++ {
		fmt.Fprintf(&want, "chunk %d\n", i)
	}
	if !strings.HasPrefix(joined(msgs), want.String()) {
		t.Fatalf("answer after the storm = %q", joined(msgs))
	}
	if n := len(h.srv.RateLimited()); n < 11 {
		t.Fatalf("only %d calls were rate limited; the storm did not happen", n)
	}
	if s := h.client.Stats(); s.RateLimited < 11 {
		t.Fatalf("429s counted = %d", s.RateLimited)
	}
}

// A dropped gateway connection is resumed, and a message sent meanwhile is
// still answered.
func TestResilience_GatewayDropIsResumed(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "hello")
	h.answer(thread, "✅")
	h.srv.DropGateway()
	h.srv.SendMessage(thread, alice, "are you still there")
	h.srv.Await("answer after the drop", func() bool {
		return strings.Contains(joined(h.botMessages(thread)), "You said: are you still there")
	})
	if st := h.srv.Stats(); st.Resumes < 1 {
		t.Fatalf("gateway stats = %+v, want a resume", st)
	}
	if s := h.client.Stats(); s.GatewayReconnects != 1 {
		t.Fatalf("reconnects counted = %d", s.GatewayReconnects)
	}
	if err := h.client.Healthy(); err != nil {
		t.Fatalf("unhealthy after the resume: %v", err)
	}
}

// Text attachments are inlined into the prompt and images sent as image
// blocks; an attachment over a limit, or of another kind, refuses the
// whole message with the reason, and nothing reaches the agent.
func TestResilience_Attachments(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "look at these",
		fakediscord.WithAttachment("notes.md", "text/markdown", []byte("remember the milk")),
		fakediscord.WithAttachment("shot.png", "image/png", []byte("\x89PNG fake image")))
	msgs := h.answer(thread, "✅")
	got := joined(msgs)
	if !strings.Contains(got, "Attached file notes.md") || !strings.Contains(got, "remember the milk") || !strings.Contains(got, "(and 1 image(s))") {
		t.Fatalf("answer = %q", got)
	}

	huge := h.srv.SendMessage(h.channel, alice, h.srv.Bot().Mention()+" read this",
		fakediscord.WithAttachment("dump.txt", "text/plain", bytes.Repeat([]byte("x"), 300<<10)))
	binary := h.srv.SendMessage(h.channel, alice, h.srv.Bot().Mention()+" run this",
		fakediscord.WithAttachment("tool.exe", "application/octet-stream", []byte("MZ")))
	for id, reason := range map[string]string{
		huge:   `"dump.txt" is 300 KiB; the limit for text files is 256 KiB`,
		binary: `I can't pass "tool.exe" (application/octet-stream) to the agent`,
	} {
		h.srv.Await("refusal", func() bool {
			for _, m := range h.srv.Messages(h.channel) {
				if m.ReferenceID == id && strings.Contains(m.Content, reason) {
					return true
				}
			}
			return false
		})
		if ch, ok := h.srv.Channel(id); ok && ch.IsThread() {
			t.Fatalf("a thread was opened for a refused message")
		}
	}
}

// An agent that does not accept images (promptCapabilities.image false)
// never gets one: the thread is told they were left out, and the text
// goes through.
func TestResilience_ImagesLeftOutForAnAgentWithoutImages(t *testing.T) {
	h := newHarness(t, setup{pool: pool.Config{Args: []string{"--no-images"}}})
	thread := h.mention(alice, "what is in this picture",
		fakediscord.WithAttachment("shot.png", "image/png", []byte("\x89PNG fake image")))
	got := joined(h.answer(thread, "✅"))
	if !strings.Contains(got, "This agent does not accept images; 1 image(s) were left out.") {
		t.Fatalf("the thread was not told the image was left out: %q", got)
	}
	if !strings.Contains(got, "You said: what is in this picture") || strings.Contains(got, "image(s))") {
		t.Fatalf("the agent got %q", got)
	}
}

// After a restart, each thread is told which of its messages the broker
// did not finish, and that message shows ❌.
func TestResilience_InterruptedTurnsAreReported(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "hello")
	h.answer(thread, "✅")
	reported := make(chan uint64, 1)
	h.client.Report([]chat.Interruption{{ID: 7, Thread: thread, Ref: guildID + "/" + h.channel + "/" + thread, Title: "build the thing", Queued: time.Now()}},
		func(id uint64) { reported <- id })
	select {
	case id := <-reported:
		if id != 7 {
			t.Fatalf("reported %d", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not reported")
	}
	if !strings.Contains(joined(h.botMessages(thread)), "The broker restarted while working on your message “build the thing”") {
		t.Fatalf("thread = %q", joined(h.botMessages(thread)))
	}
	h.srv.Await("❌ on the message", func() bool { return h.srv.HasReaction(h.channel, thread, h.srv.Bot().ID, "❌") })
}

// An agent that crashes mid-turn: the user is told within a second or two,
// on one line, with the exit status and the end of its stderr, and keeps
// the answer so far; the next message gets a fresh agent.
func TestResilience_AgentCrashIsToldInWords(t *testing.T) {
	h := newHarness(t, setup{})
	start := time.Now()
	thread := h.mention(alice, "crash 3")
	msgs := h.answer(thread, "❌ failed: agent exited with status 3")
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("told after %s", took)
	}
	last := msgs[len(msgs)-1].Content
	footer := last[strings.LastIndex(last, "\n-# ")+1:]
	if !strings.Contains(footer, "simulated crash") || !strings.HasPrefix(last, "about to crash") {
		t.Fatalf("answer = %q", last)
	}
	h.srv.SendMessage(thread, alice, "hello again")
	h.srv.Await("next answer", func() bool { return strings.Contains(joined(h.botMessages(thread)), "You said: hello again") })
}

// Connecting while Discord rate-limits or fails the gateway lookup (as it
// may when a restarted broker comes back) is tried again until it works:
// here two 429s and a 502, then the bot serves as usual.
func TestResilience_ConnectIsTriedAgainPastPassingFailures(t *testing.T) {
	h := newHarness(t, setup{before: func(h *harness) {
		h.srv.Inject429(fakediscord.OnRoute(fakediscord.RouteGateway), 2, 200*time.Millisecond)
		h.srv.InjectError(fakediscord.OnRoute(fakediscord.RouteGateway), 1, 502)
	}})
	if n := len(h.srv.RequestsTo(fakediscord.RouteGateway)); n != 4 {
		t.Errorf("the gateway was looked up %d times, want 3 failures and a success", n)
	}
	thread := h.mention(alice, "hello")
	h.answer(thread, "✅")
}

// A rate-limited answer to an interaction is tried again while it can
// still come within Discord's 3 seconds: here three 429s of 300ms, and
// /status is answered in time.
func TestResilience_AnInteractionIsAnsweredPastRateLimitsWithinItsWindow(t *testing.T) {
	h := newHarness(t, setup{})
	thread := h.mention(alice, "hello")
	h.answer(thread, "✅")
	h.srv.Inject429(fakediscord.OnRoute(fakediscord.RouteInteractionCallback), 3, 300*time.Millisecond)
	r := h.response(h.srv.SlashCommand(thread, alice.ID, "status", nil))
	if !strings.Contains(r.Content, "**State**: idle") {
		t.Fatalf("/status answered %q", r.Content)
	}
	if n := len(h.srv.RequestsTo(fakediscord.RouteInteractionCallback)); n != 4 {
		t.Errorf("%d answers were tried, want 3 refused and 1 taken", n)
	}
}

// A 429 whose retry_after ends past the interaction's window is not
// waited out: an answer then would come too late for Discord, so the
// bot gives up at once and says so in its log, and never answers late.
func TestResilience_AnInteractionIsNeverAnsweredPastItsWindow(t *testing.T) {
	var logs agenttest.Buffer
	h := newHarness(t, setup{discordLog: &logs})
	thread := h.mention(alice, "hello")
	h.answer(thread, "✅")
	h.srv.Inject429(fakediscord.OnRoute(fakediscord.RouteInteractionCallback), 1, 4*time.Second)
	start := time.Now()
	id := h.srv.SlashCommand(thread, alice.ID, "status", nil)
	// The log line is written once the answer is given up: no try of it
	// can come after.
	h.until("the answer given up in the log", func() bool { return strings.Contains(logs.String(), "interaction not answered") })
	if took := time.Since(start); took >= 3*time.Second {
		t.Errorf("the answer was given up after %s, not at once", took.Round(time.Millisecond))
	}
	if n := len(h.srv.RequestsTo(fakediscord.RouteInteractionCallback)); n != 1 {
		t.Errorf("%d answers were tried; want the one refused, and none after", n)
	}
	if rs := h.srv.InteractionResponses(id); len(rs) != 0 {
		t.Errorf("the interaction was answered (%+v), want none after its window", rs)
	}
}
