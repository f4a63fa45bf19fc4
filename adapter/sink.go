package adapter

import (
	"context"
	"errors"
	"strings"
	"time"

	"acpbroker/acp"
	"acpbroker/policy"
)

// Phase is where a prompt is in its life.
type Phase int

const (
	// PhaseQueued: waiting behind another turn in the same thread.
	PhaseQueued Phase = iota
	// PhaseWaitingForSlot: every agent slot is busy; waiting for one.
	PhaseWaitingForSlot
	// PhaseWorking: the prompt was sent to the agent.
	PhaseWorking
	// PhaseCancelling: the turn is being abandoned; waiting for the agent.
	PhaseCancelling
	// PhaseNext: the prompt goes next, and the thread's running turn is
	// being interrupted for it (see Engine.SendNow).
	PhaseNext
	// PhaseWaitingForHost: no agent host has room for the thread's
	// agent; waiting for one.
	PhaseWaitingForHost
)

// Status is a change in a prompt's phase.
type Status struct {
	Phase Phase
	// Position is the place in the thread's queue (1 = next), for
	// PhaseQueued and PhaseNext.
	Position int
	// Interrupting is for PhaseNext: the thread's running turn is being
	// interrupted for this prompt (false: none was running).
	Interrupting bool
	// Cause is why the turn is being abandoned, for PhaseCancelling.
	Cause error
	// Dir is the agent's working directory, for PhaseWorking: what the
	// agent shows from there may be attached.
	Dir string
}

// Sink receives one prompt's progress. Status, Update and Done are called
// in order from the turn's goroutine and must not block for long. Ask and
// Notice are called from permission goroutines, possibly concurrently with
// the others. Done is called exactly once, last, for every accepted prompt.
type Sink interface {
	Status(Status)
	Update(acp.Update)
	// Ask puts a permission request to a human and returns the choice and
	// who made it. It must return promptly once ctx is done; its cause
	// says why (permission timeout, turn ended).
	Ask(ctx context.Context, req *acp.PermissionRequest) Answer
	// Notice is a remark for the thread, e.g. an automatic permission
	// answer, as facts: chat.NoticeText says it in words.
	Notice(Notice)
	Done(Outcome)
}

// Answer is a person's answer to a permission request.
type Answer struct {
	// Outcome is the option chosen, or "cancelled" (the zero value).
	Outcome acp.PermissionOutcome
	// By identifies who answered (a chat user id), ByName names them for
	// people (a user name); both empty when nobody did, e.g. the question
	// could not be posted.
	By, ByName string
}

// Prompt is one user message for a thread's agent.
type Prompt struct {
	// Ref identifies the message to the chat layer; it is stored while the
	// turn runs so a restart can report the interrupted turn.
	Ref string
	// Title names the message for people, e.g. its first words.
	Title string
	// Author identifies who wrote it (a chat user id); AuthorName names
	// them for people, in the cause of a turn it interrupts.
	Author, AuthorName string
	// Interrupt: the prompt interrupts the thread's running turn and is
	// sent next, in the same session (a steer). MayInterrupt: its author
	// may act on the thread, so that where the thread's busy mode is
	// BusyInterrupt it does the same; otherwise it waits its turn.
	Interrupt, MayInterrupt bool
	// Agent names the agent profile the thread is to use when this
	// prompt is its first ("": the default). A thread keeps the profile
	// it was given first; Agent is ignored after that.
	Agent  string
	Blocks []acp.ContentBlock
	// Images are sent as image blocks if the agent accepts images;
	// otherwise they are left out and the thread is told.
	Images []acp.ContentBlock
	// Rules, if not nil, decide this prompt's permission requests instead
	// of those of the agent's profile and the engine's Config.Rules (an
	// empty, non-nil list: none).
	Rules []policy.Rule
	// PermissionMode, if set (ask, allow or deny), answers this prompt's
	// requests no rule matches instead of the engine's PermissionMode;
	// PermissionBy names it for people ("schedule nightly's
	// permission_mode").
	PermissionMode, PermissionBy string
	Sink                         Sink
}

// ToolCall is the last known state of one tool call in a turn.
type ToolCall struct {
	ID, Title, Kind, Status string
}

// Outcome is how a turn ended: the agent's answer, or a failure with its
// cause. Partial output is kept either way.
type Outcome struct {
	// StopReason is the agent's, when it answered.
	StopReason string
	// Err is the failure cause, nil when the agent answered.
	Err error
	// Text is the answer text (message chunks concatenated); past 2 MiB,
	// its first and last MiB with a line between them saying how much is
	// left out. TextBytes is the length of the whole.
	Text      string
	TextBytes int64
	// ToolCalls are the turn's first 256 tool calls, MoreToolCalls the
	// number of those after; Plan is the last plan's first 64 entries,
	// MorePlan the number of the rest. Titles and entries are cut to 512
	// bytes.
	ToolCalls     []ToolCall
	MoreToolCalls int
	Plan          []acp.PlanEntry
	MorePlan      int
	// Usage is the agent's last usage_update of the turn, TurnUsage the
	// turn's token totals from its answer; nil when it did not say.
	Usage     *acp.Usage
	TurnUsage *acp.TurnUsage
	Elapsed   time.Duration
	// Shown is for the Sink to call once the thread shows the outcome,
	// with the platform's reference to the message that shows it (empty
	// if none does); safe to call more than once, never nil. Until then a
	// broker that dies reports the turn at its next start, and the
	// messages named so help the platform tell later turns' outcomes
	// apart.
	Shown func(where string)
}

// Summary is the outcome in words, never empty.
func (o Outcome) Summary() string {
	switch {
	case errors.Is(o.Err, ErrCancelled):
		return o.Err.Error()
	case errors.Is(o.Err, ErrShutdown):
		return "stopped: " + o.Err.Error()
	case o.Err != nil:
		return "failed: " + o.Err.Error()
	}
	switch o.StopReason {
	case acp.StopEndTurn:
		if strings.TrimSpace(o.Text) == "" {
			return "the agent finished without a written reply"
		}
		return "done"
	case acp.StopCancelled:
		return "cancelled"
	case acp.StopMaxTokens:
		return "stopped: the agent reached its token limit"
	case acp.StopMaxTurnRequests:
		return "stopped: the agent reached its request limit for one turn"
	case acp.StopRefusal:
		return "the agent refused to continue"
	default:
		return "stopped: " + o.StopReason
	}
}

// Class names the kind of outcome in one word, for metrics and logs:
// done, stopped (another stop reason), or the failure's cause.
func (o Outcome) Class() string {
	for _, c := range []struct {
		err  error
		name string
	}{
		{ErrInterrupted, "interrupted"}, {ErrCancelled, "cancelled"}, {ErrTimeout, "timeout"}, {ErrToolStuck, "tool_stuck"},
		{ErrAgentExited, "agent_exited"}, {ErrAgentUnhealthy, "agent_unhealthy"}, {ErrShutdown, "shutdown"},
		{ErrNoSlot, "no_slot"}, {ErrAgentStart, "agent_start"}, {ErrOverflow, "overflow"}, {ErrAgentError, "agent_error"},
		{ErrProfileGone, "profile_gone"}, {ErrNoProfile, "no_profile"},
	} {
		if errors.Is(o.Err, c.err) {
			return c.name
		}
	}
	switch {
	case o.Err != nil:
		return "error"
	case o.StopReason == acp.StopEndTurn:
		return "done"
	default:
		return "stopped"
	}
}
