package acp

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"acpbroker/internal/clip"
)

// maxIDBytes bounds an id an agent gives a tool call, as the broker keeps
// it: a longer one is kept as its start and a digest of the whole, which
// tells it apart from any other.
const maxIDBytes = 256

// boundID is id within maxIDBytes.
func boundID(id string) string {
	if len(id) <= maxIDBytes {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return clip.Cut(id, maxIDBytes-33) + "#" + hex.EncodeToString(sum[:16])
}

// ProtocolVersion is the ACP protocol version this client speaks.
const ProtocolVersion = 1

// Method names used on the wire.
const (
	MethodInitialize        = "initialize"
	MethodAuthenticate      = "authenticate"
	MethodSessionNew        = "session/new"
	MethodSessionLoad       = "session/load"
	MethodSessionList       = "session/list"
	MethodSessionResume     = "session/resume"
	MethodSessionFork       = "session/fork"
	MethodSessionClose      = "session/close"
	MethodSessionPrompt     = "session/prompt"
	MethodSessionCancel     = "session/cancel"
	MethodSessionUpdate     = "session/update"
	MethodRequestPermission = "session/request_permission"
	MethodReadTextFile      = "fs/read_text_file"
	MethodWriteTextFile     = "fs/write_text_file"

	MethodTerminalCreate      = "terminal/create"
	MethodTerminalOutput      = "terminal/output"
	MethodTerminalWaitForExit = "terminal/wait_for_exit"
	MethodTerminalKill        = "terminal/kill"
	MethodTerminalRelease     = "terminal/release"
)

// Stop reasons of a prompt turn.
const (
	StopEndTurn         = "end_turn"
	StopMaxTokens       = "max_tokens"
	StopMaxTurnRequests = "max_turn_requests"
	StopRefusal         = "refusal"
	StopCancelled       = "cancelled"
)

// Implementation names a client or agent.
type Implementation struct {
	Name    string `json:"name"`
	Title   string `json:"title,omitempty"`
	Version string `json:"version,omitempty"`
}

// FSCapabilities says which file-system methods the client serves.
type FSCapabilities struct {
	ReadTextFile  bool `json:"readTextFile"`
	WriteTextFile bool `json:"writeTextFile"`
}

// ClientCapabilities is what the broker offers the agent.
type ClientCapabilities struct {
	FS       FSCapabilities `json:"fs"`
	Terminal bool           `json:"terminal"`
	// Session says which kinds of session configuration the client shows.
	Session     *SessionCapabilities     `json:"session,omitempty"`
	Elicitation *ElicitationCapabilities `json:"elicitation,omitempty"`
}

// InitializeParams are the params of "initialize".
type InitializeParams struct {
	ProtocolVersion    int                `json:"protocolVersion"`
	ClientCapabilities ClientCapabilities `json:"clientCapabilities"`
	ClientInfo         Implementation     `json:"clientInfo"`
}

// PromptCapabilities says which content blocks a prompt may carry.
type PromptCapabilities struct {
	Image           bool `json:"image"`
	Audio           bool `json:"audio"`
	EmbeddedContext bool `json:"embeddedContext"`
}

// AgentCapabilities is what the agent advertises. Omitted means unsupported.
type AgentCapabilities struct {
	LoadSession        bool               `json:"loadSession"`
	PromptCapabilities PromptCapabilities `json:"promptCapabilities"`
	MCPCapabilities    MCPCapabilities    `json:"mcpCapabilities"`
	// Sessions are the session methods the agent serves beyond
	// session/new and session/load.
	Sessions AgentSessionCapabilities `json:"sessionCapabilities"`
}

// AgentSessionCapabilities says which of session/list, session/resume,
// session/close and session/fork the agent serves: each is offered when
// the agent sends its object (`{}`), and not when it leaves it out or
// sends null. session/fork is still marked unstable in ACP.
type AgentSessionCapabilities struct {
	List   *struct{} `json:"list,omitempty"`
	Resume *struct{} `json:"resume,omitempty"`
	Close  *struct{} `json:"close,omitempty"`
	Fork   *struct{} `json:"fork,omitempty"`
}

// CanList, CanResume, CanClose and CanFork report what the agent offers.
func (s AgentSessionCapabilities) CanList() bool   { return s.List != nil }
func (s AgentSessionCapabilities) CanResume() bool { return s.Resume != nil }
func (s AgentSessionCapabilities) CanClose() bool  { return s.Close != nil }
func (s AgentSessionCapabilities) CanFork() bool   { return s.Fork != nil }

// AuthMethod is one way the agent accepts authentication.
type AuthMethod struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// InitializeResult is the agent's answer to "initialize".
type InitializeResult struct {
	ProtocolVersion   int               `json:"protocolVersion"`
	AgentCapabilities AgentCapabilities `json:"agentCapabilities"`
	AuthMethods       []AuthMethod      `json:"authMethods"`
	AgentInfo         *Implementation   `json:"agentInfo,omitempty"`
}

// ContentBlock is a piece of prompt or update content. Only the fields of
// its Type are set.
type ContentBlock struct {
	Type     string    `json:"type"`
	Text     string    `json:"text,omitempty"`
	Data     string    `json:"data,omitempty"`
	MimeType string    `json:"mimeType,omitempty"`
	URI      string    `json:"uri,omitempty"`
	Name     string    `json:"name,omitempty"`
	Resource *Resource `json:"resource,omitempty"`
}

// Resource is the body of an embedded "resource" block.
type Resource struct {
	URI      string `json:"uri"`
	MimeType string `json:"mimeType,omitempty"`
	Text     string `json:"text,omitempty"`
	Blob     string `json:"blob,omitempty"`
}

// TextBlock returns a text content block.
func TextBlock(s string) ContentBlock { return ContentBlock{Type: "text", Text: s} }

// ToolCallContent is one item of a tool call's content list.
type ToolCallContent struct {
	Type    string        `json:"type"`
	Content *ContentBlock `json:"content,omitempty"`
	Path    string        `json:"path,omitempty"`
	// TerminalID names the terminal whose output a "terminal" item shows.
	TerminalID string `json:"terminalId,omitempty"`
	// diff: OldText is nil for a new file.
	OldText *string `json:"oldText,omitempty"`
	NewText string  `json:"newText,omitempty"`
}

// ToolCallLocation is a file a tool call touches.
type ToolCallLocation struct {
	Path string `json:"path"`
	Line *int   `json:"line,omitempty"`
}

// PlanEntry is one item of the agent's plan.
type PlanEntry struct {
	Content  string `json:"content"`
	Priority string `json:"priority,omitempty"`
	Status   string `json:"status,omitempty"`
}

// Update is the "update" object of a session/update notification. Kind is
// the sessionUpdate discriminator; the other fields are set per kind.
// Unknown kinds are kept with only Kind and Raw set.
type Update struct {
	Kind string `json:"sessionUpdate"`

	// agent_message_chunk, agent_thought_chunk, user_message_chunk
	Content *ContentBlock `json:"-"`

	// tool_call, tool_call_update
	ToolCallID string             `json:"toolCallId,omitempty"`
	Title      *string            `json:"title,omitempty"`
	ToolKind   string             `json:"kind,omitempty"`
	Status     string             `json:"status,omitempty"`
	ToolOutput []ToolCallContent  `json:"-"`
	Locations  []ToolCallLocation `json:"locations,omitempty"`
	// RawInput is the tool call's input as the agent sent it, for a
	// page to show; it is no part of the update an API stream writes.
	RawInput json.RawMessage `json:"-"`

	// plan
	Entries []PlanEntry `json:"entries,omitempty"`

	// current_mode_update
	CurrentModeID string `json:"currentModeId,omitempty"`

	// Terminal is never sent by an agent: the broker sets it on a
	// tool_call_update it makes to show the live output of a terminal
	// the tool call holds.
	Terminal *TerminalOutput `json:"-"`
	// usage_update (session_info_update sets Title)
	Usage *Usage `json:"-"`

	// Switched is never sent by an agent: the broker sets it on a
	// config_option_update or current_mode_update that changed the model
	// or the mode while no change of ours was waiting for the agent's
	// answer, i.e. a change the agent made on its own.
	Switched []Switch `json:"-"`

	// Raw is the update as received, but for chunks and tool calls,
	// whose fields hold all that is used of them.
	Raw json.RawMessage `json:"-"`

	// queued is the length of its JSON while in a Subscription's queue.
	queued int
}

// Switch is a change of the model or the mode the agent made itself.
type Switch struct {
	What string // "model" or "mode"
	To   string // the new one, in words
}

// Update kinds the broker renders.
const (
	UpdateMessageChunk     = "agent_message_chunk"
	UpdateThoughtChunk     = "agent_thought_chunk"
	UpdateUserMessageChunk = "user_message_chunk"
	UpdateToolCall         = "tool_call"
	UpdateToolCallUpdate   = "tool_call_update"
	UpdatePlan             = "plan"
)

// UnmarshalJSON decodes an update in one pass, tolerating the polymorphic
// "content" field (a block for chunks, a list for tool calls) and unknown
// kinds.
func (u *Update) UnmarshalJSON(b []byte) error {
	type plain Update
	var p struct {
		plain
		Content  rawRef          `json:"content"` // decoded below, while b is
		RawInput json.RawMessage `json:"rawInput"`
	}
	err := json.Unmarshal(b, &p)
	if err != nil || !knownUpdates[p.Kind] {
		// An unknown kind may use known field names its own way.
		var k struct {
			Kind string `json:"sessionUpdate"`
		}
		if json.Unmarshal(b, &k) != nil || knownUpdates[k.Kind] {
			return err
		}
		*u = Update{Kind: k.Kind, Raw: append(json.RawMessage(nil), b...)}
		return nil
	}
	*u = Update(p.plain)
	u.ToolCallID = boundID(u.ToolCallID)
	if u.Kind == UpdateToolCall || u.Kind == UpdateToolCallUpdate {
		u.RawInput = p.RawInput
	}
	switch u.Kind {
	case UpdateMessageChunk, UpdateThoughtChunk, UpdateUserMessageChunk, UpdateToolCall, UpdateToolCallUpdate:
		// The bulk of what an agent sends: its fields say all that is
		// used, and a second copy would double what a turn's queue holds.
	default:
		u.Raw = append(json.RawMessage(nil), b...)
	}
	if u.Kind == UpdateUsage {
		var usage Usage
		if err := json.Unmarshal(b, &usage); err != nil {
			return err
		}
		if usage.Cost != nil {
			usage.Cost.Currency = clip.Cut(usage.Cost.Currency, 16) // kept with the thread
		}
		u.Usage = &usage
	}
	if len(p.Content) == 0 {
		return nil
	}
	switch u.Kind {
	case UpdateMessageChunk, UpdateThoughtChunk, UpdateUserMessageChunk:
		var blk ContentBlock
		if err := json.Unmarshal(p.Content, &blk); err == nil {
			u.Content = &blk
		}
	case UpdateToolCall, UpdateToolCallUpdate:
		var out []ToolCallContent
		if err := json.Unmarshal(p.Content, &out); err == nil {
			u.ToolOutput = out
		}
	}
	return nil
}

// MarshalJSON writes the update as received when Raw holds it, else
// rebuilds it from its fields.
func (u Update) MarshalJSON() ([]byte, error) {
	if len(u.Raw) > 0 {
		return u.Raw, nil
	}
	type plain Update
	m := struct {
		plain
		Content any `json:"content,omitempty"`
	}{plain: plain(u)}
	switch {
	case u.Content != nil:
		m.Content = u.Content
	case u.ToolOutput != nil:
		m.Content = u.ToolOutput
	}
	if u.Usage != nil {
		return json.Marshal(struct {
			plain
			Content any `json:"content,omitempty"`
			*Usage
		}{m.plain, m.Content, u.Usage})
	}
	return json.Marshal(m)
}

// SessionNotification is the params of session/update.
type SessionNotification struct {
	SessionID string `json:"sessionId"`
	Update    Update `json:"update"`
}

// PermissionOption is one choice offered by a permission request.
type PermissionOption struct {
	OptionID string `json:"optionId"`
	Name     string `json:"name"`
	Kind     string `json:"kind"`
}

// Permission option kinds.
const (
	OptionAllowOnce    = "allow_once"
	OptionAllowAlways  = "allow_always"
	OptionRejectOnce   = "reject_once"
	OptionRejectAlways = "reject_always"
)

// PermissionToolCall is the tool call a permission request is about.
type PermissionToolCall struct {
	ToolCallID string          `json:"toolCallId"`
	Title      string          `json:"title,omitempty"`
	Kind       string          `json:"kind,omitempty"`
	RawInput   json.RawMessage `json:"rawInput,omitempty"`
}

// PermissionRequest is the params of session/request_permission.
type PermissionRequest struct {
	SessionID string             `json:"sessionId"`
	ToolCall  PermissionToolCall `json:"toolCall"`
	Options   []PermissionOption `json:"options"`
}

// FirstOption returns the first option whose kind starts with prefix
// ("allow" or "reject"), and whether there was one.
func (r *PermissionRequest) FirstOption(prefix string) (PermissionOption, bool) {
	for _, o := range r.Options {
		if len(o.Kind) >= len(prefix) && o.Kind[:len(prefix)] == prefix {
			return o, true
		}
	}
	return PermissionOption{}, false
}

// PermissionOutcome is the client's answer to a permission request. An
// empty OptionID means "cancelled".
type PermissionOutcome struct {
	OptionID string
}

// Cancelled reports whether the outcome is "cancelled".
func (o PermissionOutcome) Cancelled() bool { return o.OptionID == "" }

// MarshalJSON writes the wire form {"outcome":{...}}.
func (o PermissionOutcome) MarshalJSON() ([]byte, error) {
	type inner struct {
		Outcome  string `json:"outcome"`
		OptionID string `json:"optionId,omitempty"`
	}
	in := inner{Outcome: "cancelled"}
	if o.OptionID != "" {
		in = inner{Outcome: "selected", OptionID: o.OptionID}
	}
	return json.Marshal(struct {
		Outcome inner `json:"outcome"`
	}{in})
}

// NewSessionParams are the params of session/new.
type NewSessionParams struct {
	Cwd        string      `json:"cwd"`
	MCPServers []MCPServer `json:"mcpServers"`
}

// LoadSessionParams are the params of session/load.
type LoadSessionParams struct {
	SessionID  string      `json:"sessionId"`
	Cwd        string      `json:"cwd"`
	MCPServers []MCPServer `json:"mcpServers"`
}

// PromptParams are the params of session/prompt.
type PromptParams struct {
	SessionID string         `json:"sessionId"`
	Prompt    []ContentBlock `json:"prompt"`
}

// PromptResult is the answer to session/prompt. Unknown fields are ignored.
type PromptResult struct {
	StopReason string `json:"stopReason"`
	// Usage is the turn's token totals, when the agent says.
	Usage *TurnUsage `json:"usage,omitempty"`
}

type cancelParams struct {
	SessionID string `json:"sessionId"`
}

// ReadTextFileParams are fs/read_text_file's: Line is 1-based, and with
// Limit unset the file is read to its end.
type ReadTextFileParams struct {
	SessionID string `json:"sessionId"`
	Path      string `json:"path"`
	Line      *int   `json:"line,omitempty"`
	Limit     *int   `json:"limit,omitempty"`
}

// ReadTextFileResult is fs/read_text_file's answer.
type ReadTextFileResult struct {
	Content string `json:"content"`
}

// WriteTextFileParams are fs/write_text_file's.
type WriteTextFileParams struct {
	SessionID string `json:"sessionId"`
	Path      string `json:"path"`
	Content   string `json:"content"`
}

// CreateTerminalParams are terminal/create's.
type CreateTerminalParams struct {
	SessionID       string        `json:"sessionId"`
	Command         string        `json:"command"`
	Args            []string      `json:"args"`
	Env             []EnvVariable `json:"env"`
	Cwd             string        `json:"cwd"`
	OutputByteLimit *uint64       `json:"outputByteLimit"`
}

// CreateTerminalResult is terminal/create's answer.
type CreateTerminalResult struct {
	TerminalID string `json:"terminalId"`
}

// TerminalParams are those of terminal/output, wait_for_exit, kill and
// release.
type TerminalParams struct {
	SessionID  string `json:"sessionId"`
	TerminalID string `json:"terminalId"`
}

// TerminalOutputResult is terminal/output's answer.
type TerminalOutputResult struct {
	Output     string              `json:"output"`
	Truncated  bool                `json:"truncated"`
	ExitStatus *TerminalExitStatus `json:"exitStatus,omitempty"`
}

// TerminalExitStatus is how a terminal's command ended: its exit code, or
// the signal that killed it.
type TerminalExitStatus struct {
	ExitCode *int    `json:"exitCode,omitempty"`
	Signal   *string `json:"signal,omitempty"`
}

// String is "exit status 3" or "killed by SIGKILL".
func (s TerminalExitStatus) String() string {
	switch {
	case s.Signal != nil:
		return "killed by " + *s.Signal
	case s.ExitCode != nil:
		return fmt.Sprintf("exit status %d", *s.ExitCode)
	default:
		return "ended"
	}
}

// TerminalOutput is what a terminal printed, as far as it is kept.
type TerminalOutput struct {
	ID string
	// Output is the end of what the command printed (stdout and stderr),
	// whole UTF-8 characters.
	Output string
	// Truncated: the beginning was dropped.
	Truncated bool
	// Written counts every byte the command printed, kept or not.
	Written int64
	// Exit is set once the command has ended.
	Exit *TerminalExitStatus
}
