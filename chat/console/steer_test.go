package console_test

import (
	"fmt"
	"strings"
	"testing"
)

// On the console, /steer interrupts the running turn and its text is the
// next prompt of the same session; /queue lists what waits and removes
// one; a waiting message's Send now is a number typed.
func TestConsole_SteerAndQueue(t *testing.T) {
	tm := newTerm(t)
	tm.say("hang", "working…")
	tm.say("stream 1", "This message waits for the agent's current turn.")
	tm.say("stream 2", "This message waits for the agent's current turn.")
	if out := tm.say("/queue", "\n2. tester “stream 2”"); !strings.Contains(out, "1. tester “stream 1”") {
		t.Fatalf("/queue printed %q", out)
	}
	tm.say("/queue 1", "tester removed tester's waiting message “stream 1”.")
	tm.say("/steer session", "tester steered the agent:")
	tm.say("", "interrupted by tester")
	if out := tm.say("", "done in "); !strings.Contains(out, "(new); 1 earlier prompts; last: hang") {
		t.Fatalf("the steer's answer: %q", out)
	}
	if out := tm.say("", "done in "); !strings.Contains(out, "chunk 1\nchunk 2") {
		t.Fatalf("the message after it: %q", out)
	}
	tm.say("hang", "working…")
	tm.say("stream 1", "  1) Send now\n")
	tm.say("1", "interrupted by tester")
	tm.say("", "chunk 1")
	tm.say("/queue", "Nothing is waiting in this thread.")
}

// /sessions, /resume and /fork on the console; after /fork, the next
// message goes to the new conversation.
func TestConsole_SessionsResumeFork(t *testing.T) {
	tm := newTerm(t, "-list-sessions", "-resume-session", "-fork-session")
	tm.say("stream 1", "done in ")
	tm.say("/reset", "tester reset the session")
	tm.say("stream 2", "done in ")
	out := tm.say("/sessions", "Continue one here with `/resume <session>`.")
	if strings.Count(out, "• `sess-") != 2 || !strings.Contains(out, "this thread's now") {
		t.Fatalf("/sessions printed %q", out)
	}
	first := ""
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, "• `"); ok && !strings.Contains(l, "this thread's now") {
			first, _, _ = strings.Cut(rest, "`")
		}
	}
	tm.say("/resume "+first, "the agent continues that conversation from here.")
	if out := tm.say("session", "done in "); !strings.Contains(out, "session "+first+" (resumed); 1 earlier prompts; last: stream 1") {
		t.Fatalf("after /resume: %q", out)
	}
	tm.say("/fork", "forked this conversation")
	if out := tm.say("session", "done in "); !strings.Contains(out, "(forked from "+first+"); 2 earlier prompts; last: session") {
		t.Fatalf("after /fork: %q", out)
	}
}

// A line typed right after /new goes to the conversation /new opens.
func TestConsole_TheLineAfterNewGoesToTheNewConversation(t *testing.T) {
	tm := newTerm(t)
	tm.say("stream 1", "done in ")
	for range 20 {
		fmt.Fprint(tm.in, "/new\nsession\n") // one write: the lines come at once
		if out := tm.say("", "done in "); !strings.Contains(out, "(new); 0 earlier prompts") {
			t.Fatalf("the line after /new: %q", out)
		}
	}
}

// The line after a command is read once the command is answered, as at
// a shell: a message after /reset goes to the fresh session, and is
// never the turn the reset cancels.
func TestConsole_TheLineAfterACommandWaitsForItsAnswer(t *testing.T) {
	tm := newTerm(t)
	tm.say("stream 1", "done in ")
	for range 20 {
		fmt.Fprint(tm.in, "/reset\nsession\n") // one write: the lines come at once
		if out := tm.say("", "done in "); !strings.Contains(out, "(new); 0 earlier prompts") || strings.Contains(out, "cancelled") {
			t.Fatalf("the line after /reset: %q", out)
		}
	}
}
