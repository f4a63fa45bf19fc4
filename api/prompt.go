package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat"
	"acpbroker/store"
)

// Prompt states, as GET /v1/prompts/{id} says them.
const (
	StateQueued     = "queued"
	StateRunning    = "running"
	StateWaiting    = "waiting_for_permission"
	StateDone       = "done"
	StateCancelled  = "cancelled"
	StateFailed     = "failed"
	stateCancelling = "cancelling" // said in a status event, not a state
)

// final reports whether a state is an end.
func final(state string) bool {
	return state == StateDone || state == StateCancelled || state == StateFailed
}

// Bounds of what one prompt keeps of its events for its streams: past
// them the oldest go, and a stream resumed from before them is told how
// many it missed.
const (
	maxEvents     = 10000
	maxEventBytes = 4 << 20
)

// event is one Server-Sent Event of a prompt's stream.
type event struct {
	id   uint64
	typ  string
	data []byte
}

// prompt is a prompt the API started, while the broker keeps it in
// memory: its record, its events, its open permission requests. Its
// Sink (sink) is the turn's, over the thread's own.
type prompt struct {
	s      *Server
	front  Front
	client string

	mu      sync.Mutex
	rec     store.Prompt
	answer  string
	events  []event
	next    uint64 // the id of the next event (the first is 1)
	bytes   int
	changed chan struct{} // closed and replaced at each event
	// cancel: the client asked to cancel; started: the turn has begun
	// (its Status said so), so a cancel of the thread's turn is its.
	cancel, started bool
	cancelCause     error
	perms           map[string]*perm // by request id, asked and answered
	permSeq         int
}

// perm is one permission request of a prompt's turn.
type perm struct {
	id      string
	seq     int
	req     *acp.PermissionRequest
	open    bool
	mine    bool   // the API's answer claimed it
	outcome string // once answered: the option chosen, "" for cancelled
	by      string // who answered, in words
	via     string // "api", "chat", or why nobody did
}

func newPrompt(s *Server, front Front, client string, rec store.Prompt) *prompt {
	return &prompt{s: s, front: front, client: client, rec: rec, next: 1, changed: make(chan struct{}), perms: map[string]*perm{}}
}

// emitLocked adds an event and wakes the streams. p.mu must be held.
func (p *prompt) emitLocked(typ string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		data = []byte(`{}`)
	}
	p.events = append(p.events, event{id: p.next, typ: typ, data: data})
	p.next++
	p.bytes += len(data)
	for len(p.events) > 1 && (len(p.events) > maxEvents || p.bytes > maxEventBytes) {
		p.bytes -= len(p.events[0].data)
		p.events = p.events[1:]
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// setStateLocked changes the state and records it.
func (p *prompt) setStateLocked(state string) {
	if p.rec.State == state || final(p.rec.State) {
		return
	}
	p.rec.State = state
	p.emitLocked("state", map[string]string{"state": state})
	p.s.config().Store.PutPrompt(p.rec, nil)
}

// sink is the prompt's Sink over the thread's: every call goes on to
// inner, and becomes events.
func (p *prompt) sink(inner adapter.Sink) adapter.Sink {
	if el, ok := inner.(adapter.Elicitor); ok {
		return &elicitSink{promptSink{p: p, inner: inner}, el}
	}
	return &promptSink{p: p, inner: inner}
}

type promptSink struct {
	p     *prompt
	inner adapter.Sink
}

// elicitSink passes the agent's questions on to a thread that asks them.
type elicitSink struct {
	promptSink
	el adapter.Elicitor
}

func (s *elicitSink) Elicit(ctx context.Context, req *acp.ElicitationRequest) adapter.ElicitAnswer {
	return s.el.Elicit(ctx, req)
}

var (
	_ adapter.Sink       = (*promptSink)(nil)
	_ adapter.Elicitor   = (*elicitSink)(nil)
	_ adapter.Withdrawer = (*promptSink)(nil)
)

var phaseNames = map[adapter.Phase]string{adapter.PhaseQueued: "queued", adapter.PhaseWaitingForSlot: "waiting_for_slot", adapter.PhaseWaitingForHost: "waiting_for_host",
	adapter.PhaseWorking: "working", adapter.PhaseCancelling: stateCancelling}

// Withdrawn is why the prompt was cancelled before its turn began, or
// nil: then it never reaches the agent.
func (s *promptSink) Withdrawn() error {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cancel && !p.started {
		return p.cancelCause
	}
	return nil
}

func (s *promptSink) Status(st adapter.Status) {
	s.inner.Status(st)
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	p.emitLocked("status", map[string]any{"phase": phaseNames[st.Phase], "text": chat.StatusText(st)})
	if st.Phase == adapter.PhaseQueued {
		return
	}
	if !p.started {
		p.started = true
		p.rec.Started = p.s.now().UTC()
	}
	if st.Phase == adapter.PhaseWorking && p.rec.State == StateQueued {
		p.setStateLocked(StateRunning)
	}
	if p.cancel && st.Phase != adapter.PhaseCancelling {
		// Asked while it waited: the thread's running turn is this one.
		p.front.Cancel(p.rec.Thread, p.cancelCause)
	}
}

// toolCall is a tool call as an event tells it.
type toolCall struct {
	ID     string `json:"id"`
	Title  string `json:"title,omitempty"`
	Kind   string `json:"kind,omitempty"`
	Status string `json:"status,omitempty"`
}

func (s *promptSink) Update(u acp.Update) {
	s.inner.Update(u)
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	switch u.Kind {
	case acp.UpdateMessageChunk, acp.UpdateThoughtChunk:
		if u.Content == nil || u.Content.Type != "text" {
			return
		}
		typ := "chunk"
		if u.Kind == acp.UpdateThoughtChunk {
			typ = "thought"
		}
		p.emitLocked(typ, map[string]string{"text": u.Content.Text})
	case acp.UpdateToolCall, acp.UpdateToolCallUpdate:
		tc := toolCall{ID: u.ToolCallID, Kind: u.ToolKind, Status: u.Status}
		if u.Title != nil {
			tc.Title = *u.Title
		}
		p.emitLocked("tool_call", tc)
	case acp.UpdatePlan:
		p.emitLocked("plan", map[string]any{"entries": u.Entries})
	case "usage_update":
		if u.Usage != nil {
			p.emitLocked("usage", u.Usage)
		}
	}
}

func (s *promptSink) Notice(n adapter.Notice) {
	s.inner.Notice(n)
	p := s.p
	p.mu.Lock()
	p.emitLocked("notice", map[string]string{"kind": n.Kind(), "text": chat.NoticeText(n)})
	p.mu.Unlock()
}

// permissionOption is a permission request's option as events tell it.
type permissionOption struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Kind string `json:"kind"`
}

// PermissionAsked is the data of a permission_asked event, and an open
// request in a prompt's state.
type PermissionAsked struct {
	Request  string             `json:"request"`
	ToolCall toolCall           `json:"tool_call"`
	Options  []permissionOption `json:"options"`
}

// PermissionAnswered is the data of a permission_answered event.
type PermissionAnswered struct {
	Request string `json:"request"`
	// Option is the option chosen ("" when the agent was told cancelled).
	Option string `json:"option"`
	// By names who answered; Via is "api", "chat", or why nobody did
	// ("timeout", "turn ended").
	By  string `json:"by,omitempty"`
	Via string `json:"via"`
}

func asked(id string, req *acp.PermissionRequest) PermissionAsked {
	a := PermissionAsked{Request: id, ToolCall: toolCall{ID: req.ToolCall.ToolCallID, Title: req.ToolCall.Title, Kind: req.ToolCall.Kind},
		Options: []permissionOption{}}
	for _, o := range req.Options {
		a.Options = append(a.Options, permissionOption{ID: o.OptionID, Name: o.Name, Kind: o.Kind})
	}
	return a
}

func (s *promptSink) Ask(ctx context.Context, req *acp.PermissionRequest) adapter.Answer {
	p := s.p
	p.mu.Lock()
	p.permSeq++
	pr := &perm{id: fmt.Sprintf("perm-%d", p.permSeq), req: req, open: true, seq: p.permSeq}
	p.forgetPermsLocked()
	p.perms[pr.id] = pr
	p.emitLocked("permission_asked", asked(pr.id, req))
	p.setStateLocked(StateWaiting)
	p.mu.Unlock()

	ans := s.inner.Ask(ctx, req)

	p.mu.Lock()
	defer p.mu.Unlock()
	pr.open, pr.outcome = false, ans.Outcome.OptionID
	switch {
	case pr.mine:
		pr.via, pr.by = "api", p.client
	case ans.By != "":
		pr.via, pr.by = "chat", cmpOr(ans.ByName, ans.By)
	case ctx.Err() != nil:
		pr.via = "closed: " + context.Cause(ctx).Error()
	default:
		pr.via = "unanswered"
	}
	p.emitLocked("permission_answered", PermissionAnswered{Request: pr.id, Option: pr.outcome, By: pr.by, Via: pr.via})
	if p.rec.State == StateWaiting && !p.anyOpenLocked() {
		p.rec.State = StateRunning // said by the event above; recorded as it goes
		p.emitLocked("state", map[string]string{"state": StateRunning})
	}
	return ans
}

// maxPerms bounds the requests a prompt keeps: the oldest answered go
// first (a late answer to one is then told it is not a request).
const maxPerms = 256

func (p *prompt) forgetPermsLocked() {
	for len(p.perms) >= maxPerms {
		var oldest *perm
		for _, pr := range p.perms {
			if !pr.open && (oldest == nil || pr.seq < oldest.seq) {
				oldest = pr
			}
		}
		if oldest == nil {
			return // all open: the agent's own bound holds them
		}
		delete(p.perms, oldest.id)
	}
}

func (p *prompt) anyOpenLocked() bool {
	for _, pr := range p.perms {
		if pr.open {
			return true
		}
	}
	return false
}

// End is the data of the end event: how the turn ended.
type End struct {
	State      string          `json:"state"`
	StopReason string          `json:"stop_reason,omitempty"`
	Error      string          `json:"error,omitempty"`
	Summary    string          `json:"summary"`
	ElapsedMS  int64           `json:"elapsed_ms"`
	Usage      json.RawMessage `json:"usage,omitempty"`
}

func (s *promptSink) Done(o adapter.Outcome) {
	p := s.p
	p.mu.Lock()
	state := StateDone
	switch {
	case errors.Is(o.Err, adapter.ErrCancelled):
		state = StateCancelled
	case o.Err != nil:
		state = StateFailed
	}
	p.rec.State, p.rec.StopReason, p.rec.Summary = state, o.StopReason, o.Summary()
	if o.Err != nil {
		p.rec.Error = o.Err.Error()
	}
	p.rec.Ended = p.s.now().UTC()
	p.rec.AnswerBytes = o.TextBytes
	if o.Usage != nil || o.TurnUsage != nil {
		p.rec.Usage, _ = json.Marshal(map[string]any{"context": o.Usage, "turn": o.TurnUsage})
	}
	p.answer = store.ClipAnswer(o.Text)
	for _, pr := range p.perms {
		pr.open = false
	}
	p.emitLocked("end", End{State: state, StopReason: o.StopReason, Error: p.rec.Error, Summary: p.rec.Summary,
		ElapsedMS: o.Elapsed.Milliseconds(), Usage: p.rec.Usage})
	kept := p.trimLocked(endedEventBytes)
	rec, answer := p.rec, p.answer
	p.mu.Unlock()
	p.s.config().Store.PutPrompt(rec, &answer)
	p.s.prompts.ended(rec.ID, rec.Ended, kept)
	s.inner.Done(o)
}

// promptOverhead is what an ended prompt kept in memory costs beyond its
// events and answer: its record, maps and the like.
const promptOverhead = 2 << 10

// trimLocked keeps the last events of an ended prompt that fit in limit
// bytes (the end event at least: a late stream is told how many it
// missed, and GET has the answer), in an array of their own, and returns
// what the prompt keeps now. p.mu must be held.
func (p *prompt) trimLocked(limit int) int {
	i, bytes := len(p.events), 0
	for i > 0 && (i == len(p.events) || bytes+len(p.events[i-1].data) <= limit) {
		i--
		bytes += len(p.events[i].data)
	}
	p.events = slices.Clone(p.events[i:])
	p.bytes = bytes
	return bytes + len(p.answer) + len(p.rec.Summary) + len(p.rec.Error) + len(p.rec.Usage) + promptOverhead
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// since returns the events after id (all with id 0), the number missed
// because they were dropped, whether the prompt has ended, and a channel
// closed at the next event.
func (p *prompt) since(id uint64) (out []event, missed uint64, ended bool, changed <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.events) > 0 {
		first := p.events[0].id
		if id+1 < first {
			missed = first - id - 1
		}
		for _, e := range p.events {
			if e.id > id {
				out = append(out, e)
			}
		}
	}
	return out, missed, final(p.rec.State), p.changed
}

// ended reports whether the prompt has ended.
func (p *prompt) ended() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return final(p.rec.State)
}

// view is the prompt as GET /v1/prompts/{id} shows it.
func (p *prompt) view() PromptView {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := viewOf(p.rec, p.answer)
	for _, id := range sortedPerms(p.perms) {
		if pr := p.perms[id]; pr.open {
			v.Permissions = append(v.Permissions, asked(pr.id, pr.req))
		}
	}
	return v
}

func sortedPerms(m map[string]*perm) []string {
	out := make([]*perm, 0, len(m))
	for _, pr := range m {
		out = append(out, pr)
	}
	slices.SortFunc(out, func(a, b *perm) int { return a.seq - b.seq })
	ids := make([]string, len(out))
	for i, pr := range out {
		ids[i] = pr.id
	}
	return ids
}
