package thread

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat"
)

// pieceMargin is what an answer's message keeps under the platform's
// MessageRunes: room for a code fence closed at a cut.
const pieceMargin = 50

// turnSink shows one prompt's turn in its thread: the answer as it
// streams, edited in place and split across messages, a status mark on
// the prompt's message, and the typing indicator while the agent works.
// All platform calls happen on goroutines the Server owns, so the
// engine's calls never wait on the platform.
type turnSink struct {
	s     *Server
	conv  *conversation
	at    Origin        // the prompt's message, which shows the status
	wake  chan struct{} // the view changed
	react chan struct{} // the mark changed
	start time.Time

	mu sync.Mutex
	tr chat.Transcript
	// version counts the changes to what the view shows; cached is the
	// view made at cachedAt, reused until the next change.
	version, cachedAt uint64
	cached            *view
	said              bool   // the agent has said something to show
	status            string // a line under the answer while the turn runs
	working           bool
	mark              Mark // the status mark the prompt should show
	outcome           *adapter.Outcome
	refusal           string
	// The final view and the final mark each went out: the thread shows
	// the outcome once both have.
	viewShown, markShown bool
	shownIn              string // the message showing the outcome

	// set once by run when the turn has ended: what goes with the final
	// view as files, and what could not
	loaded    bool
	files     []File
	fileNotes []string

	// after is closed once the thread's turn before this one has shown
	// its end; shownAll once this one has (run closes it as it returns).
	// Turns are put in that order as they start (see link), which a
	// message sent next makes other than the order they were written in;
	// linked is closed once this one is.
	after, shownAll chan struct{}
	linked          chan struct{}
	linkOnce        sync.Once
	// stop is the action id of the Cancel button its messages carry
	// while the turn runs ("": none; see Config.CancelButton).
	stop string

	// The prompt as submitted, and its author: for Send now and Remove.
	prompt *adapter.Prompt
	from   User
	// sentNext: the prompt goes next, the running turn interrupted for
	// it; started: the agent has it. While it waits, a note under it
	// offers Send now (see note.go).
	sentNext, started bool
	noteOnce          sync.Once
	noteWake          chan struct{}
	// noteKey keys its note's actions while the note is up (guarded by
	// Server.mu); noteShown is closed once a turn that never started
	// shows its end on its note, noteID.
	noteKey   string
	noteShown chan struct{}
	noteID    string
	// noteRunning: the note's goroutine was started (guarded by mu);
	// noteDone is closed once it has returned (or could not start).
	noteRunning bool
	noteDone    chan struct{}

	// owned by run
	posted []posted
	// owned by marks
	applied Mark // the mark on the prompt's message
}

type posted struct {
	id, text string
	stop     bool // it carries the Cancel button
}

var _ adapter.Sink = (*turnSink)(nil)

func newTurnSink(s *Server, conv *conversation, at Origin) *turnSink {
	t := &turnSink{s: s, conv: conv, at: at, wake: make(chan struct{}, 1), react: make(chan struct{}, 1), start: time.Now(),
		shownAll: make(chan struct{}), noteWake: make(chan struct{}, 1), noteShown: make(chan struct{}), noteDone: make(chan struct{}), linked: make(chan struct{})}
	s.mu.Lock()
	s.marking++
	if s.cfg.CancelButton {
		s.permSeq++
		t.stop = stopPrefix + strconv.FormatUint(s.permSeq, 36)
		s.stops[t.stop] = t
	}
	s.mu.Unlock()
	t.tr.ShowThoughts = s.acl().ShowThoughts
	t.tr.Limits = s.attachLimits()
	s.wg.Go(t.run)
	s.reactions.Go(t.marks)
	return t
}

// link puts the turn in its thread's order of turns, once: with chain,
// its messages wait until the turn before it (the last one linked) has
// shown how it ended (or gave up); without, they go out at once. A turn
// is linked as it starts (its first status past waiting, or its end):
// the engine runs a thread's turns one at a time, so that is the order
// they ran in.
func (t *turnSink) link(chain bool) {
	t.linkOnce.Do(func() {
		s := t.s
		s.mu.Lock()
		if chain {
			t.after, t.conv.lastSink = t.conv.lastSink, t.shownAll
		}
		s.mu.Unlock()
		close(t.linked)
	})
}

func (t *turnSink) poke() {
	for _, ch := range []chan struct{}{t.wake, t.react, t.noteWake} {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Status implements adapter.Sink.
func (t *turnSink) Status(st adapter.Status) {
	if st.Phase != adapter.PhaseQueued && st.Phase != adapter.PhaseNext {
		t.link(true)
	}
	t.mu.Lock()
	note := false
	switch st.Phase {
	case adapter.PhaseQueued:
		t.mark, note = MarkQueued, true
	case adapter.PhaseNext:
		t.mark, t.sentNext, note = MarkQueued, true, true
	case adapter.PhaseWaitingForSlot:
		t.status = "-# ⏳ " + st.Text
	case adapter.PhaseWorking:
		t.mark, t.working, t.status, t.started = MarkWorking, true, "", true
		t.tr.Dir = st.Dir
	case adapter.PhaseCancelling:
		t.status = "-# ⏹️ " + st.Text
	}
	t.version++
	t.mu.Unlock()
	if note {
		t.startNote()
	}
	t.poke()
}

// Update implements adapter.Sink.
func (t *turnSink) Update(u acp.Update) {
	if u.Kind == acp.UpdateSessionInfo && u.Title != nil {
		t.s.retitle(t.conv.thread, *u.Title)
	}
	t.mu.Lock()
	changed := t.tr.Add(u)
	if changed {
		t.version++
		t.said = true
	}
	t.mu.Unlock()
	if changed {
		t.poke()
	}
}

// Notice implements adapter.Sink.
func (t *turnSink) Notice(n adapter.Notice) {
	t.mu.Lock()
	t.tr.Notice(chat.NoticeText(n))
	t.version++
	t.said = true
	t.mu.Unlock()
	t.poke()
}

// Done implements adapter.Sink.
func (t *turnSink) Done(o adapter.Outcome) {
	t.link(true)
	t.mu.Lock()
	t.outcome = &o
	t.working = false
	switch {
	case o.Err == nil:
		t.mark = MarkDone
	case errors.Is(o.Err, adapter.ErrCancelled):
		t.mark = MarkCancelled
	default:
		t.mark = MarkFailed
	}
	t.version++
	t.mu.Unlock()
	t.poke()
}

// refused ends a prompt the engine did not take, saying why.
func (t *turnSink) refused(err error) {
	t.link(false) // said at once: it is no turn
	t.mu.Lock()
	t.refusal = "⚠️ " + err.Error()
	t.mark = MarkFailed
	t.version++
	t.mu.Unlock()
	t.poke()
}

// Ask implements adapter.Sink: see permission.go.
func (t *turnSink) Ask(ctx context.Context, req *acp.PermissionRequest) adapter.Answer {
	return t.s.ask(ctx, t.conv, req)
}

// Elicit implements adapter.Elicitor: see elicit.go.
func (t *turnSink) Elicit(ctx context.Context, req *acp.ElicitationRequest) adapter.ElicitAnswer {
	return t.s.elicit(ctx, t.conv, req)
}

var _ adapter.Elicitor = (*turnSink)(nil)

// view is what the thread should show now.
type view struct {
	pieces  []string
	final   bool
	working bool
	body    bool           // the agent has said something (not only a status)
	files   map[int][]File // by piece: the full answer, or the agent's files
	stop    bool           // the last piece carries the Cancel button
}

// view is what the thread should show now: made again only when it
// changed. While the turn runs only the start of the answer is rendered,
// as much as the messages hold, so a long answer costs each edit no more
// than a short one; the final view renders all that is kept of it.
func (t *turnSink) view() view {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cached != nil && t.cachedAt == t.version {
		return *t.cached
	}
	v := t.makeView()
	t.cached, t.cachedAt = &v, t.version
	return v
}

func (t *turnSink) makeView() view {
	v := view{working: t.working}
	if t.refusal != "" {
		v.final = true
		v.pieces = []string{t.refusal}
		return v
	}
	max := t.s.cfg.MaxMessages
	pieceLimit := t.s.lim.MessageRunes - pieceMargin
	var body string
	if t.outcome != nil {
		body = t.tr.Render()
	} else {
		// One piece more than is shown tells that the answer goes on.
		body, _ = t.tr.RenderHead((max + 1) * pieceLimit * utf8.UTFMax)
	}
	v.body = strings.TrimSpace(body) != ""
	footer := t.status
	if t.outcome != nil {
		v.final = true
		footer = t.footer(*t.outcome)
	}
	v.stop = t.stop != "" && !v.final
	if strings.TrimSpace(body) == "" && footer == "" {
		return v // nothing to show yet
	}
	// The agent's files go on a message of their own, the last, which
	// then carries the footer.
	withFiles := v.final && (len(t.files) > 0 || len(t.fileNotes) > 0)
	text := strings.TrimRight(body, "\n")
	if footer != "" && !withFiles {
		if text != "" {
			text += "\n"
		}
		text += footer
	}
	if text != "" {
		v.pieces = chat.Split(text, pieceLimit)
	}
	if withFiles && max > 1 {
		max--
	}
	if len(v.pieces) > max {
		v.pieces = v.pieces[:max-1]
		total, clipped := t.tr.AnswerLen()
		if !v.final {
			if clipped {
				v.pieces = append(v.pieces, fmt.Sprintf("-# … the answer continues (%s so far); its start and its end will be attached when the turn ends.", chat.Bytes(total)))
			} else {
				v.pieces = append(v.pieces, "-# … the answer continues; it will be attached in full when the turn ends.")
			}
			return v
		}
		// The whole answer (what is kept of it) goes as a file; one too
		// big for a message goes in parts, one per message, the footer on
		// the last.
		what := fmt.Sprintf("the full answer (%d characters) is", utf8.RuneCountInString(body))
		if clipped {
			what = fmt.Sprintf("the answer is %s: its start and its end are", chat.Bytes(total))
		}
		parts := cutParts(body, t.s.cfg.MaxFileBytes)
		v.files = make(map[int][]File, len(parts)+1)
		for k, part := range parts {
			f := File{Name: "answer.md", Type: "text/markdown", Data: part}
			note := fmt.Sprintf("-# … %s attached as answer.md.", what)
			if len(parts) > 1 {
				f.Name = fmt.Sprintf("answer-%d.md", k+1)
				note = fmt.Sprintf("-# … %s attached in %d parts; this is %s.", what, len(parts), f.Name)
			}
			if k == len(parts)-1 && !withFiles {
				note += "\n" + footer
			}
			v.files[len(v.pieces)] = []File{f}
			v.pieces = append(v.pieces, note)
		}
	}
	if withFiles {
		if v.files == nil {
			v.files = map[int][]File{}
		}
		v.files[len(v.pieces)] = t.files
		v.pieces = append(v.pieces, filesPiece(t.files, t.fileNotes, footer))
	}
	return v
}

// cutParts cuts text into parts of at most max bytes, at a line break
// where there is one in the second half of a part, else at a rune
// boundary.
func cutParts(text string, max int) []string {
	var parts []string
	for len(text) > max {
		cut := max
		if nl := strings.LastIndexByte(text[:max], '\n'); nl >= max/2 {
			cut = nl + 1
		} else {
			for cut > 0 && !utf8.RuneStart(text[cut]) {
				cut--
			}
		}
		parts = append(parts, text[:cut])
		text = text[cut:]
	}
	return append(parts, text)
}

// An answer's footer mark for a turn that ended without a final answer
// (a refusal, a turn cut short), and the start of the status line shown
// while a turn is being stopped (adapter.PhaseCancelling's text).
const (
	emojiFinishedOther = "☑️"
	stoppingPrefix     = "stopping:"
)

func outcomeFooter(o adapter.Outcome) string {
	took := o.Elapsed.Round(time.Second)
	if o.Elapsed < time.Second {
		took = o.Elapsed.Round(time.Millisecond)
	}
	// One line of small print: an agent's stderr tail may hold many.
	summary := excerpt(o.Summary(), 400)
	if o.Elapsed == 0 && o.Err != nil {
		// It never started (removed from the queue, the broker stopping).
		if errors.Is(o.Err, adapter.ErrCancelled) {
			return "-# ⏹️ " + summary
		}
		return "-# ❌ " + summary
	}
	switch {
	case errors.Is(o.Err, adapter.ErrCancelled):
		return fmt.Sprintf("-# ⏹️ %s after %s", summary, took)
	case o.Err != nil:
		return fmt.Sprintf("-# ❌ %s (after %s)", summary, took)
	case o.StopReason == acp.StopEndTurn && strings.TrimSpace(o.Text) != "":
		return fmt.Sprintf("-# ✅ done in %s", took)
	default:
		return fmt.Sprintf("-# %s %s (after %s)", emojiFinishedOther, summary, took)
	}
}

// footer is the line under a turn's answer: how it ended (its start is
// what tells a finished answer), then the agent's usage.
func (t *turnSink) footer(o adapter.Outcome) string {
	line := outcomeFooter(o)
	if u := chat.UsageText(o.Usage, o.TurnUsage); u != "" {
		line += " · " + u
	}
	return line
}

// run makes the thread show the latest view, one platform call at a
// time: streaming updates at least EditInterval apart (updates that
// arrive meanwhile are coalesced, never dropped), the final view as soon
// as the platform's Burst per Window allows, a rate limit waited out,
// the typing indicator renewed while the agent works. It returns once
// the final view is shown, or when the Server gives up at shutdown.
func (t *turnSink) run() {
	s := t.s
	defer close(t.shownAll)
	if t.stop != "" {
		defer func() {
			s.mu.Lock()
			delete(s.stops, t.stop)
			s.mu.Unlock()
		}()
	}
	select {
	case <-t.linked:
	case <-s.ctx.Done():
		return
	}
	if t.after != nil {
		select {
		case <-t.after:
		case <-t.noteShown:
			// A message that never reached the agent shows its end on
			// its note; the thread's order is kept for the turns after.
			t.shown(true, t.noteID)
			select {
			case <-t.after:
			case <-s.ctx.Done():
			}
			return
		case <-s.ctx.Done():
			return
		}
	}
	select {
	case <-t.noteShown:
		t.shown(true, t.noteID)
		return
	default:
	}
	var lastTyping time.Time
	calls := window{burst: s.lim.Burst, per: s.lim.Window}
	shown := false // something the agent said is on screen
	failures := 0  // in a row; a success starts the count again
	for {
		t.attach()
		v := t.view()
		if v.final && len(t.posted) == 0 {
			if id, ok := t.awaitNote(); ok {
				t.shown(true, id)
				return
			}
		}
		if i, edit := t.next(v); i >= 0 {
			// The final view, and the agent's first words (perhaps after a
			// status line), go out as soon as the platform allows; the
			// rest keeps the pace.
			urgent := v.final || (v.body && !shown)
			if wait := calls.wait(time.Now(), s.cfg.EditInterval, urgent); wait > 0 {
				// Woken early by news (the turn may have ended, and the
				// final view need not keep the pace), it looks again.
				if !t.pause(wait, shown) {
					return
				}
				continue
			}
			err := t.show(i, edit, v, i == len(v.pieces)-1)
			if wait, limited := retryAfter(err); limited {
				if !s.sleep(s.ctx, wait) {
					return
				}
				continue
			}
			calls.add(time.Now())
			if err == nil {
				failures = 0
				shown = shown || v.body
				continue
			}
			if s.ctx.Err() != nil {
				return
			}
			if edit && notFound(err) {
				// The message being edited was deleted: the answer goes on
				// in a new one from here.
				s.log.Info().Str("thread", t.conv.thread).Int("piece", i).Msg("answer message gone; continuing in a new one")
				t.forget(i)
				continue
			}
			failures++
			s.log.Warn().Err(err).Str("thread", t.conv.thread).Int("failures", failures).Msg("answer message not shown")
			if failures >= posterTries && v.final {
				t.shown(true, t.lost(v, err))
				return
			}
			// Streaming goes on however long the platform fails; each
			// failure waits a little longer, up to posterBackoffMax.
			if !t.pause(min(posterBackoff<<min(failures-1, 6), posterBackoffMax), shown) {
				return
			}
			continue
		}
		if v.final {
			where := ""
			if n := len(v.pieces); n > 0 && n <= len(t.posted) {
				where = t.posted[n-1].id // the last piece carries the outcome
			}
			t.shown(true, where)
			return
		}
		if !t.idle(v.working, &lastTyping) {
			return
		}
	}
}

// awaitNote waits, for a turn that ended without starting while its
// note is up, for the note to show the turn's end or give up, so that
// the end is shown once; it reports whether the note shows it, and
// which message that is.
func (t *turnSink) awaitNote() (string, bool) {
	t.mu.Lock()
	running, started := t.noteRunning, t.started
	t.mu.Unlock()
	if running && !started {
		select {
		case <-t.noteShown:
		case <-t.noteDone:
		case <-t.s.ctx.Done():
		}
	}
	select {
	case <-t.noteShown:
		return t.noteID, true
	default:
		return "", false
	}
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

// forget drops the messages from piece i on, the first of which was
// deleted: the pieces are posted again as new messages, and the later
// old ones (now out of order) are deleted, as far as the platform lets.
func (t *turnSink) forget(i int) {
	s := t.s
	for _, p := range t.posted[i+1:] {
		if err := s.p.Delete(s.ctx, t.conv.thread, p.id); err != nil && !notFound(err) {
			s.log.Debug().Err(err).Str("thread", t.conv.thread).Msg("stale answer message not deleted")
		}
	}
	t.posted = t.posted[:i]
}

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

// shown records that the final view (view, in message where) or the
// final mark went out, and once both have, tells the engine that the
// thread shows the turn's outcome (said in words when the final view
// itself could not be posted), and where. A broker killed before then
// reports the turn at its next start, and Report finds what the thread
// already shows.
func (t *turnSink) shown(view bool, where string) {
	t.mu.Lock()
	if view {
		t.viewShown, t.shownIn = true, where
	} else {
		t.markShown = true
	}
	o, both, in := t.outcome, t.viewShown && t.markShown, t.shownIn
	t.mu.Unlock()
	if both && o != nil && o.Shown != nil {
		o.Shown(in)
	}
}

// attach reads the files the agent showed, once the turn has ended:
// where they go is known only then, and nothing is read twice.
func (t *turnSink) attach() {
	t.mu.Lock()
	if t.loaded || t.outcome == nil {
		t.mu.Unlock()
		return
	}
	t.loaded = true
	dir, atts := t.tr.Dir, t.tr.Attachments()
	t.mu.Unlock()
	if len(atts) == 0 {
		return
	}
	files, notes := loadAttachments(dir, atts, int64(t.s.cfg.MaxFileBytes), t.s.lim)
	t.mu.Lock()
	t.files, t.fileNotes = files, notes
	t.version++
	t.mu.Unlock()
}

// pause waits d, or less if the view changes in a way that may not wait:
// the turn ended, or the agent said its first words while nothing of
// theirs is shown; false when the Server is giving up. Other changes
// wait, so that an agent streaming fast costs a view per pause, not per
// update.
func (t *turnSink) pause(d time.Duration, shown bool) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	for {
		select {
		case <-tm.C:
			return true
		case <-t.wake:
			t.mu.Lock()
			urgent := t.outcome != nil || t.refusal != "" || (t.said && !shown)
			t.mu.Unlock()
			if urgent {
				return true
			}
		case <-t.s.ctx.Done():
			return false
		}
	}
}

// idle waits for news, renewing the typing indicator while the agent
// works. It reports false when the Server is giving up.
func (t *turnSink) idle(working bool, lastTyping *time.Time) bool {
	s := t.s
	var typing <-chan time.Time
	if working && s.typer != nil {
		due := s.cfg.TypingInterval - time.Since(*lastTyping)
		if lastTyping.IsZero() || due <= 0 {
			if err := s.typer.Typing(s.ctx, t.conv.thread); err != nil {
				s.log.Debug().Err(err).Msg("typing indicator not sent")
			}
			*lastTyping = time.Now()
			due = s.cfg.TypingInterval
		}
		tm := time.NewTimer(due)
		defer tm.Stop()
		typing = tm.C
	}
	select {
	case <-t.wake:
	case <-typing:
	case <-s.ctx.Done():
		return false
	}
	return true
}

// next finds the first piece of v that is not shown as it should be (its
// text, and the Cancel button on the last while the turn runs): its
// index and whether an existing message is edited (else a new one is
// sent).
func (t *turnSink) next(v view) (int, bool) {
	for i, p := range v.pieces {
		if i >= len(t.posted) {
			return i, false
		}
		stop := v.stop && i == len(v.pieces)-1
		if t.posted[i].text != p || t.posted[i].stop != stop {
			return i, true
		}
	}
	return -1, false
}

// show posts or edits piece i of v (one platform call); last: it is the
// view's last piece, which says how the turn ended when v is final, and
// carries the Cancel button while it is not.
func (t *turnSink) show(i int, edit bool, v view, last bool) error {
	s := t.s
	piece, stop := v.pieces[i], v.stop && last
	out := View{Text: piece, Files: v.files[i], Outcome: v.final && last}
	if stop {
		out.Actions = []Action{{ID: t.stop, Label: "Cancel", Style: Danger}}
	}
	if edit {
		if err := s.p.Edit(s.ctx, t.conv.thread, t.posted[i].id, out); err != nil {
			return err
		}
		t.posted[i].text, t.posted[i].stop = piece, stop
		return nil
	}
	id, err := s.p.Post(s.ctx, t.conv.thread, out)
	if err != nil {
		return err
	}
	t.posted = append(t.posted, posted{id: id, text: piece, stop: stop})
	return nil
}

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
	t.mu.Lock()
	ended := t.outcome != nil || t.refusal != ""
	t.mu.Unlock()
	starter := s.starterOf(t.conv)
	switch {
	case ended:
		s.tell(c.Reply, "This turn is no longer running.")
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

// marks keeps the status mark on the prompt's message in step with the
// turn, apart from the answer: marks in a busy channel may queue behind
// each other, and the answer must not wait for them. States passed over
// meanwhile are skipped.
func (t *turnSink) marks() {
	s := t.s
	defer func() {
		s.mu.Lock()
		s.marking--
		s.mu.Unlock()
	}()
	failures := 0
	for {
		t.mu.Lock()
		want, final := t.mark, t.outcome != nil || t.refusal != ""
		t.mu.Unlock()
		if want != t.applied {
			err := t.setMark(want)
			if err != nil && final && !notFound(err) && failures+1 < posterTries {
				// The final mark is the one left for good: a failure is
				// tried again, a little later each time.
				failures++
				if !s.sleep(s.decor, posterBackoff<<(failures-1)) {
					return
				}
				continue
			}
			t.applied = want // a mark on the way is decoration
			continue
		}
		if final {
			t.shown(false, "")
			return
		}
		select {
		case <-t.react:
		case <-s.decor.Done():
			return
		}
	}
}

// setMark takes the applied status mark off and puts mark on.
func (t *turnSink) setMark(mark Mark) error {
	s := t.s
	if t.applied != 0 {
		if err := s.mark(t.at.Where, t.at.ID, t.applied, false); err != nil && !notFound(err) {
			s.log.Debug().Err(err).Stringer("mark", t.applied).Msg("mark not taken off")
			return err
		}
		t.applied = 0
	}
	if mark == 0 {
		return nil
	}
	if err := s.mark(t.at.Where, t.at.ID, mark, true); err != nil {
		s.log.Debug().Err(err).Stringer("mark", mark).Msg("mark not put")
		return err
	}
	t.applied = mark
	return nil
}

// window remembers when the last message calls of an answer were made,
// to keep within the platform's burst per window.
type window struct {
	burst int
	per   time.Duration
	at    []time.Time // the last burst calls, oldest first
}

func (w *window) add(t time.Time) {
	w.at = append(w.at, t)
	if len(w.at) > w.burst {
		w.at = w.at[1:]
	}
}

// wait is how long to hold the next call: a streaming update keeps pace
// apart from the last call; any call waits for room in the platform's
// window.
func (w *window) wait(now time.Time, pace time.Duration, final bool) time.Duration {
	var d time.Duration
	if n := len(w.at); n > 0 && !final {
		d = pace - now.Sub(w.at[n-1])
	}
	if len(w.at) == w.burst {
		d = max(d, w.per-now.Sub(w.at[0]))
	}
	return max(d, 0)
}
