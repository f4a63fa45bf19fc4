package thread

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat"
)

// turnSink shows one prompt's turn in its thread: the answer as it
// streams, edited in place and split across messages, a status mark on
// the prompt's message, the typing indicator while the agent works, and
// while the prompt waits, a note under it (see note.go).
//
// One goroutine, run, owns all of it as a turnView. What the engine
// says (Status, Update, Notice, Done) and what the Server says (refused)
// are events sent to run; run makes each platform call on a worker
// whose result comes back as an event, so the engine never waits on the
// platform, and where the turn's end is shown, and which mark is final,
// is decided in one place.
type turnSink struct {
	s    *Server
	conv *conversation
	at   Origin // the prompt's message, which shows the status
	// stop is the action id of the Cancel button its messages carry
	// while the turn runs ("": none; see Config.CancelButton), noteKey
	// the key of its note's actions ("": no note; see note.go). Both are
	// fixed when the sink is made.
	stop, noteKey string
	// The prompt as submitted, and its author, for Send now and Remove:
	// set before the prompt is submitted, read-only after.
	prompt *adapter.Prompt
	from   User
	linked atomic.Bool // the turn has its place in the thread's order: see link
	// obs sees the turn for the web front end (nil: none); set before
	// the prompt is submitted (observe), read-only after. browse is its
	// thread's page, on the first message of a new thread ("": none).
	obs    TurnObserver
	browse string

	// events are for run alone. live ends when run returns: an event sent
	// after that is dropped.
	events chan func(*turnView)
	live   context.Context
	// shown is closed once the turn's end is out (or given up on), or the
	// Server gave up: the thread's next turn shows from then on.
	shown chan struct{}
}

// eventBacklog bounds the events waiting for a turn's run: the engine's
// calls wait while it is full, which run, making no platform call
// itself, empties quickly.
const eventBacklog = 64

var (
	_ adapter.Sink     = (*turnSink)(nil)
	_ adapter.Elicitor = (*turnSink)(nil)
)

func newTurnSink(s *Server, conv *conversation, at Origin) *turnSink {
	live, over := context.WithCancel(s.ctx)
	t := &turnSink{s: s, conv: conv, at: at, events: make(chan func(*turnView), eventBacklog), live: live, shown: make(chan struct{})}
	s.mu.Lock()
	s.marking++
	if s.cfg.CancelButton {
		s.permSeq++
		t.stop = stopPrefix + strconv.FormatUint(s.permSeq, 36)
		s.stops[t.stop] = t
	}
	if s.queue != nil {
		s.permSeq++
		t.noteKey = strconv.FormatUint(s.permSeq, 36)
	}
	if conv.fresh && s.web.ThreadURL != nil {
		t.browse = s.web.ThreadURL(conv.thread)
	}
	conv.fresh = false
	s.mu.Unlock()
	v := &turnView{s: s, sink: t, answer: answerState{calls: window{burst: s.lim.Burst, per: s.lim.Window}}}
	v.tr.ShowThoughts = s.acl().ShowThoughts
	v.tr.Limits = s.attachLimits()
	s.wg.Add(1) // its messages, until they are out: see turnView.release
	s.views.Go(func() { t.run(v, over) })
	return t
}

// send hands f to run, waiting while run's backlog is full, never past
// run's end.
func (t *turnSink) send(f func(*turnView)) {
	select {
	case t.events <- f:
	case <-t.live.Done():
	}
}

// link puts the turn in its thread's order of turns, once: with chain,
// its messages wait until the turn before it (the last one linked) has
// shown how it ended (or gave up); without, they go out at once. A turn
// is linked as it starts (its first status past waiting, or its end):
// the engine runs a thread's turns one at a time, so that is the order
// they ran in; link is called from the engine's calls, in that order,
// not from run. It returns the turn before's shown (nil: none to wait
// for), and whether this call linked the turn.
func (t *turnSink) link(chain bool) (<-chan struct{}, bool) {
	if !t.linked.CompareAndSwap(false, true) {
		return nil, false
	}
	if !chain {
		return nil, true
	}
	s := t.s
	s.mu.Lock()
	after := t.conv.lastSink
	t.conv.lastSink = t.shown
	s.mu.Unlock()
	if after == nil {
		return nil, true
	}
	return after, true
}

// Status implements adapter.Sink.
func (t *turnSink) Status(st adapter.Status) {
	var after <-chan struct{}
	linked := false
	if st.Phase == adapter.PhaseQueued || st.Phase == adapter.PhaseNext {
		t.offerNote()
	} else {
		after, linked = t.link(true)
	}
	if t.obs != nil {
		t.obs.Status(st)
	}
	t.send(func(v *turnView) {
		if linked {
			v.link(after)
		}
		v.onStatus(st)
	})
}

// Update implements adapter.Sink.
func (t *turnSink) Update(u acp.Update) {
	if u.Kind == acp.UpdateSessionInfo && u.Title != nil {
		t.s.retitle(t.conv.thread, *u.Title)
	}
	if t.obs != nil {
		t.obs.Update(u)
	}
	t.send(func(v *turnView) { v.update(u) })
}

// Notice implements adapter.Sink.
func (t *turnSink) Notice(n adapter.Notice) {
	text := chat.NoticeText(n)
	if t.obs != nil {
		t.obs.Notice(text)
	}
	t.send(func(v *turnView) { v.notice(text) })
}

// Done implements adapter.Sink.
func (t *turnSink) Done(o adapter.Outcome) {
	after, linked := t.link(true)
	if t.obs != nil {
		t.obs.Done(o)
	}
	t.send(func(v *turnView) {
		if linked {
			v.link(after)
		}
		v.end(&o, "")
	})
}

// refused ends a prompt the engine did not take, saying why.
func (t *turnSink) refused(err error) {
	t.link(false) // said at once: it is no turn
	t.send(func(v *turnView) {
		v.link(nil)
		v.end(nil, "⚠️ "+err.Error())
	})
}

// Ask implements adapter.Sink: see permission.go.
func (t *turnSink) Ask(ctx context.Context, req *acp.PermissionRequest) adapter.Answer {
	if t.obs != nil {
		t.obs.Ask(req)
		defer t.obs.Asked(req)
	}
	return t.s.ask(ctx, t.conv, req)
}

// Elicit implements adapter.Elicitor: see elicit.go.
func (t *turnSink) Elicit(ctx context.Context, req *acp.ElicitationRequest) adapter.ElicitAnswer {
	if t.obs != nil {
		t.obs.Elicit(req)
		defer t.obs.Elicited(req)
	}
	return t.s.elicit(ctx, t.conv, req)
}

// phase is where a turn's view is in its life; it only goes forward,
// and may pass a phase over.
type phase int

const (
	phaseWaiting  phase = iota // in the thread's queue: its note offers Send now and Remove
	phaseNext                  // it goes next: the running turn is being interrupted for it
	phaseStarting              // out of the queue, not yet with the agent (waiting for an agent slot)
	phaseRunning               // the agent has it: the answer streams
	phaseEnded                 // the outcome (or the refusal) is known: the end is being shown
)

// endPlace is where a turn's end is shown: decided once, when the turn
// has ended and no message of it is on its way.
type endPlace int

const (
	endUndecided endPlace = iota
	endOnAnswer           // the answer's messages (a message posted for it if none is)
	endOnNote             // the note under a message that never reached the agent and posted nothing else
)

// turnView is a turn's view, owned by its run: what the thread should
// show, and what it shows.
type turnView struct {
	s    *Server
	sink *turnSink

	phase   phase
	started bool // the agent had the prompt
	tr      chat.Transcript
	// version counts the changes to what the view shows; cached is the
	// view made at cachedAt, reused until the next change.
	version, cachedAt uint64
	cached            *view
	said              bool   // the agent has said something to show
	status            string // a line under the answer while the turn runs
	working           bool
	outcome           *adapter.Outcome
	refusal           string
	// linked: the turn has its place in the thread's order; after is the
	// shown of the turn before it, until that closes.
	linked bool
	after  <-chan struct{}
	endOn  endPlace

	// The files the agent showed, read once the turn has ended (loading
	// while a worker reads them): they go with the final view.
	loading, loaded bool
	files           []File
	fileNotes       []string

	answer answerState
	note   noteState
	mark   markState
	// workers counts the platform calls on their way; out: the messages
	// are out (the Server's count of them released); reported: the
	// engine was told where the outcome is shown.
	workers       int
	out, reported bool
}

// answerState is the answer's messages.
type answerState struct {
	posted     []posted
	calls      window
	busy       bool // a call is on its way
	shownAny   bool // something the agent said is on screen
	failures   int  // in a row; a success starts the count again
	notBefore  time.Time
	firm       bool // notBefore is a rate limit's, which news does not cut short
	lastTyping time.Time
	done       bool   // the final view is out, or given up on
	shownIn    string // the message showing the outcome
}

type posted struct {
	id, text string
	stop     bool // it carries the Cancel button
}

func (v *turnView) link(after <-chan struct{}) {
	v.linked, v.after = true, after
}

func (v *turnView) onStatus(st adapter.Status) {
	if v.phase == phaseEnded {
		return
	}
	switch st.Phase {
	case adapter.PhaseQueued:
		v.note.wanted = v.sink.noteKey != ""
		v.mark.want = MarkQueued
	case adapter.PhaseNext:
		v.note.wanted = v.sink.noteKey != ""
		v.mark.want = MarkQueued
		v.phase = max(v.phase, phaseNext)
	case adapter.PhaseWaitingForSlot, adapter.PhaseWaitingForHost:
		v.status = "-# ⏳ " + chat.StatusText(st)
		v.phase = max(v.phase, phaseStarting)
	case adapter.PhaseWorking:
		v.mark.want, v.working, v.status, v.started = MarkWorking, true, "", true
		v.tr.Dir = st.Dir
		v.phase = phaseRunning
	case adapter.PhaseCancelling:
		v.status = "-# ⏹️ " + chat.StatusText(st)
		v.phase = max(v.phase, phaseStarting)
	}
	v.version++
}

func (v *turnView) update(u acp.Update) {
	if v.tr.Add(u) {
		v.version++
		v.news(!v.said)
		v.said = true
	}
}

func (v *turnView) notice(text string) {
	v.tr.Notice(text)
	v.version++
	v.news(!v.said)
	v.said = true
}

// end records how the turn ended: its outcome, or why it was refused.
func (v *turnView) end(o *adapter.Outcome, refusal string) {
	if v.phase == phaseEnded {
		return
	}
	v.phase, v.outcome, v.refusal, v.working = phaseEnded, o, refusal, false
	switch {
	case o == nil || o.Err != nil && !errors.Is(o.Err, adapter.ErrCancelled):
		v.mark.want = MarkFailed
	case o.Err == nil:
		v.mark.want = MarkDone
	default:
		v.mark.want = MarkCancelled
	}
	v.version++
	v.news(true)
	if v.sink.stop != "" {
		// Its Cancel button no longer cancels anything.
		v.s.mu.Lock()
		delete(v.s.stops, v.sink.stop)
		v.s.mu.Unlock()
	}
}

// news: the view changed in a way that may not wait (the turn ended,
// or the agent said its first words): a pause after a failure is cut
// short.
func (v *turnView) news(urgent bool) {
	if urgent && !v.answer.firm {
		v.answer.notBefore = time.Time{}
	}
}

// run makes the thread show the turn's view until all of it is settled:
// the end shown once, in one place, and the status mark final; or until
// the Server gives up at shutdown.
func (t *turnSink) run(v *turnView, over context.CancelFunc) {
	s := t.s
	defer v.release(over)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wake := v.act(time.Now())
		if v.settled() {
			return
		}
		var tick <-chan time.Time
		if !wake.IsZero() {
			timer.Reset(time.Until(wake))
			tick = timer.C
		}
		select {
		case f := <-t.events:
			f(v)
		case <-v.after:
			v.after = nil
		case <-tick:
		case <-s.ctx.Done():
			return
		}
		timer.Stop()
	}
}

// act starts the platform calls due now and returns when it should look
// again if nothing happens meanwhile (zero: not before news).
func (v *turnView) act(now time.Time) time.Time {
	v.decide()
	v.attach()
	wake := v.actAnswer(now)
	v.actNote()
	if w := v.actMark(now); !w.IsZero() && (wake.IsZero() || w.Before(wake)) {
		wake = w
	}
	if v.answer.done && !v.out && v.note.settled() {
		v.out = true
		v.s.wg.Done()
	}
	if v.answer.done && v.linked && v.after == nil {
		v.closeShown()
	}
	if v.answer.done && v.mark.done && !v.reported {
		v.reported = true
		if o := v.outcome; o != nil && o.Shown != nil {
			o.Shown(v.answer.shownIn)
		}
	}
	return wake
}

// settled: nothing is left to do or on its way.
func (v *turnView) settled() bool {
	return v.out && v.reported && v.workers == 0 && v.linked && v.after == nil
}

// release lets go of what the turn held, however run ended.
func (v *turnView) release(over context.CancelFunc) {
	over()
	s := v.s
	if !v.out {
		s.wg.Done()
	}
	v.closeShown()
	s.mu.Lock()
	if !v.mark.done {
		s.marking--
	}
	if v.sink.stop != "" {
		delete(s.stops, v.sink.stop)
	}
	if v.sink.noteKey != "" {
		delete(s.notes, v.sink.noteKey)
	}
	s.mu.Unlock()
}

func (v *turnView) closeShown() {
	select {
	case <-v.sink.shown:
	default:
		close(v.sink.shown)
	}
}

// decide says where the turn's end is shown, once it has ended and no
// message that would change that is on its way: on the note when the
// prompt never reached the agent and nothing but the note was posted
// for it, else with the answer. Once decided it does not change, except
// that an end the note could not show goes with the answer.
func (v *turnView) decide() {
	if v.endOn != endUndecided || v.phase != phaseEnded {
		return
	}
	switch {
	case v.started || !v.note.wanted:
		v.endOn = endOnAnswer
	case v.answer.busy || v.note.busy:
		// Wait for what is on its way.
	case len(v.answer.posted) == 0 && v.note.id != "":
		v.endOn = endOnNote
	default:
		v.endOn = endOnAnswer
	}
}

// spawn runs call on a worker and hands what it returns to run as an
// event, unless run has returned by then.
func (v *turnView) spawn(call func() func(*turnView)) {
	v.workers++
	t := v.sink
	v.s.views.Go(func() {
		then := call()
		t.send(func(v *turnView) {
			v.workers--
			then(v)
		})
	})
}

// attach reads the files the agent showed, once the turn has ended:
// where they go is known only then, and nothing is read twice.
func (v *turnView) attach() {
	if v.loaded || v.outcome == nil {
		return
	}
	v.loaded = true
	dir, atts := v.tr.Dir, v.tr.Attachments()
	if len(atts) == 0 {
		return
	}
	v.loading = true
	s := v.s
	v.spawn(func() func(*turnView) {
		files, notes := loadAttachments(dir, atts, int64(s.cfg.MaxFileBytes), s.lim)
		return func(v *turnView) {
			v.loading, v.files, v.fileNotes = false, files, notes
			v.version++
		}
	})
}

// actAnswer keeps the answer's messages in step with the view, one
// platform call at a time: streaming updates at least EditInterval
// apart (updates that arrive meanwhile are coalesced, never dropped),
// the final view as soon as the platform's Burst per Window allows, a
// rate limit waited out, a failure tried again a little later each
// time, the typing indicator renewed while the agent works.
func (v *turnView) actAnswer(now time.Time) time.Time {
	a := &v.answer
	if a.done || a.busy || v.loading || !v.linked || v.endOn == endOnNote {
		return time.Time{}
	}
	if v.phase == phaseEnded && v.endOn == endUndecided {
		return time.Time{} // the note's call comes back first
	}
	if v.after != nil {
		return time.Time{} // the turn before has not shown its end yet
	}
	s := v.s
	// The final view, and the agent's first words (perhaps after a
	// status line), go out as soon as the platform allows; the rest
	// keeps the pace.
	urgent := v.phase == phaseEnded || (v.said && !a.shownAny)
	if now.Before(a.notBefore) {
		return a.notBefore
	}
	if wait := a.calls.wait(now, s.cfg.EditInterval, urgent); wait > 0 {
		return now.Add(wait)
	}
	vw := v.view()
	if i, edit := v.next(vw); i >= 0 {
		v.showPiece(i, edit, vw)
		return time.Time{}
	}
	if vw.final {
		where := ""
		if n := len(vw.pieces); n > 0 && n <= len(a.posted) {
			where = a.posted[n-1].id // the last piece carries the outcome
		}
		a.done, a.shownIn = true, where
		return time.Time{}
	}
	if !vw.working || s.typer == nil {
		return time.Time{}
	}
	if due := a.lastTyping.Add(s.cfg.TypingInterval); !a.lastTyping.IsZero() && now.Before(due) {
		return due
	}
	a.busy = true
	v.spawn(func() func(*turnView) {
		if err := s.typer.Typing(s.ctx, v.sink.conv.thread); err != nil {
			s.log.Debug().Err(err).Msg("typing indicator not sent")
		}
		at := time.Now()
		return func(v *turnView) { v.answer.busy, v.answer.lastTyping = false, at }
	})
	return time.Time{}
}

// showPiece posts or edits piece i of vw on a worker; its result comes
// back to run.
func (v *turnView) showPiece(i int, edit bool, vw view) {
	s, t, a := v.s, v.sink, &v.answer
	last := i == len(vw.pieces)-1
	piece, stop := vw.pieces[i], vw.stop && last
	out := View{Text: piece, Files: vw.files[i], Outcome: vw.final && last}
	if stop {
		out.Actions = []Action{{ID: t.stop, Label: "Cancel", Style: Danger}}
	}
	if i == 0 && t.browse != "" {
		out.Actions = append(out.Actions, Action{Label: "Open in browser", URL: t.browse})
	}
	var id string
	var later []string // the messages after a deleted one
	if edit {
		id = a.posted[i].id
		for _, p := range a.posted[i+1:] {
			later = append(later, p.id)
		}
	}
	a.busy = true
	v.spawn(func() func(*turnView) {
		var err error
		if edit {
			err = s.p.Edit(s.ctx, t.conv.thread, id, out)
			if notFound(err) {
				// The message being edited was deleted: the answer goes
				// on in a new one from here, and the later ones (now out
				// of order) are deleted, as far as the platform lets.
				for _, p := range later {
					if err := s.p.Delete(s.ctx, t.conv.thread, p); err != nil && !notFound(err) {
						s.log.Debug().Err(err).Str("thread", t.conv.thread).Msg("stale answer message not deleted")
					}
				}
			}
		} else {
			id, err = s.p.Post(s.ctx, t.conv.thread, out)
		}
		at := time.Now()
		return func(v *turnView) { v.shownPiece(i, edit, vw, posted{id: id, text: piece, stop: stop}, err, at) }
	})
}

// shownPiece takes the result of showPiece.
func (v *turnView) shownPiece(i int, edit bool, vw view, p posted, err error, at time.Time) {
	s, a := v.s, &v.answer
	a.busy = false
	if wait, limited := retryAfter(err); limited {
		a.notBefore, a.firm = at.Add(wait), true
		return
	}
	a.firm = false
	a.calls.add(at)
	switch {
	case err == nil:
		if edit {
			a.posted[i] = p
		} else {
			a.posted = append(a.posted, p)
		}
		a.failures = 0
		a.shownAny = a.shownAny || vw.body
		return
	case s.ctx.Err() != nil:
		return
	case edit && notFound(err):
		s.log.Info().Str("thread", v.sink.conv.thread).Int("piece", i).Msg("answer message gone; continuing in a new one")
		a.posted = a.posted[:i]
		return
	}
	a.failures++
	s.log.Warn().Err(err).Str("thread", v.sink.conv.thread).Int("failures", a.failures).Msg("answer message not shown")
	if a.failures >= posterTries && vw.final {
		a.busy = true
		v.spawn(func() func(*turnView) {
			id := v.sink.lost(vw, err)
			return func(v *turnView) { v.answer.busy, v.answer.done, v.answer.shownIn = false, true, id }
		})
		return
	}
	// Streaming goes on however long the platform fails; each failure
	// waits a little longer, up to posterBackoffMax, unless news comes.
	a.notBefore = at.Add(min(posterBackoff<<min(a.failures-1, 6), posterBackoffMax))
}

// The poster's patience with failing platform calls (other than rate
// limits, which are waited out): the final view is given up after
// posterTries failures in a row; between failures it waits posterBackoff,
// doubling up to posterBackoffMax.
const (
	posterTries      = 5
	posterBackoff    = 250 * time.Millisecond
	posterBackoffMax = 5 * time.Second
)

// lost says, by any means left, that the final view could not be shown:
// a new message with the whole answer attached, else a lost mark on the
// prompt's message. It is counted and logged either way. It returns the
// id of the message that says so, if one could be posted.
func (t *turnSink) lost(v view, cause error) string {
	s := t.s
	s.count(&s.stats.LostAnswers)
	full := strings.Join(v.pieces, "\n")
	s.log.Error().Err(cause).Str("thread", t.conv.thread).Int("chars", len(full)).Msg("answer could not be shown in full")
	note := fmt.Sprintf("%s %s kept failing while this answer was being shown (%v); the whole answer is attached.", emojiLost, s.lim.Name, excerpt(cause.Error(), 200))
	id, err := s.post(s.ctx, t.conv.thread, View{Text: note, Outcome: true,
		Files: []File{{Name: "answer.md", Type: "text/markdown", Data: full}}})
	if err == nil {
		return id
	}
	s.log.Error().Err(err).Str("thread", t.conv.thread).Msg("answer could not be attached either; marking the message")
	s.markOnce(t.at.Where, t.at.ID, MarkLost)
	return ""
}

// emojiLost starts the message that says a final view could not be
// shown.
const emojiLost = "⚠️"

// stopPrefix starts the action id of a running turn's Cancel button; the
// nonce keeps buttons of an earlier run of the broker from matching.
var stopPrefix = "stop:" + nonce() + ":"

// onStopClick cancels the turn whose Cancel button was clicked, while it
// runs, when the clicker may act on its thread; anyone else is told
// privately. The turn's own view then says who cancelled it.
func (s *Server) onStopClick(c Click) {
	access := s.acl()
	s.mu.Lock()
	t := s.stops[c.Action]
	s.mu.Unlock()
	if t == nil {
		s.tell(c.Reply, "This turn is no longer running.")
		return
	}
	starter := s.starterOf(t.conv)
	switch {
	case !access.channel(t.conv.channel):
		s.tell(c.Reply, "This channel is no longer served by the bot.")
	case !access.mayAct(t.conv.channel, starter, c.From):
		s.log.Info().Str("thread", t.conv.thread).Str("user", c.From.ID).Msg("cancel refused: not the thread's starter or an approver")
		s.tell(c.Reply, whoMayAct(starter)+" can cancel this thread's turn; you can't.")
	case s.engine.Cancel(t.conv.thread, adapter.CancelledBy(c.From.display())):
		s.log.Info().Str("thread", t.conv.thread).Str("user", c.From.ID).Msg("turn cancelled by its Cancel button")
		c.Reply.Ack(s.ctx)
	default:
		s.tell(c.Reply, "Nothing is running in this thread.")
	}
}
