package thread

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat"
)

// pieceMargin is what an answer's message keeps under the platform's
// MessageRunes: room for a code fence closed at a cut.
const pieceMargin = 50

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
func (t *turnView) view() view {
	if t.cached != nil && t.cachedAt == t.version {
		return *t.cached
	}
	v := t.makeView()
	t.cached, t.cachedAt = &v, t.version
	return v
}

func (t *turnView) makeView() view {
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
	v.stop = t.sink.stop != "" && !v.final
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
func (t *turnView) footer(o adapter.Outcome) string {
	line := outcomeFooter(o)
	if u := chat.UsageText(o.Usage, o.TurnUsage); u != "" {
		line += " · " + u
	}
	return line
}

// next finds the first piece of v that is not shown as it should be (its
// text, and the Cancel button on the last while the turn runs): its
// index and whether an existing message is edited (else a new one is
// sent).
func (t *turnView) next(v view) (int, bool) {
	for i, p := range v.pieces {
		if i >= len(t.answer.posted) {
			return i, false
		}
		stop := v.stop && i == len(v.pieces)-1
		if t.answer.posted[i].text != p || t.answer.posted[i].stop != stop {
			return i, true
		}
	}
	return -1, false
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
