package web

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat"
	"acpbroker/chat/thread"
	"acpbroker/web/render"
)

// The hub's bounds: threads it keeps, turns of each, and what one turn
// keeps of the agent's updates (past either, the rest is left out and
// the page says so).
const (
	maxThreads     = 1024
	maxTurns       = 32
	maxTurnUpdates = 4096
	maxTurnBytes   = 8 << 20 // of the answer and thoughts, and of the rest
	// maxFailures bounds the failed turns the operator's view keeps, and
	// maxCauseRunes what it keeps of each one's cause.
	maxFailures   = 64
	maxCauseRunes = 500
)

// Failure is a turn that failed, as the operator's view shows it.
type Failure struct {
	Platform, Thread string
	Title            string // the thread's first prompt, cut short
	Prompt           string // the turn's prompt, cut short
	At               time.Time
	Cause            string
}

// hub keeps the recent turns of every thread of the broker's platforms,
// as their Servers' Observer is told them, for the pages; and the
// browsers watching each thread. It never blocks a turn: each call
// takes its lock briefly, and a watcher that is behind is dropped.
type hub struct {
	now func() time.Time

	mu      sync.Mutex
	threads map[key]*threadLog
	seq     uint64 // the last turn's and request's number
	ws      watchers
	// failures are the last turns that failed, oldest first, at most
	// maxFailures.
	failures []Failure
	// saving: a State keeps what changes; dirty are the threads changed
	// since the last save (see state.go), failuresDirty whether the
	// failures did, and saveKick asks for a save now.
	saving        bool
	dirty         map[key]bool
	failuresDirty bool
	saveKick      chan struct{}
}

// key names a thread: its platform's name and its id there.
type key struct{ platform, thread string }

// threadLog is one thread's recent turns.
type threadLog struct {
	key
	turns   []*turnLog
	changed time.Time
	version uint64
}

// turnLog is one turn as the hub keeps it.
type turnLog struct {
	start   thread.TurnStart
	updates []acp.Update
	// bytes and textBytes count what is kept of the agent's updates
	// (updateSize): its answer's and thoughts' chunks in textBytes, the
	// rest in bytes, each bounded by maxTurnBytes, so that a flood of
	// one never leaves out the other (the answer's end after a flood of
	// tool calls).
	bytes, textBytes int
	// cut: updates were left out past the bounds; cutText: chunks are,
	// from now on, cutOther: every other update is.
	cut, cutText, cutOther bool
	notices                []string
	phase                  adapter.Phase
	status                 string
	done                   bool
	failed                 bool
	outcome                string
	usage                  string
	dir                    string    // the agent's working directory (adapter.Status.Dir)
	asks                   []openAsk // open, oldest first
	// unanswered are the requests the turn had open when it ended, which
	// no answer can reach now (at most maxUnanswered).
	unanswered []render.Unanswered
	// joined holds the text of the last update while it is a run of
	// chunks of one kind.
	joined *strings.Builder
	// seq names the turn in its page; version counts its changes;
	// savedAt is version+1 as last saved (0: never).
	seq, version, savedAt uint64
}

// openAsk is a permission request open in a turn, named in the page by
// id.
type openAsk struct {
	id  string
	req *acp.PermissionRequest  // a permission request, or
	q   *acp.ElicitationRequest // a question
}

func newHub(now func() time.Time) *hub {
	return &hub{now: now, threads: map[key]*threadLog{}, ws: newWatchers(), dirty: map[key]bool{}, saveKick: make(chan struct{}, 1)}
}

// observer is a platform's thread.Observer.
type observer struct {
	h        *hub
	platform string
}

func (o observer) Turn(th string, start thread.TurnStart) thread.TurnObserver {
	t := &turnLog{start: start, phase: adapter.PhaseQueued}
	k := key{o.platform, th}
	o.h.change(k, func(l *threadLog) {
		o.h.seq++
		t.seq = o.h.seq
		l.turns = append(l.turns, t)
		if n := len(l.turns); n > maxTurns {
			l.turns = slices.Delete(l.turns, 0, n-maxTurns)
		}
	})
	return turnObserver{h: o.h, k: k, t: t}
}

// turnObserver is one turn's thread.TurnObserver.
type turnObserver struct {
	h *hub
	k key
	t *turnLog
}

func (o turnObserver) Status(st adapter.Status) {
	o.do(func() {
		o.t.phase, o.t.status = st.Phase, chat.StatusText(st)
		if st.Dir != "" {
			o.t.dir = st.Dir
		}
	})
}

func (o turnObserver) Update(u acp.Update) {
	o.do(func() { o.t.add(u) })
}

func (o turnObserver) Notice(text string) {
	o.do(func() {
		if len(o.t.notices) < maxTurnUpdates {
			o.t.notices = append(o.t.notices, text)
		}
	})
}

func (o turnObserver) Ask(req *acp.PermissionRequest) {
	o.do(func() {
		o.h.seq++
		o.t.asks = append(o.t.asks, openAsk{id: strconv.FormatUint(o.h.seq, 36), req: req})
	})
}

func (o turnObserver) Asked(req *acp.PermissionRequest) {
	o.do(func() {
		o.t.asks = slices.DeleteFunc(o.t.asks, func(a openAsk) bool { return a.req == req && a.q == nil })
	})
}

func (o turnObserver) Elicit(q *acp.ElicitationRequest) {
	o.do(func() {
		o.h.seq++
		o.t.asks = append(o.t.asks, openAsk{id: strconv.FormatUint(o.h.seq, 36), q: q})
	})
}

func (o turnObserver) Elicited(q *acp.ElicitationRequest) {
	o.do(func() {
		o.t.asks = slices.DeleteFunc(o.t.asks, func(a openAsk) bool { return a.q == q })
	})
}

func (o turnObserver) Done(out adapter.Outcome) {
	o.do(func() {
		o.t.unanswered = appendUnanswered(o.t.unanswered, o.t.asks)
		o.t.done, o.t.status, o.t.asks = true, "", nil
		o.t.failed = out.Err != nil && !errors.Is(out.Err, adapter.ErrCancelled)
		if o.t.failed {
			o.h.failedLocked(o.k, o.t, out.Err)
		}
		o.t.outcome = thread.OutcomeText(out)
		o.t.usage = chat.UsageText(out.Usage, out.TurnUsage)
	})
	select {
	case o.h.saveKick <- struct{}{}:
	default:
	}
}

// maxUnanswered bounds the unanswered requests a turn keeps, and
// maxAskRunes what it keeps of each one's title.
const (
	maxUnanswered = 64
	maxAskRunes   = 300
)

// appendUnanswered is to with the requests asks, which can no longer be
// answered, within maxUnanswered.
func appendUnanswered(to []render.Unanswered, asks []openAsk) []render.Unanswered {
	for _, a := range asks {
		if len(to) >= maxUnanswered {
			break
		}
		to = append(to, a.unanswered())
	}
	return to
}

// unanswered is a as a turn shows it once it cannot be answered.
func (a openAsk) unanswered() render.Unanswered {
	if a.q != nil {
		return render.Unanswered{Question: true, Title: excerpt(a.q.Message, maxAskRunes)}
	}
	title := a.req.ToolCall.Title
	if title == "" {
		title = a.req.ToolCall.ToolCallID
	}
	return render.Unanswered{Title: excerpt(title, maxAskRunes)}
}

// do runs f on the turn under the hub's lock, as a change of it.
func (o turnObserver) do(f func()) {
	o.h.change(o.k, func(*threadLog) {
		f()
		o.t.version++
	})
}

// add keeps u, a chunk of text joined to the one before it of its kind.
// A terminal's output, which the broker sends again as it grows, replaces
// the one before it.
func (t *turnLog) add(u acp.Update) {
	size := updateSize(&u)
	if chunk(u) {
		t.addChunk(u, size)
		return
	}
	if u.Terminal != nil && terminalOnly(&u) && !t.cutOther {
		for i := len(t.updates) - 1; i >= 0; i-- {
			o := &t.updates[i]
			if o.Terminal != nil && o.ToolCallID == u.ToolCallID && o.Terminal.ID == u.Terminal.ID && terminalOnly(o) {
				if was := updateSize(o); t.bytes-was+size <= maxTurnBytes {
					t.bytes += size - was
					*o = u
					return
				}
				break
			}
		}
	}
	if t.cutOther || len(t.updates) >= maxTurnUpdates || t.bytes+size > maxTurnBytes {
		t.cut, t.cutOther = true, true
		return
	}
	t.bytes += size
	t.joined = nil
	t.updates = append(t.updates, u)
}

// addChunk keeps u, a chunk of size bytes, joined to the run of chunks
// of its kind it continues.
func (t *turnLog) addChunk(u acp.Update, size int) {
	n := len(t.updates)
	run := t.joined != nil && t.updates[n-1].Kind == u.Kind
	if t.cutText || !run && n >= maxTurnUpdates || t.textBytes+size > maxTurnBytes {
		t.cut, t.cutText = true, true
		return
	}
	t.textBytes += size
	if !run {
		t.joined = &strings.Builder{}
		t.updates = append(t.updates, u)
	}
	// The chunks of a run are written to one builder, whose text is
	// shared, never copied: an answer of many chunks costs its length
	// once.
	t.joined.WriteString(u.Content.Text)
	last := &t.updates[len(t.updates)-1]
	c := *last.Content // the hub's own: the agent's stays as it was
	c.Text = t.joined.String()
	last.Content = &c
}

// updateSize is what the hub counts of u against its bounds: the
// text it holds, wherever it is (a chunk's, a tool call's title, input,
// output, diffs, locations and terminal, a plan's entries, an unknown
// update's JSON).
func updateSize(u *acp.Update) int {
	n := len(u.Raw) + len(u.RawInput)
	if u.Content != nil {
		n += len(u.Content.Text) + len(u.Content.Data) + len(u.Content.URI)
	}
	if u.Title != nil {
		n += len(*u.Title)
	}
	for _, c := range u.ToolOutput {
		n += len(c.Path) + len(c.NewText)
		if c.OldText != nil {
			n += len(*c.OldText)
		}
		if c.Content != nil {
			n += len(c.Content.Text) + len(c.Content.Data)
		}
	}
	for _, l := range u.Locations {
		n += len(l.Path)
	}
	if u.Terminal != nil {
		n += len(u.Terminal.Output)
	}
	for _, e := range u.Entries {
		n += len(e.Content)
	}
	return n
}

// terminalOnly reports whether u is the broker's update of a terminal's
// output alone.
func terminalOnly(u *acp.Update) bool {
	return u.Kind == acp.UpdateToolCallUpdate && u.Title == nil && u.Status == "" && u.ToolOutput == nil &&
		u.RawInput == nil && u.Locations == nil
}

// chunk reports whether u is a chunk of the agent's text or thoughts.
func chunk(u acp.Update) bool {
	return (u.Kind == acp.UpdateMessageChunk || u.Kind == acp.UpdateThoughtChunk) &&
		u.Content != nil && u.Content.Type == "text"
}

// change runs f on k's log under the hub's lock, making the log if it is
// new (the least recently changed one goes when the hub is full), and
// tells k's watchers.
func (h *hub) change(k key, f func(*threadLog)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.threads[k]
	if l == nil {
		if len(h.threads) >= maxThreads {
			h.dropOldestLocked()
		}
		l = &threadLog{key: k}
		h.threads[k] = l
	}
	f(l)
	l.changed = h.now()
	l.version++
	if h.saving {
		h.dirty[k] = true
	}
	h.ws.notify(k)
}

func (h *hub) dropOldestLocked() {
	var oldest *threadLog
	for _, l := range h.threads {
		if oldest == nil || l.changed.Before(oldest.changed) {
			oldest = l
		}
	}
	if oldest != nil {
		delete(h.threads, oldest.key)
	}
}

// ThreadInfo is a thread as the list shows it.
type ThreadInfo struct {
	Platform, Thread string
	Title, Author    string
	State            string // running, waiting for permission, queued, idle, failed
	Waiting          bool   // a permission request is open
	Changed          time.Time
	StarterID        string
}

// list is every thread the hub keeps, the most recently changed first.
func (h *hub) list() []ThreadInfo {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]ThreadInfo, 0, len(h.threads))
	for _, l := range h.threads {
		in := ThreadInfo{Platform: l.platform, Thread: l.thread, Changed: l.changed, State: "idle"}
		if len(l.turns) > 0 {
			first, last := l.turns[0], l.turns[len(l.turns)-1]
			in.Title, in.Author, in.StarterID = excerpt(first.start.Prompt, 90), first.start.Author, first.start.AuthorID
			for _, t := range l.turns {
				if len(t.asks) > 0 {
					in.Waiting = true
				}
			}
			switch {
			case in.Waiting:
				in.State = "waiting for permission"
			case !last.done && (last.phase == adapter.PhaseQueued || last.phase == adapter.PhaseNext):
				in.State = "queued"
			case !last.done:
				in.State = "running"
			case last.failed:
				in.State = "failed"
			}
		}
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b ThreadInfo) int { return b.Changed.Compare(a.Changed) })
	return out
}

// snapshot is a thread's turns as a page shows them, with the
// permission requests open, and the log's version.
type snapshot struct {
	Turns []turnShot
	Asks  []askShot
	// Running: a turn is not done; Version is the log's.
	Running bool
	Version uint64
}

type turnShot struct {
	Seq, Version uint64
	Turn         *render.Turn
	// Ref is the chat's message of the turn (thread.TurnStart.Ref).
	Ref string
}

type askShot struct {
	ID, Title, Input string
	Options          []acp.PermissionOption
	// Question is set for a question: its message, and its form's
	// fields or its URL.
	Question *questionShot
}

type questionShot struct {
	Message, URL string
	Fields       []fieldShot
}

// fieldShot is a form field as the page asks it.
type fieldShot struct {
	Name, Label, Description string
	Kind                     string // text, number, boolean, select, multiselect
	Required                 bool
	Value                    string
	Options                  []acp.ElicitationOption
}

// question is q as the page shows it.
func question(q *acp.ElicitationRequest) *questionShot {
	out := &questionShot{Message: q.Message}
	if q.Mode == acp.ElicitURL {
		out.URL = q.URL
		return out
	}
	if q.Schema == nil {
		return out
	}
	for i := range q.Schema.Fields {
		f := &q.Schema.Fields[i]
		fs := fieldShot{Name: "f:" + f.Key, Label: f.Label(), Description: f.Description, Required: f.Required, Options: f.Options}
		switch f.Kind {
		case acp.FieldNumber, acp.FieldInteger:
			fs.Kind = "number"
		case acp.FieldBoolean:
			fs.Kind = "boolean"
		case acp.FieldSelect:
			fs.Kind = "select"
		case acp.FieldMultiSelect:
			fs.Kind = "multiselect"
		default:
			fs.Kind = "text"
		}
		if f.Default != nil {
			fs.Value = fmt.Sprint(f.Default)
		}
		out.Fields = append(out.Fields, fs)
	}
	return out
}

// snapshot copies k's turns for rendering; ok false if the hub keeps
// none of k.
func (h *hub) snapshot(k key) (snapshot, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.threads[k]
	if l == nil {
		return snapshot{}, false
	}
	s := snapshot{Version: l.version}
	for _, t := range l.turns {
		rt := &render.Turn{Prompt: t.start.Prompt, Author: t.start.Author, Started: t.start.Started,
			Updates: slices.Clone(t.updates), Notices: slices.Clone(t.notices), Status: t.status,
			Done: t.done, Outcome: t.outcome, Usage: t.usage, Dir: t.dir, Unanswered: slices.Clone(t.unanswered)}
		if t.cut {
			rt.Notices = append(rt.Notices, "The rest of this turn's updates are too many to keep here; the chat has them.")
		}
		s.Turns = append(s.Turns, turnShot{Seq: t.seq, Version: t.version, Turn: rt, Ref: t.start.Ref})
		for _, a := range t.asks {
			if a.q != nil {
				s.Asks = append(s.Asks, askShot{ID: a.id, Question: question(a.q)})
				continue
			}
			title := a.req.ToolCall.Title
			if title == "" {
				title = a.req.ToolCall.ToolCallID
			}
			s.Asks = append(s.Asks, askShot{ID: a.id, Title: render.InDirWords(t.dir, title),
				Input: render.InDirWords(t.dir, string(a.req.ToolCall.RawInput)), Options: a.req.Options})
		}
		if !t.done {
			s.Running = true
		}
	}
	return s, true
}

// open is the open request of k (a permission request or a question)
// the page names id; its req or q is nil when it is none of that kind.
func (h *hub) open(k key, id string) openAsk {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.threads[k]
	if l == nil {
		return openAsk{}
	}
	for _, t := range l.turns {
		for _, a := range t.asks {
			if a.id == id {
				return a
			}
		}
	}
	return openAsk{}
}

// excerpt collapses s's whitespace and cuts it to n runes.
func excerpt(s string, n int) string {
	r := []rune(s)
	if len(r) > n {
		r = append(r[:n-1], '…')
	}
	out := make([]rune, 0, len(r))
	space := false
	for _, c := range r {
		if c == ' ' || c == '\n' || c == '\t' || c == '\r' {
			space = true
			continue
		}
		if space && len(out) > 0 {
			out = append(out, ' ')
		}
		space = false
		out = append(out, c)
	}
	return string(out)
}

// failedLocked keeps the failure of k's turn t, for cause; the oldest
// kept goes past maxFailures. The hub's lock is held.
func (h *hub) failedLocked(k key, t *turnLog, cause error) {
	f := Failure{Platform: k.platform, Thread: k.thread, Prompt: excerpt(t.start.Prompt, 90), At: h.now(), Cause: excerpt(cause.Error(), maxCauseRunes)}
	if l := h.threads[k]; l != nil && len(l.turns) > 0 {
		f.Title = excerpt(l.turns[0].start.Prompt, 90)
	}
	if len(h.failures) >= maxFailures {
		h.failures = slices.Delete(h.failures, 0, len(h.failures)-maxFailures+1)
	}
	h.failures = append(h.failures, f)
	h.failuresDirty = true
}

// recentFailures are the failed turns kept, the newest first.
func (h *hub) recentFailures() []Failure {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := slices.Clone(h.failures)
	slices.Reverse(out)
	return out
}
