package thread

import (
	"context"
	"encoding/json"
	"time"
)

// conversation is a thread the broker opened: its messages are prompts
// for one agent session.
type conversation struct {
	thread  string // the engine's thread key, and where its messages are
	channel string // the channel it was opened in
	// starter is the user who started it, who may act on it; empty while
	// unknown. It and unsure are guarded by Server.mu once the
	// conversation is shared.
	starter string
	unsure  bool      // the last lookup of the starter failed for a passing reason
	used    time.Time // its last message or command; guarded by Server.mu
	// agent is the profile the thread was opened with ("": its channel's
	// or the default); the engine keeps the one its first prompt names.
	agent string
	// lastSink is closed once the thread's latest turn has shown its end
	// (its turnSink's shown; see link); guarded by Server.mu.
	lastSink chan struct{}
	// approvers may answer its requests besides those who may act on
	// any thread (a schedule's); guarded by Server.mu.
	approvers []string
	// fresh: the broker opened it and no turn has shown in it yet (its
	// first message carries the Open in browser button); guarded by
	// Server.mu.
	fresh bool
}

// convSweepEvery spaces the sweeps of forgotten conversations: a sweep
// walks them all, so it runs at most this often on the way of new ones.
const convSweepEvery = time.Minute

// keepLocked records conv as used now (adding it to the conversations if
// it is new) and reports whether the conversations are due a sweep.
func (s *Server) keepLocked(conv *conversation) (sweep bool) {
	now := time.Now()
	conv.used = now
	s.convs[conv.thread] = conv
	if now.Sub(s.swept) < min(s.cfg.ForgetAfter, convSweepEvery) {
		return false
	}
	s.swept = now
	return true
}

// sweep forgets conversations idle longer than ForgetAfter whose thread
// has no turn running or queued. Called outside s.mu: the engine is asked
// about each candidate without the Server's lock held.
func (s *Server) sweep() {
	s.mu.Lock()
	cutoff := time.Now().Add(-s.cfg.ForgetAfter)
	var idle []*conversation
	for _, conv := range s.convs {
		if conv.used.Before(cutoff) {
			idle = append(idle, conv)
		}
	}
	s.mu.Unlock()
	for _, conv := range idle {
		if st := s.engine.Status(conv.thread); st.Busy || st.Queued > 0 {
			continue
		}
		s.mu.Lock()
		if s.convs[conv.thread] == conv && conv.used.Before(cutoff) {
			delete(s.convs, conv.thread)
		}
		s.mu.Unlock()
	}
}

// conversation is the conversation of thread where, known or adopted
// again; nil if where is none of the bot's threads.
func (s *Server) conversation(where string) *conversation {
	s.mu.Lock()
	conv := s.convs[where]
	if conv != nil {
		conv.used = time.Now()
	}
	s.mu.Unlock()
	if conv != nil {
		return conv
	}
	return s.adoptThread(s.ctx, where)
}

// startThread opens a thread from message id in channel, started by
// starter with agent ("": the channel's or the default), and keeps it.
func (s *Server) startThread(ctx context.Context, channel, id, name, starter, agent string) (*conversation, error) {
	var thread string
	err := s.try(ctx, 10, func(ctx context.Context) (err error) {
		thread, err = s.p.OpenThread(ctx, channel, id, name)
		return err
	})
	if err != nil {
		return nil, err
	}
	conv := &conversation{thread: thread, channel: channel, starter: starter, agent: agent, fresh: true}
	s.mu.Lock()
	sweep := s.keepLocked(conv)
	s.mu.Unlock()
	if sweep {
		s.sweep()
	}
	s.remember(conv)
	s.log.Info().Str("thread", thread).Str("user", starter).Str("name", name).Str("agent", agent).Msg("conversation started")
	return conv, nil
}

// adoptThread recognises a thread the broker opened before it restarted
// (or forgot): Platform.Thread says it is the bot's. One in a channel no
// longer allowed is recognised too, so that what is sent there is
// refused in words, as it is before a restart; every use of a
// conversation checks its channel against the access lists in force.
// Its starter is the one the broker recorded when it opened the thread
// or, failing that, Platform.Starter's.
func (s *Server) adoptThread(ctx context.Context, where string) *conversation {
	var channel string
	err := s.try(ctx, 3, func(ctx context.Context) (err error) {
		channel, err = s.p.Thread(ctx, where)
		return err
	})
	if err != nil {
		return nil
	}
	recorded := s.recorded(where)
	conv := &conversation{thread: where, channel: channel, starter: recorded.Starter, agent: recorded.Agent, approvers: recorded.Approvers}
	if conv.starter == "" {
		conv.starter, conv.unsure = s.lookupStarter(ctx, channel, where)
	}
	s.mu.Lock()
	known := s.convs[where]
	sweep := false
	if known == nil {
		sweep = s.keepLocked(conv)
	}
	s.mu.Unlock()
	if known != nil {
		return known
	}
	if sweep {
		s.sweep()
	}
	if !conv.unsure {
		s.remember(conv) // never a passing failure over what is recorded
	}
	return conv
}

// Looking up a thread's starter: a failure other than "no such message"
// is tried again, starterRetry apart and doubling, starterLookups times in
// all; the Server's end interrupts the waits.
const (
	starterLookups = 3
	starterRetry   = 500 * time.Millisecond
)

// lookupStarter finds who started thread. unsure reports a failure that
// may pass (a 5xx, a timeout, rate limits): the starter is then unknown
// for now, not for good.
func (s *Server) lookupStarter(ctx context.Context, channel, thread string) (starter string, unsure bool) {
	wait := starterRetry
	for try := 1; ; try++ {
		var user string
		err := s.try(ctx, 3, func(ctx context.Context) (err error) {
			user, err = s.p.Starter(ctx, channel, thread)
			return err
		})
		switch {
		case err == nil:
			return user, false
		case notFound(err):
			return "", false // deleted: only approvers may act on it
		}
		s.log.Warn().Err(err).Str("thread", thread).Int("try", try).Msg("thread starter not found; only approvers may act on it meanwhile")
		if try == starterLookups || !s.sleep(ctx, wait) {
			return "", true
		}
		wait *= 2
	}
}

// resolveStarter tries again to find the starter of a conversation whose
// last lookup failed for a passing reason.
func (s *Server) resolveStarter(ctx context.Context, conv *conversation) {
	s.mu.Lock()
	unsure := conv.unsure
	s.mu.Unlock()
	if !unsure {
		return
	}
	starter, unsure := s.lookupStarter(ctx, conv.channel, conv.thread)
	s.mu.Lock()
	if conv.starter == "" {
		conv.starter = starter
	}
	conv.unsure = unsure
	s.mu.Unlock()
	if !unsure {
		s.remember(conv)
	}
}

// Conversation says where thread was opened (its channel) and who
// started it ("" while unknown), as the Server knows the conversation or
// Memory kept it; ok is false for a thread it knows neither way. It asks
// the platform nothing.
func (s *Server) Conversation(thread string) (channel, starter string, ok bool) {
	s.mu.Lock()
	conv := s.convs[thread]
	if conv != nil {
		channel, starter = conv.channel, conv.starter
	}
	s.mu.Unlock()
	if conv != nil {
		return channel, starter, true
	}
	r := s.recorded(thread)
	return r.Channel, r.Starter, r.Channel != ""
}

// starterOf is the conversation's starter, or "" while it is unknown.
func (s *Server) starterOf(conv *conversation) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return conv.starter
}

// Memory keeps the conversations across restarts (the state store is
// one): a record per thread, opaque to it. A Server takes every record
// ThreadChats gives for its own (and SetAccess judges their channels):
// a broker of several platforms gives each Server the records of its
// platform's threads alone.
type Memory interface {
	PutThreadChat(thread string, record json.RawMessage)
	ThreadChat(thread string) (json.RawMessage, bool)
	ThreadChats() map[string]json.RawMessage
}

// record is a conversation as Memory keeps it.
type record struct {
	Channel   string   `json:"parent"`
	Starter   string   `json:"starter"`
	Agent     string   `json:"agent,omitempty"`
	Approvers []string `json:"approvers,omitempty"`
}

func (s *Server) remember(conv *conversation) {
	if s.cfg.Memory == nil {
		return
	}
	s.mu.Lock() // the starter may be found meanwhile
	r := record{Channel: conv.channel, Starter: conv.starter, Agent: conv.agent, Approvers: conv.approvers}
	s.mu.Unlock()
	b, _ := json.Marshal(r)
	s.cfg.Memory.PutThreadChat(conv.thread, b)
}

// recorded is what Memory kept of thread (empty if nothing).
func (s *Server) recorded(thread string) record {
	var r record
	if s.cfg.Memory == nil {
		return r
	}
	if kept, ok := s.cfg.Memory.ThreadChat(thread); ok && len(kept) > 0 && json.Unmarshal(kept, &r) != nil {
		return record{}
	}
	return r
}

// recall loads the conversations Memory kept.
func (s *Server) recall() {
	if s.cfg.Memory == nil {
		return
	}
	for thread, kept := range s.cfg.Memory.ThreadChats() {
		var r record
		if len(kept) == 0 || json.Unmarshal(kept, &r) != nil || r.Channel == "" {
			continue
		}
		s.keepLocked(&conversation{thread: thread, channel: r.Channel, starter: r.Starter, agent: r.Agent, approvers: r.Approvers})
	}
}
