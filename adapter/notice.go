package adapter

import (
	"time"

	"acpbroker/acp"
	"acpbroker/netproxy"
	"acpbroker/policy"
)

// Notice is a remark the engine makes to a thread, told as its facts: one
// of the types in this file, which Kind names. The engine writes no words
// for people here; chat.NoticeText says a notice in the broker's Markdown,
// the same for every platform.
type Notice interface {
	// Kind names the notice in one word ("images_left_out"), for the
	// API's events and for logs.
	Kind() string
	notice()
}

// SessionLost: the agent could not resume Session, the thread's earlier
// session, so the turn runs in a new one that remembers nothing of it.
type SessionLost struct{ Session string }

// HostLost: the thread's agent ran on agent host From, which is lost to
// it (it stopped answering, or no longer runs its profile); its new agent
// runs on To, in a workspace of its own there, without the files of the
// one left on From.
type HostLost struct{ From, To string }

// ImagesLeftOut: the agent does not accept images, and the prompt's Count
// images were not sent to it.
type ImagesLeftOut struct{ Count int }

// NetworkRefused: the network proxy refused one of the agent's
// connections. It is said once a turn; the proxy counts every one.
type NetworkRefused struct{ netproxy.Refusal }

// Decider is what answered a permission request instead of a person:
// rule number N (from 1) of the policy, Rule; or, when N is 0, the
// permission mode Mode (allow or deny) as Setting gave it: a
// configuration key ("turn.permission_mode"), the name a prompt gave its
// own mode (Prompt.PermissionBy), or empty for a prompt's unnamed mode.
type Decider struct {
	N             int
	Rule          policy.Rule
	Setting, Mode string
}

// PermissionDecided: By answered the permission request for Tool (the
// tool call's title, else its id) with Action, allow or deny, without
// asking anyone.
type PermissionDecided struct {
	Tool   string
	Action policy.Action
	By     Decider
}

// PermissionNoOption: By would have answered the request for Tool with
// Action, but the agent offered no option of the kind Missing
// (allow_once, reject_once), so it was answered cancelled.
type PermissionNoOption struct {
	Tool    string
	Action  policy.Action
	By      Decider
	Missing string
}

// PermissionTimedOut: nobody answered the permission request for Tool
// within After (turn.permission_timeout); it was answered cancelled.
type PermissionTimedOut struct {
	Tool  string
	After time.Duration
}

// QuestionUnaskable: the agent's question (its message, else its form's
// title, as the agent wrote it) has Fields no chat can ask for; it was
// declined.
type QuestionUnaskable struct {
	Question string
	Fields   []acp.ElicitationField
}

// QuestionInvalid: the agent's question cannot be asked as sent (Err says
// why, e.g. a form that is not an object); it was declined.
type QuestionInvalid struct {
	Question string
	Err      error
}

// QuestionUnanswerable: the thread's platform cannot put questions to
// people; the agent's question was declined.
type QuestionUnanswerable struct{ Question string }

// QuestionTimedOut: nobody answered the agent's question within After
// (turn.permission_timeout); it was answered cancel.
type QuestionTimedOut struct {
	Question string
	After    time.Duration
}

// ChoiceNotApplied: the value the thread chose for the option named
// Option was not set on the thread's new agent, because of Err. Value is
// the value as the agent would have been given it; empty when the choice
// fits none of the values the agent offers now.
type ChoiceNotApplied struct {
	Option, Value string
	Err           error
}

// ModeNotApplied: the mode the thread chose was not set on its new agent:
// the agent no longer offers it (Gone), or it refused (Err).
type ModeNotApplied struct {
	Mode string
	Gone bool
	Err  error
}

func (SessionLost) Kind() string          { return "session_lost" }
func (HostLost) Kind() string             { return "host_lost" }
func (ImagesLeftOut) Kind() string        { return "images_left_out" }
func (NetworkRefused) Kind() string       { return "network_refused" }
func (PermissionDecided) Kind() string    { return "permission_decided" }
func (PermissionNoOption) Kind() string   { return "permission_no_option" }
func (PermissionTimedOut) Kind() string   { return "permission_timeout" }
func (QuestionUnaskable) Kind() string    { return "question_unaskable" }
func (QuestionInvalid) Kind() string      { return "question_invalid" }
func (QuestionUnanswerable) Kind() string { return "question_unanswerable" }
func (QuestionTimedOut) Kind() string     { return "question_timeout" }
func (ChoiceNotApplied) Kind() string     { return "choice_not_applied" }
func (ModeNotApplied) Kind() string       { return "mode_not_applied" }

func (SessionLost) notice()          {}
func (HostLost) notice()             {}
func (ImagesLeftOut) notice()        {}
func (NetworkRefused) notice()       {}
func (PermissionDecided) notice()    {}
func (PermissionNoOption) notice()   {}
func (PermissionTimedOut) notice()   {}
func (QuestionUnaskable) notice()    {}
func (QuestionInvalid) notice()      {}
func (QuestionUnanswerable) notice() {}
func (QuestionTimedOut) notice()     {}
func (ChoiceNotApplied) notice()     {}
func (ModeNotApplied) notice()       {}
