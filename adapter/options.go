package adapter

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"acpbroker/acp"
	"acpbroker/pool"
)

// ThreadChoices remembers the configuration each thread chose (option
// values by option id, "true"/"false" for a boolean, and its legacy
// mode), so that every agent the thread gets, after a restart too, is
// given them again (the state store is one). Its methods must not block
// for long.
type ThreadChoices interface {
	// ThreadChoices are the thread's choices; the map is the caller's.
	ThreadChoices(thread string) (options map[string]string, mode string)
	SetThreadOption(thread, id, value string)
	SetThreadMode(thread, mode string)
}

// Errors of a choice the thread's agent does not offer.
var (
	ErrNoOptionsYet = errors.New("this thread's agent has not said what it offers yet; send it a message first")
	ErrNoOption     = errors.New("the agent offers no such option")
	ErrBadValue     = errors.New("the agent offers no such value")
	ErrNoModes      = errors.New("the agent offers no modes")
)

// ThreadOptions is what a thread's agent offers to be chosen and run,
// with what the thread chose.
type ThreadOptions struct {
	acp.SessionState
	// Live: the state is the thread's running agent's. Otherwise it is
	// what the thread's last agent said (nothing if it had none); choices
	// made now apply when the next one starts.
	Live bool
	// Chosen are the option values the thread chose, by option id, and
	// ChosenMode its legacy mode.
	Chosen     map[string]string
	ChosenMode string
}

// Choice is one value a person can pick for an option or the mode.
type Choice struct {
	Value, Name, Description string
}

// ModeChoices are the modes a person can choose from.
func (o ThreadOptions) ModeChoices() []Choice {
	if opt, ok := o.ModeOption(); ok {
		return Choices(opt)
	}
	if o.Modes == nil {
		return nil
	}
	out := make([]Choice, 0, len(o.Modes.Available))
	for _, m := range o.Modes.Available {
		out = append(out, Choice{Value: m.ID, Name: m.Name, Description: m.Description})
	}
	return out
}

// Choices are the values a person can choose for an option: a select's
// choices, or on and off.
func Choices(opt acp.ConfigOption) []Choice {
	if opt.Type == acp.ConfigBoolean {
		return []Choice{{Value: "true", Name: "on"}, {Value: "false", Name: "off"}}
	}
	out := make([]Choice, 0, len(opt.Choices))
	for _, c := range opt.Choices {
		name := c.Name
		if name == "" {
			name = c.Value
		}
		if c.Group != "" {
			name = c.Group + ": " + name
		}
		out = append(out, Choice{Value: c.Value, Name: name, Description: c.Description})
	}
	return out
}

// agentID tells one agent process, and session, from the next of the
// same thread.
type agentID struct {
	pid     int
	started time.Time
	session string
}

func idOf(a *pool.Agent) agentID { return agentID{a.Proc.PID(), a.Started, a.SessionID} }

// optionView is the last state a thread's agent stated, kept past the
// agent's end so that choices can be offered and made while none runs.
type optionView struct {
	state   acp.SessionState
	applied agentID // the agent the thread's choices were applied to
	used    time.Time
}

// maxOptionViews bounds the threads whose agents' states are kept; past
// it the least recently used is forgotten (it comes back with the
// thread's next agent).
const maxOptionViews = 1024

// maxThreadOptions bounds the choices a thread keeps in memory.
const maxThreadOptions = 64

// optionBook is the engine's per-thread configuration state.
type optionBook struct {
	mu      sync.Mutex
	views   map[string]*optionView
	choices ThreadChoices
}

func newOptionBook(choices ThreadChoices) *optionBook {
	if choices == nil {
		choices = newMemoryChoices(maxOptionViews)
	}
	return &optionBook{views: map[string]*optionView{}, choices: choices}
}

// view returns thread's view, made if absent. b.mu must be held.
func (b *optionBook) viewLocked(thread string) *optionView {
	v := b.views[thread]
	if v == nil {
		if len(b.views) >= maxOptionViews {
			var oldest string
			var at time.Time
			for id, o := range b.views {
				if oldest == "" || o.used.Before(at) {
					oldest, at = id, o.used
				}
			}
			delete(b.views, oldest)
		}
		v = &optionView{}
		b.views[thread] = v
	}
	v.used = time.Now()
	return v
}

func (b *optionBook) forget(thread string) {
	b.mu.Lock()
	delete(b.views, thread)
	b.mu.Unlock()
}

func (b *optionBook) size() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.views)
}

// Options returns what thread's agent offers, as it last said, and what
// the thread chose.
func (e *Engine) Options(thread string) ThreadOptions {
	var out ThreadOptions
	if a := e.pool.Lookup(thread); a != nil {
		if st, ok := a.Conn.SessionState(a.SessionID); ok {
			out.SessionState, out.Live = st, true
		}
	}
	b := e.options
	b.mu.Lock()
	if out.Live {
		b.viewLocked(thread).state = out.SessionState.Clone()
	} else if v := b.views[thread]; v != nil {
		out.SessionState = v.state.Clone()
	}
	b.mu.Unlock()
	out.Chosen, out.ChosenMode = b.choices.ThreadChoices(thread)
	return out
}

// Commands returns the agent's own slash commands in thread, as it last
// said.
func (e *Engine) Commands(thread string) []acp.AvailableCommand {
	return e.Options(thread).Commands
}

// SetOption sets one of the agent's options in thread to value (a
// select's value; for a boolean true/false, on/off, yes/no) and
// remembers the choice for the thread's later agents. With the agent
// running, the change is sent at once, during a turn too, and the
// agent's answer is returned; otherwise it is checked against what the
// last agent offered and applies when the next one starts.
func (e *Engine) SetOption(ctx context.Context, thread, id, value string) (ThreadOptions, error) {
	cur := e.Options(thread)
	if cur.Empty() {
		return cur, ErrNoOptionsYet
	}
	opt, ok := cur.Option(id)
	if !ok {
		return cur, fmt.Errorf("%w %q (it offers %s)", ErrNoOption, id, optionIDs(cur.Options))
	}
	wire, stored, err := optionValue(opt, value)
	if err != nil {
		return cur, err
	}
	if a := e.pool.Lookup(thread); a != nil {
		if _, err := a.Conn.SetConfigOption(ctx, a.SessionID, id, wire); err != nil {
			e.log.Info().Str("thread", thread).Str("option", id).Str("value", stored).Err(err).Msg("option not set")
			return e.Options(thread), fmt.Errorf("the agent did not set %s: %w", opt.Name, err)
		}
	}
	e.options.choices.SetThreadOption(thread, id, stored)
	e.log.Info().Str("thread", thread).Str("option", id).Str("value", stored).Msg("option chosen")
	return e.Options(thread), nil
}

// SetMode sets the agent's mode in thread: through its mode option when
// it has one, else through its legacy modes; as SetOption does.
func (e *Engine) SetMode(ctx context.Context, thread, mode string) (ThreadOptions, error) {
	cur := e.Options(thread)
	if opt, ok := cur.ModeOption(); ok {
		return e.SetOption(ctx, thread, opt.ID, mode)
	}
	if cur.Empty() {
		return cur, ErrNoOptionsYet
	}
	if cur.Modes == nil {
		return cur, ErrNoModes
	}
	if !hasMode(cur.Modes, mode) {
		return cur, fmt.Errorf("%w %q for the mode (it offers %s)", ErrBadValue, mode, modeIDs(cur.Modes))
	}
	if a := e.pool.Lookup(thread); a != nil {
		if _, err := a.Conn.SetMode(ctx, a.SessionID, mode); err != nil {
			e.log.Info().Str("thread", thread).Str("mode", mode).Err(err).Msg("mode not set")
			return e.Options(thread), fmt.Errorf("the agent did not change mode: %w", err)
		}
	}
	e.options.choices.SetThreadMode(thread, mode)
	e.log.Info().Str("thread", thread).Str("mode", mode).Msg("mode chosen")
	return e.Options(thread), nil
}

// applyChoices gives a newly started (or resumed) agent the thread's
// choices, before its first prompt: each option whose value differs and
// is still offered, and the legacy mode. What cannot be applied is told
// through the Sink; the choice is kept.
func (t *turn) applyChoices(ctx context.Context, a *pool.Agent) {
	b := t.e.options
	id := idOf(a)
	st, ok := a.Conn.SessionState(a.SessionID)
	b.mu.Lock()
	v := b.viewLocked(t.thread)
	fresh := v.applied != id
	v.applied = id
	if ok {
		v.state = st.Clone()
	}
	b.mu.Unlock()
	if !fresh || !ok {
		return
	}
	ctx, cancel := context.WithTimeoutCause(ctx, applyTimeout, fmt.Errorf("the agent did not answer within %s", applyTimeout))
	defer cancel()
	chosen, mode := b.choices.ThreadChoices(t.thread)
	for _, opt := range st.Options {
		value, ok := chosen[opt.ID]
		if !ok {
			continue
		}
		wire, stored, err := optionValue(opt, value)
		if err != nil {
			t.p.Sink.Notice(ChoiceNotApplied{Option: opt.Name, Err: err})
			continue
		}
		if (opt.Type == acp.ConfigBoolean && wire == opt.On) || (opt.Type == acp.ConfigSelect && wire == opt.Value) {
			continue
		}
		if _, err := a.Conn.SetConfigOption(ctx, a.SessionID, opt.ID, wire); err != nil {
			t.log.Warn().Str("option", opt.ID).Str("value", stored).Err(err).Msg("chosen option not applied to the new agent")
			t.p.Sink.Notice(ChoiceNotApplied{Option: opt.Name, Value: stored, Err: err})
			continue
		}
		t.log.Info().Str("option", opt.ID).Str("value", stored).Msg("chosen option applied to the new agent")
	}
	if _, viaOption := (ThreadOptions{SessionState: st}).ModeOption(); mode != "" && !viaOption && st.Modes != nil && st.Modes.Current != mode {
		if !hasMode(st.Modes, mode) {
			t.p.Sink.Notice(ModeNotApplied{Mode: mode, Gone: true})
		} else if _, err := a.Conn.SetMode(ctx, a.SessionID, mode); err != nil {
			t.log.Warn().Str("mode", mode).Err(err).Msg("chosen mode not applied to the new agent")
			t.p.Sink.Notice(ModeNotApplied{Mode: mode, Err: err})
		} else {
			t.log.Info().Str("mode", mode).Msg("chosen mode applied to the new agent")
		}
	}
	if st, ok := a.Conn.SessionState(a.SessionID); ok {
		b.mu.Lock()
		b.viewLocked(t.thread).state = st
		b.mu.Unlock()
	}
}

// applyTimeout bounds the application of a thread's choices to a new
// agent, all of them.
const applyTimeout = 30 * time.Second

// optionValue checks value against what opt offers and returns it as
// the wire wants it (string or bool) and as it is remembered.
func optionValue(opt acp.ConfigOption, value string) (any, string, error) {
	if opt.Type == acp.ConfigBoolean {
		switch strings.ToLower(strings.TrimSpace(value)) {
		case "true", "on", "yes", "1":
			return true, "true", nil
		case "false", "off", "no", "0":
			return false, "false", nil
		}
		return nil, "", fmt.Errorf("%w %q for %s: it is on or off", ErrBadValue, value, opt.Name)
	}
	if _, ok := opt.Choice(value); ok {
		return value, value, nil
	}
	// A choice's name is as good as its value.
	for _, c := range opt.Choices {
		if strings.EqualFold(c.Name, value) {
			return c.Value, c.Value, nil
		}
	}
	vals := make([]string, 0, len(opt.Choices))
	for _, c := range opt.Choices {
		vals = append(vals, c.Value)
	}
	return nil, "", fmt.Errorf("%w %q for %s (it offers %s)", ErrBadValue, value, opt.Name, strings.Join(vals, ", "))
}

func optionIDs(opts []acp.ConfigOption) string {
	if len(opts) == 0 {
		return "none"
	}
	ids := make([]string, 0, len(opts))
	for _, o := range opts {
		ids = append(ids, o.ID)
	}
	return strings.Join(ids, ", ")
}

func hasMode(m *acp.SessionModes, id string) bool {
	for _, a := range m.Available {
		if a.ID == id {
			return true
		}
	}
	return false
}

func modeIDs(m *acp.SessionModes) string {
	ids := make([]string, 0, len(m.Available))
	for _, a := range m.Available {
		ids = append(ids, a.ID)
	}
	return strings.Join(ids, ", ")
}

// memoryChoices keeps threads' choices in memory when the engine has no
// ThreadChoices: for the last max threads that chose.
type memoryChoices struct {
	mu      sync.Mutex
	max     int
	threads map[string]*memoryChoice
}

type memoryChoice struct {
	options map[string]string
	mode    string
	used    time.Time
}

func newMemoryChoices(max int) *memoryChoices {
	return &memoryChoices{max: max, threads: map[string]*memoryChoice{}}
}

func (m *memoryChoices) ThreadChoices(thread string) (map[string]string, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.threads[thread]
	if c == nil {
		return nil, ""
	}
	return maps.Clone(c.options), c.mode
}

func (m *memoryChoices) entryLocked(thread string) *memoryChoice {
	c := m.threads[thread]
	if c == nil {
		if len(m.threads) >= m.max {
			var oldest string
			var at time.Time
			for id, o := range m.threads {
				if oldest == "" || o.used.Before(at) {
					oldest, at = id, o.used
				}
			}
			delete(m.threads, oldest)
		}
		c = &memoryChoice{options: map[string]string{}}
		m.threads[thread] = c
	}
	c.used = time.Now()
	return c
}

func (m *memoryChoices) SetThreadOption(thread, id, value string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.entryLocked(thread); len(c.options) < maxThreadOptions {
		c.options[id] = value
	}
}

func (m *memoryChoices) SetThreadMode(thread, mode string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entryLocked(thread).mode = mode
}
