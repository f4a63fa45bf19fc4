package fakeagent

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The configuration the agent offers with Options.ConfigOptions: a model
// select (grouped), a mode select, a boolean, and an option of a type no
// client knows. With Options.Modes it offers the legacy modes instead of
// the mode select.
var (
	fakeModels = []fakeModel{
		{"fake-small", "Fake Small", "Fast"},
		{"fake-large", "Fake Large", "Smart"},
		{"fake-huge", "Fake Huge", "Smart"},
	}
	fakeModes    = []string{"ask", "code", "plan"}
	fakeCommands = []map[string]any{
		{"name": "review", "description": "Review the current changes", "input": map[string]string{"hint": "what to review"}},
		{"name": "init", "description": "Write an AGENTS.md for this project", "input": nil},
	}
)

type fakeModel struct{ value, name, group string }

// models are the models the agent offers: Options.Models, or the
// default three.
func (a *agent) models() []fakeModel {
	if len(a.opts.Models) == 0 {
		return fakeModels
	}
	out := make([]fakeModel, 0, len(a.opts.Models))
	for _, m := range a.opts.Models {
		out = append(out, fakeModel{value: m, name: m, group: "Offered"})
	}
	return out
}

// sessionConfig is one session's choices; a new process starts from the
// defaults, as real agents do.
type sessionConfig struct {
	model string
	mode  string
	fast  bool
}

func (a *agent) defaultConfig() *sessionConfig {
	return &sessionConfig{model: a.models()[0].value, mode: "ask"}
}

// config is sid's configuration, made on first use. a.mu must be held.
func (a *agent) configLocked(sid string) *sessionConfig {
	if a.configs == nil {
		a.configs = map[string]*sessionConfig{}
	}
	c := a.configs[sid]
	if c == nil {
		c = a.defaultConfig()
		a.configs[sid] = c
	}
	return c
}

// setup adds the session's options and modes to a session/new or
// session/load answer.
func (a *agent) setup(sid string, res map[string]any) map[string]any {
	a.mu.Lock()
	c := *a.configLocked(sid)
	a.mu.Unlock()
	if a.opts.ConfigOptions {
		res["configOptions"] = a.configOptions(c)
	}
	if a.opts.Modes {
		res["modes"] = modesOf(c)
	}
	return res
}

func modesOf(c sessionConfig) map[string]any {
	var avail []map[string]string
	for _, m := range fakeModes {
		avail = append(avail, map[string]string{"id": m, "name": strings.ToUpper(m[:1]) + m[1:], "description": "the " + m + " mode"})
	}
	return map[string]any{"currentModeId": c.mode, "availableModes": avail}
}

func (a *agent) configOptions(c sessionConfig) []any {
	groups := map[string][]any{}
	var order []string
	for _, m := range a.models() {
		if groups[m.group] == nil {
			order = append(order, m.group)
		}
		groups[m.group] = append(groups[m.group], map[string]string{"value": m.value, "name": m.name, "description": "model " + m.value})
	}
	var grouped []any
	for _, g := range order {
		grouped = append(grouped, map[string]any{"group": strings.ToLower(g), "name": g, "options": groups[g]})
	}
	opts := []any{
		map[string]any{"id": "model", "name": "Model", "category": "model", "type": "select", "currentValue": c.model, "options": grouped},
	}
	if !a.opts.Modes {
		var modes []any
		for _, m := range fakeModes {
			modes = append(modes, map[string]string{"value": m, "name": strings.ToUpper(m[:1]) + m[1:]})
		}
		opts = append(opts, map[string]any{"id": "mode", "name": "Mode", "category": "mode", "type": "select", "currentValue": c.mode, "options": modes})
	}
	return append(opts,
		map[string]any{"id": "fast", "name": "Fast answers", "description": "answer before thinking", "type": "boolean", "currentValue": c.fast},
		map[string]any{"id": "palette", "name": "Palette", "type": "multi_select", "currentValue": []string{"red"}},
	)
}

// commands tells the client the agent's slash commands.
func (a *agent) commands(sid string) {
	list := []map[string]any{}
	if a.opts.Commands {
		list = fakeCommands
	}
	a.update(sid, map[string]any{"sessionUpdate": "available_commands_update", "availableCommands": list})
}

// setConfigOption serves session/set_config_option: a config_option_update
// with every option, then the same as the answer. After hold-options D
// the answer comes D later, on a goroutine, or as error -32800 at once
// if the client withdraws the request first.
func (a *agent) setConfigOption(m message) {
	a.mu.Lock()
	hold := a.holdOptions
	var withdrawn chan struct{}
	if hold > 0 && m.ID != nil {
		if a.held == nil {
			a.held = map[string]chan struct{}{}
		}
		withdrawn = make(chan struct{})
		a.held[string(*m.ID)] = withdrawn
	}
	a.mu.Unlock()
	if withdrawn == nil {
		a.setConfigOptionNow(m)
		return
	}
	a.wg.Go(func() {
		timer := time.NewTimer(hold)
		defer timer.Stop()
		select {
		case <-timer.C:
			a.mu.Lock()
			delete(a.held, string(*m.ID))
			a.mu.Unlock()
			a.setConfigOptionNow(m)
		case <-withdrawn:
			a.replyErr(m.ID, -32800, "request cancelled")
		case <-a.ctx.Done():
		}
	})
}

func (a *agent) setConfigOptionNow(m message) {
	var p struct {
		SessionID string          `json:"sessionId"`
		ConfigID  string          `json:"configId"`
		Type      string          `json:"type"`
		Value     json.RawMessage `json:"value"`
	}
	json.Unmarshal(m.Params, &p)
	if !a.opts.ConfigOptions {
		a.replyErr(m.ID, -32601, "method not found: session/set_config_option")
		return
	}
	var s string
	var b bool
	textErr := json.Unmarshal(p.Value, &s)
	a.mu.Lock()
	c := a.configLocked(p.SessionID)
	var err error
	switch {
	case p.ConfigID == "model" && textErr == nil && slices.ContainsFunc(a.models(), func(m fakeModel) bool { return m.value == s }):
		c.model = s
	case p.ConfigID == "mode" && !a.opts.Modes && textErr == nil && slices.Contains(fakeModes, s):
		c.mode = s
	case p.ConfigID == "fast" && p.Type == "boolean" && json.Unmarshal(p.Value, &b) == nil:
		c.fast = b
	default:
		err = fmt.Errorf("option %q cannot be set to %s", p.ConfigID, p.Value)
	}
	now := *c
	a.mu.Unlock()
	if err != nil {
		a.replyErr(m.ID, -32602, err.Error())
		return
	}
	opts := a.configOptions(now)
	a.update(p.SessionID, map[string]any{"sessionUpdate": "config_option_update", "configOptions": opts})
	a.reply(m.ID, map[string]any{"configOptions": opts})
}

// setMode serves session/set_mode: a current_mode_update, then {}.
func (a *agent) setMode(m message) {
	var p struct {
		SessionID string `json:"sessionId"`
		ModeID    string `json:"modeId"`
	}
	json.Unmarshal(m.Params, &p)
	if !a.opts.Modes {
		a.replyErr(m.ID, -32601, "method not found: session/set_mode")
		return
	}
	if !slices.Contains(fakeModes, p.ModeID) {
		a.replyErr(m.ID, -32602, "no mode "+p.ModeID)
		return
	}
	a.mu.Lock()
	a.configLocked(p.SessionID).mode = p.ModeID
	a.mu.Unlock()
	a.update(p.SessionID, map[string]any{"sessionUpdate": "current_mode_update", "currentModeId": p.ModeID})
	a.reply(m.ID, map[string]any{})
}

// configScript runs the prompts about the configuration: "settings"
// answers the session's model, mode and fast; "/name input" runs one of
// the agent's commands. It reports whether cmd was one of them.
func (a *agent) configScript(t *turn, cmd, rest string) bool {
	switch {
	case cmd == "settings":
		a.mu.Lock()
		c := *a.configLocked(t.sid)
		a.mu.Unlock()
		a.chunk(t.sid, fmt.Sprintf("model=%s mode=%s fast=%t", c.model, c.mode, c.fast))
	case cmd == "switch":
		// The agent changes its own model or mode, and says so as
		// agents do: the options' new state, or the legacy mode.
		what, value, _ := strings.Cut(rest, " ")
		a.mu.Lock()
		c := a.configLocked(t.sid)
		switch what {
		case "model":
			c.model = value
		case "mode":
			c.mode = value
		}
		now := *c
		a.mu.Unlock()
		if what == "mode" && a.opts.Modes {
			a.update(t.sid, map[string]any{"sessionUpdate": "current_mode_update", "currentModeId": value})
		} else {
			a.update(t.sid, map[string]any{"sessionUpdate": "config_option_update", "configOptions": a.configOptions(now)})
		}
		a.chunk(t.sid, "switched "+what+" to "+value)
	case cmd == "hold-options":
		d, err := time.ParseDuration(rest)
		if err != nil {
			d = time.Minute
		}
		a.mu.Lock()
		a.holdOptions = d
		a.mu.Unlock()
		a.chunk(t.sid, "holding option answers for "+d.String())
	case cmd == "withdrawn":
		a.mu.Lock()
		list := slices.Clone(a.withdrawn)
		a.mu.Unlock()
		if len(list) == 0 {
			list = []string{"none"}
		}
		a.chunk(t.sid, "withdrawn: "+strings.Join(list, ", "))
	case strings.HasPrefix(cmd, "/") && a.opts.Commands:
		name := cmd[1:]
		if !slices.ContainsFunc(fakeCommands, func(c map[string]any) bool { return c["name"] == name }) {
			a.chunk(t.sid, "no command "+cmd)
		} else {
			a.chunk(t.sid, fmt.Sprintf("ran /%s with %q", name, rest))
		}
	default:
		return false
	}
	t.stop("end_turn")
	return true
}
