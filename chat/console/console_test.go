package console_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"acpbroker/adapter"
	"acpbroker/chat/console"
	"acpbroker/internal/agenttest"
	"acpbroker/pool"

	"github.com/rs/zerolog"
)

var fakeAgent string

func TestMain(m *testing.M) { agenttest.Main(m, &fakeAgent) }

// term is a console on pipes, with a real engine and fake agent.
type term struct {
	t      *testing.T
	in     *io.PipeWriter
	out    *agenttest.Buffer
	engine *adapter.Engine
	seen   int // output already looked at
	done   chan error
}

func newTerm(t *testing.T, args ...string) *term {
	t.Helper()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	p := pool.New(pool.Config{Command: fakeAgent, Args: args, WorkDir: t.TempDir(), MaxSessions: 2, ExitGrace: 500 * time.Millisecond, Logger: log})
	e := adapter.New(p, adapter.Config{CancelGrace: 2 * time.Second, Logger: log})
	r, w := io.Pipe()
	tm := &term{t: t, in: w, out: &agenttest.Buffer{}, engine: e}
	c := console.New(console.Config{Engine: e, In: r, Out: tm.out, User: "tester", Logger: log})
	done := make(chan error, 1)
	tm.done = done
	go func() { done <- c.Run(context.Background()) }()
	t.Cleanup(func() {
		w.Close()
		if err := <-done; err != nil {
			t.Error(err)
		}
		c.Close(time.Second)
		e.Close()
		p.Close()
	})
	return tm
}

// patience bounds a wait for the console's output: a hang fails, a busy
// machine is waited for (a 24 MiB answer took 28 s beside other tests).
const patience = 2 * time.Minute

// say types a line and waits for the output to show want after it.
func (tm *term) say(line, want string) string {
	tm.t.Helper()
	fmt.Fprintln(tm.in, line)
	deadline := time.Now().Add(patience)
	for {
		out := tm.out.String()[tm.seen:]
		if i := strings.Index(out, want); i >= 0 {
			tm.seen += i + len(want)
			return out[:i+len(want)]
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("after %q, no %q in:\n%s", line, want, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ended waits for Run to return, after what.
func (tm *term) ended(after string) {
	tm.t.Helper()
	select {
	case err := <-tm.done:
		tm.done <- err // for the cleanup
	case <-time.After(20 * time.Second):
		tm.t.Fatalf("the console still runs %s:\n%s", after, tm.out.String()[tm.seen:])
	}
}

// The console lists and sets the model, a boolean option and the mode,
// and the agent runs with them; it lists the agent's commands and runs
// them; /status shows the model and mode.
func TestConsole_OptionsAndAgentCommands(t *testing.T) {
	tm := newTerm(t, "--config-options", "--commands")
	tm.say("/model", "has not said what it offers yet")
	tm.say("settings", "model=fake-small mode=ask fast=false")
	if out := tm.say("/model", "`fake-huge` Smart: Fake Huge"); !strings.Contains(out, "Model: Fake Small") {
		t.Fatalf("/model printed %q", out)
	}
	tm.say("/model fake-large", "tester set Model to Fake Large.")
	tm.say("/model nope", "Model was not changed: the agent offers no such value \"nope\"")
	tm.say("/config fast on", "tester set Fast answers to on.")
	tm.say("/mode code", "tester set Mode to Code.")
	if out := tm.say("/config", "• `fast` Fast answers: on"); strings.Contains(out, "palette") {
		t.Fatalf("/config printed %q", out)
	}
	tm.say("settings", "model=fake-large mode=code fast=true")
	tm.say("/status", "Model: Fake Large\nMode: Code")
	tm.say("/agent", "Review the current changes")
	tm.say("/agent review the diff", `ran /review with "the diff"`)
	tm.say("/init now", `ran /init with "now"`)
}

// Legacy modes are listed and set with /mode.
func TestConsole_LegacyMode(t *testing.T) {
	tm := newTerm(t, "--modes")
	tm.say("settings", "model=fake-small mode=ask fast=false")
	tm.say("/mode", "`plan` Plan: the plan mode")
	tm.say("/mode plan", "tester set Mode to Plan.")
	tm.say("/config", "This thread's agent offers no options.")
	tm.say("settings", "model=fake-small mode=plan fast=false")
}

// A change of model or mode the agent makes itself is printed; the
// user's own change mid-turn is answered as such, not as the agent's.
func TestConsole_AgentsOwnSwitchIsPrinted(t *testing.T) {
	tm := newTerm(t, "--config-options")
	tm.say("switch mode plan", "The agent switched mode to Plan")
	tm.say("", "switched mode to plan")
	tm.say("switch model fake-huge", "The agent switched model to Fake Huge")
	tm.say("", "switched model to fake-huge")
	tm.say("slow 500ms 3", "chunk 1")
	out := tm.say("/model fake-large", "tester set Model to Fake Large.")
	out += tm.say("", "chunk 3")
	if strings.Contains(out, "switched") {
		t.Fatalf("the user's change mid-turn was printed as the agent's: %q", out)
	}
	tm.say("settings", "model=fake-large mode=plan fast=false")

	tm = newTerm(t, "--modes")
	tm.say("switch mode code", "The agent switched mode to Code")
}

// A command the agent runs in a terminal shows its output as it comes,
// then how it ended.
func TestConsole_TerminalOutputIsPrinted(t *testing.T) {
	tm := newTerm(t)
	out := tm.say(`terminal /bin/sh -c echo${IFS}first;sleep${IFS}1;echo${IFS}second;exit${IFS}3`, "second\n```\n")
	if !strings.Contains(out, "```\nfirst\n```\n") {
		t.Fatalf("the first line was not printed as it came: %q", out)
	}
	tm.say("", `exit: {"exitCode":3}`)
}

// However much an agent writes in a turn, the console prints the
// answer's start as it comes and its end when the turn ends, within
// bounds; tool calls past the first 256 are not printed; the next
// prompt is answered.
func TestConsole_AFloodIsPrintedWithinBounds(t *testing.T) {
	tm := newTerm(t)
	start := len(tm.out.String())
	out := tm.say("flood-answer 24 64", "[end of answer.md]")
	if len(out) > 512<<10 {
		t.Fatalf("printed %d bytes for a 24 MiB answer", len(out))
	}
	for _, want := range []string{"BEGIN\n", "the answer is 24.0 MiB: its start and its end are attached as answer.md", "\nEND\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the output does not have %q: %d bytes, …%q", want, len(out), out[max(0, len(out)-300):])
		}
	}
	out = tm.say("flood-tools 400", "made 400 tool calls")
	if !strings.Contains(out, "and 144 more tool calls, not shown") || len(out) > 2<<20 {
		t.Errorf("400 tool calls printed in %d bytes, …%q", len(out), out[max(0, len(out)-300):])
	}
	tm.say("hello", "You said: hello")
	if total := len(tm.out.String()) - start; total > 4<<20 {
		t.Errorf("printed %d bytes in all", total)
	}
}

// An open permission question or form does not swallow commands:
// /status answers, /cancel ends the turn and its question, /quit leaves;
// a typed number still answers the question: it clicks that button.
func TestConsole_CommandsWorkWhileAQuestionIsOpen(t *testing.T) {
	tm := newTerm(t)
	// A permission request, and a form of the agent's own question
	// being filled in.
	for _, q := range []struct{ ask, open string }{{"permission", ""}, {"elicit-form", "1"}} {
		tm.say(q.ask, "Type a number to choose.")
		if q.open != "" {
			tm.say(q.open, "Colour [1) red, 2) green, 3) blue]: ")
		}
		tm.say("/status", "State: busy")
		tm.say("/cancel", "tester cancelled the current turn.")
		tm.say("", "cancelled by tester after")
	}
	tm.say("permission", "Type a number to choose.")
	tm.say("3", "tester chose Reject")
	tm.say("", "permission denied: reject")

	// /quit leaves, the question open or not.
	tm.say("permission", "Type a number to choose.")
	fmt.Fprintln(tm.in, "/quit")
	tm.ended("after /quit with a question open")
}

// A form is filled in a field a line: a bad value is asked again, Enter
// keeps the agent's default, and the agent gets the answers; /decline
// declines the next one.
func TestConsole_AFormIsFilledInFieldByField(t *testing.T) {
	tm := newTerm(t)
	tm.say("elicit-form", "Type a number to choose.")
	tm.say("1", "Colour [1) red, 2) green, 3) blue]: ")
	tm.say("4", "a number from 1 to 3; Colour")
	tm.say("2", "Count")
	tm.say("eleven", `"eleven" is not a whole number; Count`)
	tm.say("4", "Name")
	tm.say("", "Name is required; Name")
	tm.say("v2", "Ship it (yes or no)")
	out := tm.say("", "done in ")
	for _, want := range []string{`"colour":"green"`, `"count":4`, `"name":"v2"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the agent was not answered %s: %q", want, out)
		}
	}
	tm.say("elicit-form", "Type a number to choose.")
	tm.say("1", "Colour")
	tm.say("/decline", "answer: decline")
}

// A line starting with "/" that names no command is answered, never sent
// to the agent; a command reads the same in any case and with spaces
// around it; /help lists the commands of the one table.
func TestConsole_UnknownCommandsAreAnsweredAndHelpListsTheCommands(t *testing.T) {
	tm := newTerm(t)
	tm.say("/frobnicate now", "[unknown command /frobnicate, see /help")
	tm.say("/Cancel ", "Nothing is running in this thread.")
	tm.say(" /status", "State: idle")
	out := tm.say("/help", "/quit — ")
	for _, want := range []string{"/steer [message] — Stop the agent's current turn", "/queue [remove] — ", "/new [agent] [prompt] — ", "/help — "} {
		if !strings.Contains(out, want) {
			t.Errorf("/help does not list %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "/schedules") {
		t.Errorf("/help lists /schedules, which the console does not serve:\n%s", out)
	}
	out = tm.say("hello", "You said: hello")
	if strings.Contains(tm.out.String(), "You said: /frobnicate") {
		t.Fatalf("/frobnicate reached the agent:\n%s", out)
	}
	tm.say("/status now", "[usage: /status]")
}

// eioReader reads as a terminal that hung up.
type eioReader struct{}

func (eioReader) Read([]byte) (int, error) { return 0, syscall.EIO }

// A terminal that hung up ends the console's input, as an end of file
// does: Run returns without an error for the broker to fail with.
func TestConsole_AHungUpTerminalEndsTheInput(t *testing.T) {
	c := console.New(console.Config{In: eioReader{}, Out: io.Discard})
	if err := c.Run(context.Background()); err != nil {
		t.Fatalf("Run on a hung-up terminal = %v, want nil", err)
	}
}

// /status reads well without an agent, none yet or none since it died:
// no "pid 0" or empty fields. An answer to a command is printed whole,
// its last line ended.
func TestConsole_StatusWithoutAnAgentReadsWell(t *testing.T) {
	tm := newTerm(t)
	none := "State: idle, 0 message(s) queued\nAgent: not running (it starts with the next message)\n"
	if out := tm.say("/status", none); strings.Contains(out, "pid 0") || strings.Contains(out, "``") {
		t.Fatalf("/status without an agent: %q", out)
	}
	tm.say("die", "failed: agent exited")
	if out := tm.say("/status", none); strings.Contains(out, "pid 0") || strings.Contains(out, "``") {
		t.Fatalf("/status after the agent died: %q", out)
	}
}

// The end of the input waits for the turns already sent: one that
// streams ends as it would, and one whose question nobody can answer
// any more is cancelled.
func TestConsole_TheEndOfTheInputWaitsForTheTurns(t *testing.T) {
	tm := newTerm(t)
	fmt.Fprint(tm.in, "slow 300ms 3\nstream 2\n")
	tm.say("", "This message waits")
	tm.in.Close()
	tm.ended("after the end of its input")
	if out := tm.out.String(); !strings.Contains(out, "chunk 3") || !strings.Contains(out, "chunk 1\nchunk 2") || strings.Contains(out, "cancelled") {
		t.Fatalf("the turns sent before the end of the input did not end as they would: %q", out)
	}

	tm = newTerm(t)
	tm.say("permission", "Type a number to choose.")
	tm.in.Close()
	tm.ended("after the end of its input, a question open")
	if out := tm.out.String(); !strings.Contains(out, "cancelled by the end of the console's input") {
		t.Fatalf("the turn whose question was open: %q", out)
	}
}
