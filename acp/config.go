package acp

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
)

// Methods and update kinds of a session's configuration.
const (
	MethodSetConfigOption = "session/set_config_option"
	MethodSetMode         = "session/set_mode"

	UpdateConfigOptions     = "config_option_update"
	UpdateCurrentMode       = "current_mode_update"
	UpdateAvailableCommands = "available_commands_update"
)

// Types of configuration option the broker understands; options of any
// other type are skipped and counted (Stats.UnknownConfigOptions).
const (
	ConfigSelect  = "select"
	ConfigBoolean = "boolean"
)

// Categories an agent may give a configuration option (a hint for how to
// show it; "_"-prefixed ones are the agent's own).
const (
	CategoryMode         = "mode"
	CategoryModel        = "model"
	CategoryModelConfig  = "model_config"
	CategoryThoughtLevel = "thought_level"
)

// Bounds on what a session's state keeps: past them, the rest is left out.
const (
	maxConfigOptions      = 64
	maxConfigChoices      = 256
	maxAvailableCommands  = 256
	maxSessionModes       = 64
	maxConfigGroupNesting = 1
)

// ConfigChoice is one value a select option can take. Group names the
// group it was listed under, if the agent grouped them.
type ConfigChoice struct {
	Value       string
	Name        string
	Description string
	Group       string
}

// ConfigOption is one of a session's configuration options: a select
// (Value is one of Choices) or a boolean (On).
type ConfigOption struct {
	ID          string
	Name        string
	Description string
	Category    string
	Type        string
	Value       string
	Choices     []ConfigChoice
	On          bool
}

// Current is the option's value in words: a select's choice name (its
// value if it has none), or "on"/"off".
func (o ConfigOption) Current() string {
	if o.Type == ConfigBoolean {
		if o.On {
			return "on"
		}
		return "off"
	}
	for _, c := range o.Choices {
		if c.Value == o.Value && c.Name != "" {
			return c.Name
		}
	}
	return o.Value
}

// Choice returns the select option's choice whose value is v.
func (o ConfigOption) Choice(v string) (ConfigChoice, bool) {
	i := slices.IndexFunc(o.Choices, func(c ConfigChoice) bool { return c.Value == v })
	if i < 0 {
		return ConfigChoice{}, false
	}
	return o.Choices[i], true
}

// SessionMode is one of the legacy session modes.
type SessionMode struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// SessionModes are the legacy modes an agent offers and the one in force.
type SessionModes struct {
	Current   string        `json:"currentModeId"`
	Available []SessionMode `json:"availableModes"`
}

// AvailableCommand is one of the agent's own slash commands; it is run by
// prompting with "/Name input". Hint describes the input, if it takes one.
type AvailableCommand struct {
	Name        string
	Description string
	Hint        string
}

// SessionState is what a session offers to be chosen and run: its
// configuration options (in the agent's order of priority), its legacy
// modes (nil if it has none), and its commands.
type SessionState struct {
	Options  []ConfigOption
	Modes    *SessionModes
	Commands []AvailableCommand
}

// Option returns the option with id.
func (s SessionState) Option(id string) (ConfigOption, bool) {
	i := slices.IndexFunc(s.Options, func(o ConfigOption) bool { return o.ID == id })
	if i < 0 {
		return ConfigOption{}, false
	}
	return s.Options[i], true
}

// ByCategory returns the first option of category, the agent's preferred.
func (s SessionState) ByCategory(category string) (ConfigOption, bool) {
	i := slices.IndexFunc(s.Options, func(o ConfigOption) bool { return o.Category == category })
	if i < 0 {
		return ConfigOption{}, false
	}
	return s.Options[i], true
}

// Model is the option that chooses the model, if the agent has one.
func (s SessionState) Model() (ConfigOption, bool) { return s.ByCategory(CategoryModel) }

// ModeOption is the option that chooses the mode, if the agent has one
// (preferred over the legacy modes).
func (s SessionState) ModeOption() (ConfigOption, bool) {
	opt, ok := s.ByCategory(CategoryMode)
	return opt, ok && opt.Type == ConfigSelect
}

// CurrentMode is the mode in force, in words, "" if the agent has none.
func (s SessionState) CurrentMode() string {
	if opt, ok := s.ModeOption(); ok {
		return opt.Current()
	}
	if s.Modes == nil {
		return ""
	}
	for _, m := range s.Modes.Available {
		if m.ID == s.Modes.Current && m.Name != "" {
			return m.Name
		}
	}
	return s.Modes.Current
}

// CurrentModel is the model in force, in words, "" if the agent says none.
func (s SessionState) CurrentModel() string {
	if opt, ok := s.Model(); ok {
		return opt.Current()
	}
	return ""
}

// Clone returns a copy that shares nothing with s.
func (s SessionState) Clone() SessionState {
	out := SessionState{Options: slices.Clone(s.Options), Commands: slices.Clone(s.Commands)}
	for i := range out.Options {
		out.Options[i].Choices = slices.Clone(out.Options[i].Choices)
	}
	if s.Modes != nil {
		m := *s.Modes
		m.Available = slices.Clone(m.Available)
		out.Modes = &m
	}
	return out
}

// Empty reports whether the session offers nothing to choose or run.
func (s SessionState) Empty() bool {
	return len(s.Options) == 0 && s.Modes == nil && len(s.Commands) == 0
}

// wireOption is a configuration option as sent; currentValue is a string
// for a select and a bool for a boolean.
type wireOption struct {
	ID           string            `json:"id"`
	Name         string            `json:"name"`
	Description  string            `json:"description"`
	Category     string            `json:"category"`
	Type         string            `json:"type"`
	CurrentValue json.RawMessage   `json:"currentValue"`
	Options      []json.RawMessage `json:"options"`
}

// wireChoice is a flat choice, or a group of them (Group set).
type wireChoice struct {
	Value       *string           `json:"value"`
	Name        string            `json:"name"`
	Description string            `json:"description"`
	Group       string            `json:"group"`
	Options     []json.RawMessage `json:"options"`
}

// decodeConfigOptions reads a configOptions list, skipping options of a
// type it does not know or with unusable fields; it returns how many it
// skipped.
func decodeConfigOptions(raw []json.RawMessage) ([]ConfigOption, int) {
	out := []ConfigOption{}
	skipped := 0
	for _, r := range raw {
		var w wireOption
		if json.Unmarshal(r, &w) != nil || w.ID == "" || len(out) == maxConfigOptions {
			skipped++
			continue
		}
		o := ConfigOption{ID: w.ID, Name: w.Name, Description: w.Description, Category: w.Category, Type: w.Type}
		switch w.Type {
		case ConfigSelect:
			if json.Unmarshal(w.CurrentValue, &o.Value) != nil {
				skipped++
				continue
			}
			o.Choices = decodeChoices(w.Options, "", 0)
		case ConfigBoolean:
			if json.Unmarshal(w.CurrentValue, &o.On) != nil {
				skipped++
				continue
			}
		default:
			skipped++
			continue
		}
		if o.Name == "" {
			o.Name = o.ID
		}
		out = append(out, o)
	}
	return out, skipped
}

func decodeChoices(raw []json.RawMessage, group string, depth int) []ConfigChoice {
	var out []ConfigChoice
	for _, r := range raw {
		var w wireChoice
		if json.Unmarshal(r, &w) != nil {
			continue
		}
		switch {
		case w.Value != nil:
			if len(out) < maxConfigChoices {
				out = append(out, ConfigChoice{Value: *w.Value, Name: w.Name, Description: w.Description, Group: group})
			}
		case w.Options != nil && depth < maxConfigGroupNesting:
			name := w.Name
			if name == "" {
				name = w.Group
			}
			for _, c := range decodeChoices(w.Options, name, depth+1) {
				if len(out) < maxConfigChoices {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// decodeCommands reads an availableCommands list.
func decodeCommands(raw []json.RawMessage) []AvailableCommand {
	out := []AvailableCommand{}
	for _, r := range raw {
		var w struct {
			Name        string `json:"name"`
			Description string `json:"description"`
			Input       *struct {
				Hint string `json:"hint"`
			} `json:"input"`
		}
		if json.Unmarshal(r, &w) != nil || w.Name == "" || len(out) == maxAvailableCommands {
			continue
		}
		c := AvailableCommand{Name: w.Name, Description: w.Description}
		if w.Input != nil {
			c.Hint = w.Input.Hint
		}
		out = append(out, c)
	}
	return out
}

func capModes(m *SessionModes) *SessionModes {
	if m != nil && len(m.Available) > maxSessionModes {
		m.Available = m.Available[:maxSessionModes]
	}
	return m
}

// sessionSetup is what session/new, session/load and set_config_option
// (may) answer besides a session id. It decodes from anything: fields it
// cannot read are left out, never failing the answer they came with.
type sessionSetup struct {
	modes   *SessionModes
	options []json.RawMessage // nil: not sent
}

// UnmarshalJSON reads the modes and configOptions it can.
func (s *sessionSetup) UnmarshalJSON(b []byte) error {
	var w struct {
		Modes         json.RawMessage `json:"modes"`
		ConfigOptions json.RawMessage `json:"configOptions"`
	}
	if json.Unmarshal(b, &w) != nil {
		return nil
	}
	var m SessionModes
	if len(w.Modes) > 0 && string(w.Modes) != "null" && json.Unmarshal(w.Modes, &m) == nil {
		s.modes = &m
	}
	if len(w.ConfigOptions) > 0 && string(w.ConfigOptions) != "null" {
		var list []json.RawMessage
		if json.Unmarshal(w.ConfigOptions, &list) == nil {
			s.options = list
			if list == nil {
				s.options = []json.RawMessage{}
			}
		}
	}
	return nil
}

// stateChange is a decoded change to a session's state: from a setup
// answer, an update, or a set_config_option answer.
type stateChange struct {
	options  []ConfigOption // nil: unchanged
	modes    *SessionModes  // nil: unchanged
	mode     *string        // the mode now in force
	commands []AvailableCommand
	skipped  int // unknown or unusable options
}

func (s sessionSetup) change() stateChange {
	var ch stateChange
	if s.options != nil {
		ch.options, ch.skipped = decodeConfigOptions(s.options)
	}
	ch.modes = capModes(s.modes)
	return ch
}

// isStateKind reports whether an update kind changes the session's state.
func isStateKind(kind string) bool {
	return kind == UpdateConfigOptions || kind == UpdateCurrentMode || kind == UpdateAvailableCommands
}

// stateUpdate decodes an update of a state kind.
func stateUpdate(u Update) stateChange {
	var ch stateChange
	var w struct {
		ConfigOptions     []json.RawMessage `json:"configOptions"`
		CurrentModeID     *string           `json:"currentModeId"`
		ModeID            *string           `json:"modeId"`
		AvailableCommands []json.RawMessage `json:"availableCommands"`
	}
	if len(u.Raw) > 0 {
		_ = json.Unmarshal(u.Raw, &w)
	} else if u.CurrentModeID != "" {
		w.CurrentModeID = &u.CurrentModeID
	}
	switch u.Kind {
	case UpdateConfigOptions:
		ch.options, ch.skipped = decodeConfigOptions(w.ConfigOptions)
	case UpdateCurrentMode:
		ch.mode = w.CurrentModeID
		if ch.mode == nil {
			ch.mode = w.ModeID
		}
	case UpdateAvailableCommands:
		ch.commands = decodeCommands(w.AvailableCommands)
	}
	return ch
}

// apply folds a change into st.
func (st *SessionState) apply(ch stateChange) {
	if ch.options != nil {
		st.Options = ch.options
	}
	if ch.modes != nil {
		st.Modes = ch.modes
	}
	if ch.mode != nil {
		if st.Modes == nil {
			st.Modes = &SessionModes{}
		}
		st.Modes.Current = *ch.mode
	}
	if ch.commands != nil {
		st.Commands = ch.commands
	}
}

// switches are the changes to st from the model and mode that were in
// force.
func switches(model, mode string, st SessionState) []Switch {
	var out []Switch
	if m := st.CurrentModel(); m != "" && m != model {
		out = append(out, Switch{What: "model", To: m})
	}
	if m := st.CurrentMode(); m != "" && m != mode {
		out = append(out, Switch{What: "mode", To: m})
	}
	return out
}

// changingLocked reports whether a change of sessionID's configuration
// we asked for waits for the agent's answer: the updates the agent sends
// meanwhile are its answer, not a change of its own. c.mu must be held.
func (c *Conn) changingLocked(sessionID string) bool {
	for _, call := range c.pending {
		if call.session == sessionID {
			return true
		}
	}
	return false
}

// applyState folds a change into a session's state, if the session is
// known, and counts the options it skipped.
func (c *Conn) applyState(sessionID string, ch stateChange) {
	if ch.skipped > 0 {
		c.stats.unknownOptions.Add(uint64(ch.skipped))
		c.log.Debug().Str("session", logged(sessionID)).Int("skipped", ch.skipped).Msg("configuration options of unknown type skipped")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.sessions[sessionID]; s != nil {
		s.state.apply(ch)
	}
}

// SessionState returns what the session offers to be chosen and run, as
// its answers and updates have said so far, and whether the session is
// known. The copy is the caller's.
func (c *Conn) SessionState(sessionID string) (SessionState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sessions[sessionID]
	if s == nil {
		return SessionState{}, false
	}
	return s.state.Clone(), true
}

// SetConfigOption sets one of the session's configuration options: value
// is a string for a select, a bool for a boolean. The agent answers with
// every option's state, which replaces the session's and is returned.
// It may be called during a turn.
func (c *Conn) SetConfigOption(ctx context.Context, sessionID, configID string, value any) (SessionState, error) {
	params := map[string]any{"sessionId": sessionID, "configId": configID, "value": value}
	switch value.(type) {
	case bool:
		params["type"] = ConfigBoolean
	case string:
	default:
		return SessionState{}, fmt.Errorf("%w: option value %T is neither a string nor a bool", ErrInvalidParams, value)
	}
	var res sessionSetup
	if err := c.call(ctx, MethodSetConfigOption, sessionID, params, &res); err != nil {
		return SessionState{}, fmt.Errorf("%s: %w", MethodSetConfigOption, err)
	}
	c.applyState(sessionID, res.change())
	st, _ := c.SessionState(sessionID)
	return st, nil
}

// SetMode sets the session's legacy mode. The agent answers nothing but
// success, so the mode is taken as in force once it does; the state is
// returned. It may be called during a turn.
func (c *Conn) SetMode(ctx context.Context, sessionID, modeID string) (SessionState, error) {
	params := map[string]string{"sessionId": sessionID, "modeId": modeID}
	if err := c.call(ctx, MethodSetMode, sessionID, params, nil); err != nil {
		return SessionState{}, fmt.Errorf("%s: %w", MethodSetMode, err)
	}
	c.applyState(sessionID, stateChange{mode: &modeID})
	st, _ := c.SessionState(sessionID)
	return st, nil
}

// SessionCapabilities are the client capabilities about sessions.
type SessionCapabilities struct {
	ConfigOptions *ConfigOptionsCapabilities `json:"configOptions,omitempty"`
}

// ConfigOptionsCapabilities name the option types, beyond select, that
// the client shows; a type is supported when its key is present.
type ConfigOptionsCapabilities struct {
	Boolean *struct{} `json:"boolean,omitempty"`
}

// sessionCapabilities is what the broker advertises: boolean options.
var sessionCapabilities = &SessionCapabilities{ConfigOptions: &ConfigOptionsCapabilities{Boolean: &struct{}{}}}
