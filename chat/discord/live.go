package discord

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat"

	"github.com/bwmarrin/discordgo"
)

// pieceLimit is the most characters one answer message holds (Discord
// allows 2,000; the margin covers a closing code fence).
const pieceLimit = 1950

// turnSink shows one prompt's turn in its thread: the answer as it
// streams, edited in place and split across messages, a status reaction
// on the user's message, and the typing indicator while the agent works.
// All Discord calls happen on one goroutine the Client owns, so the
// engine's calls never wait on Discord.
type turnSink struct {
	c     *Client
	conv  *conversation
	msg   *discordgo.Message // the user's message
	wake  chan struct{}      // the view changed
	react chan struct{}      // the reaction changed
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
	reaction          string
	outcome           *adapter.Outcome
	refusal           string
	// The final view and the final reaction each went out: the thread
	// shows the outcome once both have.
	viewShown, reactionShown bool
	shownIn                  string // the message showing the outcome

	// set once by run when the turn has ended: what goes with the final
	// view as files, and what could not
	loaded    bool
	files     []attachment
	fileNotes []string

	// after is closed once the thread's turn before this one has shown
	// its end; shownAll once this one has (run closes it as it returns).
	after, shownAll chan struct{}

	// owned by run
	posted  []posted
	applied string // the reaction on the user's message
}

type posted struct {
	id, content string
}

var _ adapter.Sink = (*turnSink)(nil)

func newTurnSink(c *Client, conv *conversation, m *discordgo.Message) *turnSink {
	s := &turnSink{c: c, conv: conv, msg: m, wake: make(chan struct{}, 1), react: make(chan struct{}, 1), start: time.Now(),
		shownAll: make(chan struct{})}
	// The thread shows its turns in order: this one's messages wait
	// until the one before has shown how it ended (or gave up).
	c.mu.Lock()
	s.after, conv.lastSink = conv.lastSink, s.shownAll
	c.mu.Unlock()
	s.tr.ShowThoughts = c.acl().ShowThoughts
	s.tr.Limits = c.attachLimits()
	c.spawn(s.run)
	c.reactions.Go(s.reactions)
	return s
}

func (s *turnSink) poke() {
	for _, ch := range []chan struct{}{s.wake, s.react} {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Status implements adapter.Sink.
func (s *turnSink) Status(st adapter.Status) {
	s.mu.Lock()
	switch st.Phase {
	case adapter.PhaseQueued:
		s.reaction = emojiQueued
	case adapter.PhaseWaitingForSlot:
		s.status = "-# ⏳ " + st.Text
	case adapter.PhaseWorking:
		s.reaction, s.working, s.status = emojiWorking, true, ""
		s.tr.Dir = st.Dir
	case adapter.PhaseCancelling:
		s.status = "-# ⏹️ " + st.Text
	}
	s.version++
	s.mu.Unlock()
	s.poke()
}

// Update implements adapter.Sink.
func (s *turnSink) Update(u acp.Update) {
	if u.Kind == acp.UpdateSessionInfo && u.Title != nil {
		s.c.retitle(s.conv.thread, *u.Title)
	}
	s.mu.Lock()
	changed := s.tr.Add(u)
	if changed {
		s.version++
		s.said = true
	}
	s.mu.Unlock()
	if changed {
		s.poke()
	}
}

// Notice implements adapter.Sink.
func (s *turnSink) Notice(text string) {
	s.mu.Lock()
	s.tr.Notice(text)
	s.version++
	s.said = true
	s.mu.Unlock()
	s.poke()
}

// Done implements adapter.Sink.
func (s *turnSink) Done(o adapter.Outcome) {
	s.mu.Lock()
	s.outcome = &o
	s.working = false
	switch {
	case o.Err == nil:
		s.reaction = emojiDone
	case errors.Is(o.Err, adapter.ErrCancelled):
		s.reaction = emojiCancelled
	default:
		s.reaction = emojiFailed
	}
	s.version++
	s.mu.Unlock()
	s.poke()
}

// refused ends a prompt the engine did not take, saying why.
func (s *turnSink) refused(err error) {
	s.mu.Lock()
	s.refusal = "⚠️ " + err.Error()
	s.reaction = emojiFailed
	s.version++
	s.mu.Unlock()
	s.poke()
}

// view is what the thread should show now.
type view struct {
	pieces  []string
	final   bool
	working bool
	body    bool                 // the agent has said something (not only a status)
	files   map[int][]attachment // by piece: the full answer, or the agent's files
}

// view is what the thread should show now: made again only when it
// changed. While the turn runs only the start of the answer is rendered,
// as much as the messages hold, so a long answer costs each edit no more
// than a short one; the final view renders all that is kept of it.
func (s *turnSink) view() view {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cached != nil && s.cachedAt == s.version {
		return *s.cached
	}
	v := s.makeView()
	s.cached, s.cachedAt = &v, s.version
	return v
}

func (s *turnSink) makeView() view {
	v := view{working: s.working}
	if s.refusal != "" {
		v.final = true
		v.pieces = []string{s.refusal}
		return v
	}
	max := s.c.cfg.MaxMessages
	var body string
	if s.outcome != nil {
		body = s.tr.Render()
	} else {
		// One piece more than is shown tells that the answer goes on.
		body, _ = s.tr.RenderHead((max + 1) * pieceLimit * utf8.UTFMax)
	}
	v.body = strings.TrimSpace(body) != ""
	footer := s.status
	if s.outcome != nil {
		v.final = true
		footer = s.footer(*s.outcome)
	}
	if strings.TrimSpace(body) == "" && footer == "" {
		return v // nothing to show yet
	}
	// The agent's files go on a message of their own, the last, which
	// then carries the footer.
	withFiles := v.final && (len(s.files) > 0 || len(s.fileNotes) > 0)
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
		total, clipped := s.tr.AnswerLen()
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
		parts := cutParts(body, s.c.cfg.MaxFileBytes)
		v.files = make(map[int][]attachment, len(parts)+1)
		for k, part := range parts {
			a := attachment{name: "answer.md", ctype: "text/markdown", data: part}
			note := fmt.Sprintf("-# … %s attached as answer.md.", what)
			if len(parts) > 1 {
				a.name = fmt.Sprintf("answer-%d.md", k+1)
				note = fmt.Sprintf("-# … %s attached in %d parts; this is %s.", what, len(parts), a.name)
			}
			if k == len(parts)-1 && !withFiles {
				note += "\n" + footer
			}
			v.files[len(v.pieces)] = []attachment{a}
			v.pieces = append(v.pieces, note)
		}
	}
	if withFiles {
		if v.files == nil {
			v.files = map[int][]attachment{}
		}
		v.files[len(v.pieces)] = s.files
		v.pieces = append(v.pieces, filesPiece(s.files, s.fileNotes, footer))
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

func outcomeFooter(o adapter.Outcome) string {
	took := o.Elapsed.Round(time.Second)
	if o.Elapsed < time.Second {
		took = o.Elapsed.Round(time.Millisecond)
	}
	// One line of subtext: an agent's stderr tail may hold many.
	summary := excerpt(o.Summary(), 400)
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
func (s *turnSink) footer(o adapter.Outcome) string {
	line := outcomeFooter(o)
	if u := chat.UsageText(o.Usage, o.TurnUsage); u != "" {
		line += " · " + u
	}
	return line
}

// run makes the thread show the latest view, one Discord call at a time:
// streaming updates at least EditInterval apart (updates that arrive
// meanwhile are coalesced, never dropped), the final view as soon as
// Discord's limit of 5 message calls per 5s in a channel allows, a 429
// waited out, the typing indicator
// renewed while the agent works. It returns once the final view is shown,
// or when the Client gives up at shutdown.
func (s *turnSink) run() {
	c := s.c
	defer close(s.shownAll)
	if s.after != nil {
		select {
		case <-s.after:
		case <-c.ctx.Done():
			return
		}
	}
	var lastTyping time.Time
	var calls window
	shown := false // something the agent said is on screen
	failures := 0  // in a row; a success starts the count again
	for {
		s.attach()
		v := s.view()
		if i, edit := s.next(v.pieces); i >= 0 {
			// The final view, and the agent's first words (perhaps after a
			// status line), go out as soon as Discord allows; the rest
			// keeps the pace.
			urgent := v.final || (v.body && !shown)
			if wait := calls.wait(time.Now(), c.cfg.EditInterval, urgent); wait > 0 {
				// Woken early by news (the turn may have ended, and the
				// final view need not keep the pace), it looks again.
				if !s.pause(wait, shown) {
					return
				}
				continue
			}
			err := s.show(i, edit, v.pieces[i], v.files[i])
			if wait, limited := retryAfter(err); limited {
				if !c.sleep(c.ctx, wait) {
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
			if c.ctx.Err() != nil {
				return
			}
			if edit && notFound(err) {
				// The message being edited was deleted: the answer goes on
				// in a new one from here.
				c.log.Info().Str("thread", s.conv.thread).Int("piece", i).Msg("answer message gone; continuing in a new one")
				s.forget(i)
				continue
			}
			failures++
			c.log.Warn().Err(err).Str("thread", s.conv.thread).Int("failures", failures).Msg("answer message not shown")
			if failures >= posterTries && v.final {
				s.shown(true, s.lost(v, err))
				return
			}
			// Streaming goes on however long Discord fails; each failure
			// waits a little longer, up to posterBackoffMax.
			if !s.pause(min(posterBackoff<<min(failures-1, 6), posterBackoffMax), shown) {
				return
			}
			continue
		}
		if v.final {
			where := ""
			if n := len(v.pieces); n > 0 && n <= len(s.posted) {
				where = s.posted[n-1].id // the last piece carries the outcome
			}
			s.shown(true, where)
			return
		}
		if !s.idle(v.working, &lastTyping) {
			return
		}
	}
}

// The poster's patience with failing Discord calls (other than 429s,
// which are waited out): the final view is given up after posterTries
// failures in a row; between failures it waits posterBackoff, doubling up
// to posterBackoffMax.
const (
	posterTries      = 5
	posterBackoff    = 250 * time.Millisecond
	posterBackoffMax = 5 * time.Second
)

// forget drops the messages from piece i on, the first of which was
// deleted: the pieces are posted again as new messages, and the later
// old ones (now out of order) are deleted, as far as Discord lets.
func (s *turnSink) forget(i int) {
	c := s.c
	for _, p := range s.posted[i+1:] {
		err := c.call(c.ctx, func(opts ...discordgo.RequestOption) error {
			return c.s.ChannelMessageDelete(s.conv.thread, p.id, opts...)
		})
		if err != nil && !notFound(err) {
			c.log.Debug().Err(err).Str("thread", s.conv.thread).Msg("stale answer message not deleted")
		}
	}
	s.posted = s.posted[:i]
}

// lost says, by any means left, that the final view could not be shown:
// a new message with the whole answer attached, else a ⚠️ on the user's
// message. It is counted and logged either way. It returns the id of
// the message that says so, if one could be posted.
func (s *turnSink) lost(v view, cause error) string {
	c := s.c
	c.mu.Lock()
	c.stats.LostAnswers++
	c.mu.Unlock()
	full := strings.Join(v.pieces, "\n")
	c.log.Error().Err(cause).Str("thread", s.conv.thread).Int("chars", len(full)).Msg("answer could not be shown in full")
	note := fmt.Sprintf("⚠️ Discord kept failing while this answer was being shown (%v); the whole answer is attached.", excerpt(cause.Error(), 200))
	m, err := c.send(c.ctx, s.conv.thread, &discordgo.MessageSend{Content: note, AllowedMentions: noMentions,
		Files: []*discordgo.File{{Name: "answer.md", ContentType: "text/markdown", Reader: strings.NewReader(full)}}})
	if err == nil {
		return m.ID
	}
	c.log.Error().Err(err).Str("thread", s.conv.thread).Msg("answer could not be attached either; marking the message")
	c.react(s.msg.ChannelID, s.msg.ID, emojiLost)
	return ""
}

// shown records that the final view (view, in message where) or the
// final reaction went out, and once both have, tells the engine that the
// thread shows the turn's outcome (said in words when the final view
// itself could not be posted), and where. A broker killed before then
// reports the turn at its next start, and Report finds what the thread
// already shows.
func (s *turnSink) shown(view bool, where string) {
	s.mu.Lock()
	if view {
		s.viewShown, s.shownIn = true, where
	} else {
		s.reactionShown = true
	}
	o, both, in := s.outcome, s.viewShown && s.reactionShown, s.shownIn
	s.mu.Unlock()
	if both && o != nil && o.Shown != nil {
		o.Shown(in)
	}
}

// attach reads the files the agent showed, once the turn has ended:
// where they go is known only then, and nothing is read twice.
func (s *turnSink) attach() {
	s.mu.Lock()
	if s.loaded || s.outcome == nil {
		s.mu.Unlock()
		return
	}
	s.loaded = true
	dir, atts := s.tr.Dir, s.tr.Attachments()
	s.mu.Unlock()
	if len(atts) == 0 {
		return
	}
	files, notes := loadAttachments(dir, atts, int64(s.c.cfg.MaxFileBytes))
	s.mu.Lock()
	s.files, s.fileNotes = files, notes
	s.version++
	s.mu.Unlock()
}

// pause waits d, or less if the view changes in a way that may not wait:
// the turn ended, or the agent said its first words while nothing of
// theirs is shown; false when the Client is giving up. Other changes
// wait, so that an agent streaming fast costs a view per pause, not per
// update.
func (s *turnSink) pause(d time.Duration, shown bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return true
		case <-s.wake:
			s.mu.Lock()
			urgent := s.outcome != nil || s.refusal != "" || (s.said && !shown)
			s.mu.Unlock()
			if urgent {
				return true
			}
		case <-s.c.ctx.Done():
			return false
		}
	}
}

// idle waits for news, renewing the typing indicator while the agent
// works. It reports false when the Client is giving up.
func (s *turnSink) idle(working bool, lastTyping *time.Time) bool {
	c := s.c
	var typing <-chan time.Time
	if working {
		due := c.cfg.TypingInterval - time.Since(*lastTyping)
		if lastTyping.IsZero() || due <= 0 {
			s.typing()
			*lastTyping = time.Now()
			due = c.cfg.TypingInterval
		}
		t := time.NewTimer(due)
		defer t.Stop()
		typing = t.C
	}
	select {
	case <-s.wake:
	case <-typing:
	case <-c.ctx.Done():
		return false
	}
	return true
}

// next finds the first piece that is not shown as it should be: its index
// and whether an existing message is edited (else a new one is sent).
func (s *turnSink) next(pieces []string) (int, bool) {
	for i, p := range pieces {
		if i >= len(s.posted) {
			return i, false
		}
		if s.posted[i].content != p {
			return i, true
		}
	}
	return -1, false
}

var noMentions = &discordgo.MessageAllowedMentions{}

// show sends or edits piece i; the agent's text never pings anyone.
func (s *turnSink) show(i int, edit bool, piece string, attach []attachment) error {
	c := s.c
	var files []*discordgo.File
	for _, a := range attach {
		files = append(files, &discordgo.File{Name: a.name, ContentType: a.ctype, Reader: strings.NewReader(a.data)})
	}
	return c.call(c.ctx, func(opts ...discordgo.RequestOption) error {
		if edit {
			e := discordgo.NewMessageEdit(s.conv.thread, s.posted[i].id).SetContent(piece)
			e.AllowedMentions = noMentions
			e.Files = files
			if _, err := c.s.ChannelMessageEditComplex(e, opts...); err != nil {
				return err
			}
			s.posted[i].content = piece
			return nil
		}
		m, err := c.s.ChannelMessageSendComplex(s.conv.thread, &discordgo.MessageSend{Content: piece, AllowedMentions: noMentions, Files: files}, opts...)
		if err != nil {
			return err
		}
		s.posted = append(s.posted, posted{id: m.ID, content: piece})
		return nil
	})
}

// reactions keeps the status reaction on the user's message in step with
// the turn, apart from the answer: reactions in a busy channel queue behind
// each other (Discord allows about one per 250ms there), and the answer
// must not wait for them. States passed over meanwhile are skipped.
func (s *turnSink) reactions() {
	failures := 0
	for {
		s.mu.Lock()
		want, final := s.reaction, s.outcome != nil || s.refusal != ""
		s.mu.Unlock()
		if want != s.applied {
			err := s.setReaction(want)
			if err != nil && final && !notFound(err) && failures+1 < posterTries {
				// The final reaction is the one left for good: a failure
				// is tried again, a little later each time.
				failures++
				if !s.c.sleep(s.c.decor, posterBackoff<<(failures-1)) {
					return
				}
				continue
			}
			s.applied = want // a reaction on the way is decoration
			continue
		}
		if final {
			s.shown(false, "")
			return
		}
		select {
		case <-s.react:
		case <-s.c.decor.Done():
			return
		}
	}
}

// setReaction takes the applied status reaction off and puts emoji on.
func (s *turnSink) setReaction(emoji string) error {
	if s.applied != "" {
		if err := s.c.unreact(s.msg.ChannelID, s.msg.ID, s.applied); err != nil && !notFound(err) {
			return err
		}
		s.applied = ""
	}
	if emoji == "" {
		return nil
	}
	if err := s.c.react(s.msg.ChannelID, s.msg.ID, emoji); err != nil {
		return err
	}
	s.applied = emoji
	return nil
}

func (s *turnSink) typing() {
	err := s.c.call(s.c.ctx, func(opts ...discordgo.RequestOption) error {
		return s.c.s.ChannelTyping(s.conv.thread, opts...)
	})
	if err != nil {
		s.c.log.Debug().Err(err).Msg("typing indicator not sent")
	}
}

// Ask implements adapter.Sink: see permission.go.
func (s *turnSink) Ask(ctx context.Context, req *acp.PermissionRequest) adapter.Answer {
	return s.c.ask(ctx, s.conv, req)
}

// Discord's limit on message calls in one channel.
const (
	channelBurst  = 5
	channelWindow = 5 * time.Second
)

// window remembers when the last message calls were made.
type window struct {
	at []time.Time // the last channelBurst calls, oldest first
}

func (w *window) add(t time.Time) {
	w.at = append(w.at, t)
	if len(w.at) > channelBurst {
		w.at = w.at[1:]
	}
}

// wait is how long to hold the next call: a streaming update keeps pace
// apart from the last call; any call waits for room in Discord's window.
func (w *window) wait(now time.Time, pace time.Duration, final bool) time.Duration {
	var d time.Duration
	if n := len(w.at); n > 0 && !final {
		d = pace - now.Sub(w.at[n-1])
	}
	if len(w.at) == channelBurst {
		d = max(d, channelWindow-now.Sub(w.at[0]))
	}
	return max(d, 0)
}
