package adapter

import (
	"strings"
	"time"

	"acpbroker/acp"
	"acpbroker/policy"
)

// Decision is one answered permission request, for the audit trail.
type Decision struct {
	Time    time.Time
	Thread  string
	Profile string // the prompt's agent profile, "" if none
	Turn    uint64 // the turn's id in the Journal, 0 without one
	// ToolCallID, Tool and ToolKind are the tool call as the agent
	// described it (Tool is its title).
	ToolCallID, Tool, ToolKind string
	// OptionID and OptionKind are the option chosen; both empty when the
	// agent was answered "cancelled".
	OptionID, OptionKind string
	// Via says who decided, in one word: one of the Via* values.
	Via string
	// By identifies the decider: the chat user's id (Via user), "rule N"
	// (Via rule), "turn.permission_mode" (Via mode), else the Via word.
	// ByName is the user's name, or the rule in words.
	By, ByName string
}

// Who decided a permission request.
const (
	ViaUser       = "user"       // a person chose (By is their chat id)
	ViaRule       = "rule"       // a configured rule (policy) decided
	ViaMode       = "mode"       // turn.permission_mode allow or deny decided
	ViaTimeout    = "timeout"    // nobody answered within the permission timeout
	ViaCancelled  = "cancelled"  // the turn ended first
	ViaUnanswered = "unanswered" // the chat layer could not put the question
)

// Outcome is the decision in one word: allowed, rejected or cancelled.
func (d Decision) Outcome() string {
	switch {
	case d.OptionID == "":
		return "cancelled"
	case strings.HasPrefix(d.OptionKind, "allow"):
		return "allowed"
	case strings.HasPrefix(d.OptionKind, "reject"):
		return "rejected"
	default:
		return "other" // an option kind the protocol does not name
	}
}

// DecisionClass is what the engine counts decisions by.
type DecisionClass struct {
	Outcome string // Decision.Outcome
	Via     string
}

// Auditor records permission decisions (the state store is one, through a
// conversion). Decided is called once per answered request, from the
// request's goroutine, and must not block for long.
type Auditor interface {
	Decided(Decision)
}

// onceOption picks the option an automatic decision answers with: the
// agent's allow_once for allow, reject_once for deny; failing that, an
// option of the same verb that holds only this once (a kind such as
// "reject_once_with_reason"); never an *_always one, which would make the
// agent remember a choice nobody made. ok is false when there is none.
func onceOption(req *acp.PermissionRequest, a policy.Action) (acp.PermissionOption, bool) {
	exact, verb := acp.OptionAllowOnce, "allow"
	if a == policy.Deny {
		exact, verb = acp.OptionRejectOnce, "reject"
	}
	for _, o := range req.Options {
		if o.Kind == exact {
			return o, true
		}
	}
	for _, o := range req.Options {
		if strings.HasPrefix(o.Kind, verb) && strings.Contains(o.Kind, "once") {
			return o, true
		}
	}
	return acp.PermissionOption{}, false
}

// optionKind is the kind of the offered option id, and whether it was
// offered.
func optionKind(req *acp.PermissionRequest, id string) (string, bool) {
	for _, o := range req.Options {
		if o.OptionID == id {
			return o.Kind, true
		}
	}
	return "", false
}
