package console_test

import (
	"strings"
	"testing"
)

// On the console, /steer interrupts the running turn and its text is the
// next prompt of the same session; /queue lists what waits, sends one
// now or removes one.
func TestConsole_SteerAndQueue(t *testing.T) {
	tm := newTerm(t)
	tm.say("hang", "working…")
	tm.say("stream 1", "[queued behind 1 other message(s)]")
	tm.say("stream 2", "[queued behind 2 other message(s)]")
	if out := tm.say("/queue", "[/queue send N"); !strings.Contains(out, "[waiting 1: “stream 1”") || !strings.Contains(out, "[waiting 2: “stream 2”") {
		t.Fatalf("/queue printed %q", out)
	}
	tm.say("/queue remove 1", "[message removed from the queue by console user]")
	tm.say("/steer session", "[sent next: the running turn is being interrupted]")
	tm.say("", "[turn interrupted by console user: session after ")
	if out := tm.say("", "[done in "); !strings.Contains(out, "(new); 1 earlier prompts; last: hang") {
		t.Fatalf("the steer's answer: %q", out)
	}
	if out := tm.say("", "[done in "); !strings.Contains(out, "chunk 1\nchunk 2") {
		t.Fatalf("the message after it: %q", out)
	}
	tm.say("hang", "working…")
	tm.say("stream 1", "[queued behind 1 other message(s)]")
	tm.say("/queue send 1", "[turn interrupted by console user: stream 1 after ")
	tm.say("", "chunk 1")
	tm.say("/queue", "[nothing is waiting]")
}

// /sessions, /resume and /fork on the console.
func TestConsole_SessionsResumeFork(t *testing.T) {
	tm := newTerm(t, "-list-sessions", "-resume-session", "-fork-session")
	tm.say("stream 1", "[done in ")
	tm.say("/reset", "[session reset")
	tm.say("stream 2", "[done in ")
	out := tm.say("/sessions", "[/resume ID continues one here]")
	if strings.Count(out, "[  sess-") != 2 || !strings.Contains(out, "(this conversation's)") {
		t.Fatalf("/sessions printed %q", out)
	}
	first := ""
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, "[  "); ok && !strings.Contains(l, "(this conversation's)") {
			first, _, _ = strings.Cut(rest, " ")
		}
	}
	tm.say("/resume "+first, "with session/resume: the agent continues it from here]")
	if out := tm.say("session", "[done in "); !strings.Contains(out, "session "+first+" (resumed); 1 earlier prompts; last: stream 1") {
		t.Fatalf("after /resume: %q", out)
	}
	tm.say("/fork", "; the next message goes there]")
	if out := tm.say("session", "[done in "); !strings.Contains(out, "(forked from "+first+"); 2 earlier prompts; last: session") {
		t.Fatalf("after /fork: %q", out)
	}
}
