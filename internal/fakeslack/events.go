package fakeslack

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"
)

// EnvelopeType is what Slack sends an app: an Events API event, an
// interaction, or a slash command.
type EnvelopeType string

const (
	EventsAPI     EnvelopeType = "events_api"
	Interactive   EnvelopeType = "interactive"
	SlashCommands EnvelopeType = "slash_commands"
)

// Envelope is one thing the fake sent the app, over Socket Mode or HTTP,
// and what became of it.
type Envelope struct {
	ID   string
	Type EnvelopeType
	// Kind is the event's type (app_mention, message, reaction_added…,
	// with its subtype after a slash: message/message_changed), the
	// interaction's type (block_actions, view_submission, view_closed),
	// or the command (/ask).
	Kind    string
	EventID string
	// Payload is the envelope's payload: the event callback, the
	// interaction, or the command's fields.
	Payload  json.RawMessage
	Created  time.Time
	Attempts []Attempt
	// Acked is set once the app acknowledged it in time (over HTTP: a 200
	// within Options.AckTimeout); AckPayload is what came with the
	// acknowledgement (over HTTP: the response body).
	Acked      bool
	AckedAt    time.Time
	AckPayload json.RawMessage
	// AckError says what was wrong with the acknowledgement's payload: a
	// response_action Slack would refuse, or a command's answer it could
	// not show.
	AckError string
	// Failed is set when the fake gave up: an interaction or command not
	// acknowledged in time (the user saw an error), or an event whose
	// retries were spent or refused (X-Slack-No-Retry).
	Failed bool
	// LateAcks counts acknowledgements that came past their deadline.
	LateAcks int
}

// Attempt is one delivery of an envelope.
type Attempt struct {
	At time.Time
	// Retry is the retry_attempt (X-Slack-Retry-Num): 0 the first time.
	Retry int
	// Conn is the Socket Mode connection it went on (numbered from 1), 0
	// in HTTP mode; URL the Request URL it was posted to.
	Conn int
	URL  string
	// Status is the HTTP status the app answered (HTTP mode).
	Status  int
	Latency time.Duration
	Acked   bool
	// Reason says why it failed: timeout (Socket Mode), http_timeout,
	// http_error, connection_failed or unknown_error (HTTP).
	Reason string
	// Header and Body are the HTTP request as sent, for Replay.
	Header http.Header
	Body   []byte
}

type envState int

const (
	envPending envState = iota // to be sent at due (or when a connection opens)
	envSent                    // awaiting its acknowledgement
	envSettled                 // acknowledged or given up
)

type envelope struct {
	Envelope
	state    envState
	due      time.Time
	deadline time.Time // Socket Mode: the acknowledgement's
	retries  int
	reason   string // why the last attempt failed, for the next retry
	// onAck runs (under the lock) when the app acknowledges in time, with
	// the acknowledgement's payload; it returns what is wrong with it.
	onAck func(payload json.RawMessage) string
}

func (e *envelope) snapshot() Envelope {
	out := e.Envelope
	out.Attempts = slices.Clone(e.Attempts)
	return out
}

// Envelopes returns the envelopes sent (or waiting to be), oldest first
// (with Options.MaxEnvelopes, only the latest settled ones).
func (s *Server) Envelopes() []Envelope {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Envelope, len(s.envelopes))
	for i, e := range s.envelopes {
		out[i] = e.snapshot()
	}
	return out
}

// Envelope returns an envelope.
func (s *Server) Envelope(id string) (Envelope, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.envByID[id]
	if !ok {
		return Envelope{}, false
	}
	return e.snapshot(), true
}

// EnvelopesOf returns the envelopes of a kind (app_mention,
// block_actions, /ask…).
func (s *Server) EnvelopesOf(kind string) []Envelope {
	var out []Envelope
	for _, e := range s.Envelopes() {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// Pending returns how many envelopes are neither acknowledged nor given
// up.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.active)
}

// AwaitAck waits until an envelope is acknowledged or given up, and
// returns it; it fails the test on timeout.
func (s *Server) AwaitAck(id string) Envelope {
	s.tb.Helper()
	var e Envelope
	s.Await("envelope "+id+" settled", func() bool {
		var ok bool
		e, ok = s.Envelope(id)
		return ok && (e.Acked || e.Failed)
	})
	return e
}

// newEnvelopeLocked records an envelope and sends it.
func (s *Server) newEnvelopeLocked(typ EnvelopeType, kind, eventID string, payload any, now time.Time) *envelope {
	raw, _ := json.Marshal(payload)
	e := &envelope{Envelope: Envelope{
		ID:      randomUUID(),
		Type:    typ,
		Kind:    kind,
		EventID: eventID,
		Payload: raw,
		Created: now,
	}}
	s.envelopes = append(s.envelopes, e)
	s.envByID[e.ID] = e
	s.active[e.ID] = e
	s.queue = append(s.queue, e)
	s.trimEnvelopesLocked()
	s.deliverLocked(e, now)
	s.notifyLocked()
	return e
}

func randomUUID() string {
	h := randomHex(16)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// trimEnvelopesLocked keeps the settled envelopes within
// Options.MaxEnvelopes.
func (s *Server) trimEnvelopesLocked() {
	n := s.opts.MaxEnvelopes
	if n <= 0 || len(s.envelopes) <= 2*n {
		return
	}
	drop := len(s.envelopes) - n
	kept := s.envelopes[:0:0]
	for i, e := range s.envelopes {
		if i < drop && e.state == envSettled {
			delete(s.envByID, e.ID)
			continue
		}
		kept = append(kept, e)
	}
	s.envelopes = kept
}

// deliverLocked makes one attempt at an envelope: over HTTP, or on a
// Socket Mode connection. With no connection ready an event waits for
// one, while an interaction or a command fails.
func (s *Server) deliverLocked(e *envelope, now time.Time) {
	if s.closed {
		return
	}
	if s.endpoints != nil {
		s.postLocked(e, now)
		return
	}
	c := s.pickConnLocked()
	if c == nil && e.Type != EventsAPI {
		s.giveUpLocked(e) // the user sees an error at once
		return
	}
	if c == nil {
		e.state, e.due = envPending, now
		return
	}
	frame := map[string]any{
		"envelope_id":              e.ID,
		"type":                     string(e.Type),
		"payload":                  json.RawMessage(e.Payload),
		"accepts_response_payload": e.Type == SlashCommands || e.Kind == "view_submission",
	}
	if e.retries > 0 {
		frame["retry_attempt"] = e.retries
		frame["retry_reason"] = e.reason
	}
	data, _ := json.Marshal(frame)
	c.push(outFrame{kind: frameText, data: data})
	e.state = envSent
	e.deadline = now.Add(s.opts.AckTimeout)
	e.Attempts = append(e.Attempts, Attempt{At: now, Retry: e.retries, Conn: c.id})
	s.wakeScheduler()
}

func (s *Server) wakeScheduler() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// ackLocked takes the app's acknowledgement of an envelope.
func (s *Server) ackLocked(id string, payload json.RawMessage, now time.Time) {
	e := s.envByID[id]
	if e == nil {
		s.sockStats.UnknownAcks++
		return
	}
	if e.state == envSent && s.endpoints == nil && now.After(e.deadline) {
		s.attemptFailedLocked(e, "timeout", false, now)
	}
	if e.state != envSent {
		if e.Acked {
			s.sockStats.DuplicateAcks++
		} else {
			e.LateAcks++
			s.sockStats.LateAcks++
		}
		return
	}
	s.sockStats.Acks++
	s.settleAckLocked(e, payload, now)
}

// settleAckLocked settles an envelope acknowledged in time and does what
// its acknowledgement says.
func (s *Server) settleAckLocked(e *envelope, payload json.RawMessage, now time.Time) {
	e.Acked, e.AckedAt, e.AckPayload = true, now, payload
	if n := len(e.Attempts); n > 0 {
		e.Attempts[n-1].Acked = true
		e.Attempts[n-1].Latency = now.Sub(e.Attempts[n-1].At)
	}
	s.settleLocked(e)
	if e.onAck != nil {
		e.AckError = e.onAck(payload)
	}
}

func (s *Server) settleLocked(e *envelope) {
	e.state = envSettled
	delete(s.active, e.ID)
}

// attemptFailedLocked records a failed attempt and schedules the next
// retry of an event, or gives up.
func (s *Server) attemptFailedLocked(e *envelope, reason string, noRetry bool, now time.Time) {
	if n := len(e.Attempts); n > 0 {
		a := &e.Attempts[n-1]
		a.Reason = reason
		if a.Latency == 0 {
			a.Latency = now.Sub(a.At)
		}
	}
	if e.Type == EventsAPI && !noRetry && e.retries < len(s.opts.RetryDelays) {
		e.state = envPending
		e.due = now.Add(s.opts.RetryDelays[e.retries])
		e.retries++
		e.reason = reason
		s.wakeScheduler()
		return
	}
	s.giveUpLocked(e)
}

func (s *Server) giveUpLocked(e *envelope) {
	e.Failed = true
	s.settleLocked(e)
}

// schedule runs the timers: acknowledgement deadlines, retries, and the
// grace of connections told to disconnect.
func (s *Server) schedule() {
	defer s.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		s.mu.Lock()
		next := s.tickLocked(time.Now())
		s.mu.Unlock()
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		t.Reset(wait)
		select {
		case <-t.C:
		case <-s.wake:
		case <-s.quit:
			return
		}
	}
}

// tickLocked does what is due and returns when to look again (zero:
// when woken).
func (s *Server) tickLocked(now time.Time) time.Time {
	var next time.Time
	later := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	changed := false
	live := s.queue[:0]
	for _, e := range s.queue {
		if e.state != envSettled {
			live = append(live, e)
		}
	}
	clear(s.queue[len(live):])
	s.queue = live
	for _, e := range slices.Clone(s.queue) {
		switch {
		case e.state == envSent && len(e.Attempts) > 0 && e.Attempts[len(e.Attempts)-1].Conn > 0:
			if !now.Before(e.deadline) {
				s.attemptFailedLocked(e, "timeout", false, now)
				changed = true
				if e.state == envPending {
					later(e.due)
				}
			} else {
				later(e.deadline)
			}
		case e.state == envPending:
			if now.Before(e.due) {
				later(e.due)
				continue
			}
			if s.endpoints != nil || s.pickConnLocked() != nil {
				s.deliverLocked(e, now)
				changed = true
				if e.state == envSent && s.endpoints == nil {
					later(e.deadline)
				}
			}
		}
	}
	for _, c := range s.conns {
		if !c.closeAt.IsZero() {
			if !now.Before(c.closeAt) {
				c.push(outFrame{kind: frameAbort})
				c.closeAt = time.Time{}
				changed = true
			} else {
				later(c.closeAt)
			}
		}
	}
	if changed {
		s.notifyLocked()
	}
	return next
}

// subscribedLocked reports whether the app hears an event.
func (s *Server) subscribedLocked(ev map[string]any) bool {
	typ, _ := ev["type"].(string)
	name := typ
	if typ == "message" {
		kind, _ := ev["channel_type"].(string)
		name = "message." + map[string]string{"channel": "channels", "group": "groups", "im": "im", "mpim": "mpim"}[kind]
	}
	return slices.Contains(s.opts.Events, name)
}

// eventChannel returns the conversation an event is about.
func eventChannel(ev map[string]any) string {
	if c, ok := ev["channel"].(string); ok {
		return c
	}
	if c, ok := ev["channel_id"].(string); ok {
		return c
	}
	if it, ok := ev["item"].(map[string]any); ok {
		c, _ := it["channel"].(string)
		return c
	}
	return ""
}

// eventLocked sends an Events API event to the app, if it subscribes to
// it and its bot is in the conversation.
func (s *Server) eventLocked(ev map[string]any) {
	if ch := s.channels[eventChannel(ev)]; ch != nil && ch.BotAbsent {
		return
	}
	if !s.subscribedLocked(ev) {
		return
	}
	now := time.Now()
	typ, _ := ev["type"].(string)
	kind := typ
	if sub, ok := ev["subtype"].(string); ok {
		kind += "/" + sub
	}
	eventID := "Ev" + s.newIDLocked("")
	payload := map[string]any{
		"token":      s.opts.VerificationToken,
		"team_id":    s.team.ID,
		"api_app_id": s.bot.AppID,
		"event":      ev,
		"type":       "event_callback",
		"event_id":   eventID,
		"event_time": now.Unix(),
		"authorizations": []any{map[string]any{
			"enterprise_id": nil, "team_id": s.team.ID, "user_id": s.bot.UserID,
			"is_bot": true, "is_enterprise_install": false,
		}},
		"is_ext_shared_channel": false,
		"event_context":         "4-" + strings.ToLower(randomHex(12)),
	}
	s.newEnvelopeLocked(EventsAPI, kind, eventID, payload, now)
}

// botEventLocked sends an event about what the bot itself did, unless
// Options.NoEcho.
func (s *Server) botEventLocked(ev map[string]any) {
	if !s.opts.NoEcho {
		s.eventLocked(ev)
	}
}

// Redeliver sends an envelope's payload again as a new envelope (a new
// envelope_id; over HTTP, signed anew), as Slack may deliver one thing
// twice, and returns the new envelope's id. What the app's
// acknowledgement of it does is what it did for the first.
func (s *Server) Redeliver(id string) string {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.envByID[id]
	if old == nil {
		s.errorf("Redeliver: no envelope %s", id)
		return ""
	}
	var payload any = old.Payload
	e := s.newEnvelopeLocked(old.Type, old.Kind, old.EventID, payload, time.Now())
	e.onAck = old.onAck
	return e.ID
}

// Resend sends a settled envelope again under its own envelope_id, as a
// Socket Mode connection may see one again; AwaitAck(id) waits for its
// new acknowledgement.
func (s *Server) Resend(id string) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.envByID[id]
	if e == nil || e.state != envSettled {
		s.errorf("Resend: no settled envelope %s", id)
		return
	}
	e.Acked, e.Failed = false, false
	s.active[e.ID] = e
	s.queue = append(s.queue, e)
	s.deliverLocked(e, time.Now())
	s.notifyLocked()
}
