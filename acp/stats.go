package acp

import (
	"reflect"
	"sync/atomic"
)

type stats struct {
	staleResponses atomic.Uint64
	junkLines      atomic.Uint64
	oversizeLines  atomic.Uint64
	lateUpdates    atomic.Uint64
	earlyDropped   atomic.Uint64
	droppedUpdates atomic.Uint64
	badMessages    atomic.Uint64
	refused        atomic.Uint64
	invalid        atomic.Uint64
	unsentAnswers  atomic.Uint64
	unknownOptions atomic.Uint64
	unknownUpdates atomic.Uint64
	unknownContent atomic.Uint64
}

// Stats is a snapshot of a Conn's bookkeeping and counters.
type Stats struct {
	// PendingRequests is the number of our requests awaiting an answer.
	PendingRequests int
	// PendingPermissions is the number of agent permission requests not yet
	// answered.
	PendingPermissions int
	// PendingElicitations is the number of the agent's questions
	// (elicitation/create) not yet answered.
	PendingElicitations int
	// Subscribers is the number of sessions with a turn listening.
	Subscribers int
	// StaleResponses counts responses dropped because no live request had
	// their id (late answers to abandoned requests, unknown ids).
	StaleResponses uint64
	// JunkLines counts output lines that were not JSON-RPC messages.
	JunkLines uint64
	// OversizeLines counts lines skipped for exceeding the size cap.
	OversizeLines uint64
	// LateUpdates counts session updates that arrived with no turn listening.
	LateUpdates uint64
	// EarlyDropped counts updates for sessions not known dropped: none
	// was being created, or they were past the bounds of what is kept
	// until one is.
	EarlyDropped uint64
	// EarlyUpdates and EarlyBytes are the updates for sessions not known
	// yet kept now, and the bytes of their JSON.
	EarlyUpdates, EarlyBytes int
	// DroppedUpdates counts updates dropped because a turn's queue was full.
	DroppedUpdates uint64
	// BadMessages counts well-formed JSON-RPC messages with unusable params.
	BadMessages uint64
	// AgentRequests is the number of the agent's requests being served;
	// RefusedRequests counts those refused for being past the cap.
	AgentRequests   int
	RefusedRequests uint64
	// TerminalsOpen is the number of terminals not yet released.
	TerminalsOpen int
	// InvalidRequests counts requests answered -32600: batches, ids that
	// are not a string, number or null.
	InvalidRequests uint64
	// UnsentAnswers counts answers to refused, unknown or invalid
	// requests not sent because the agent read nothing while they waited.
	UnsentAnswers uint64
	// UnknownConfigOptions counts session configuration options skipped
	// for a type the broker does not know, or unusable fields.
	UnknownConfigOptions uint64
	// UnknownUpdates counts session updates of kinds this client does not
	// know, UnknownContent content items of unknown types; both are
	// ignored.
	UnknownUpdates, UnknownContent uint64
}

// Add returns the field-wise sum of s and o. Every field of Stats is a
// number: its counters are uint64, its gauges (what a Conn holds now)
// int.
func (s Stats) Add(o Stats) Stats {
	sum := reflect.ValueOf(&s).Elem()
	add := reflect.ValueOf(o)
	for i := range sum.NumField() {
		switch f := sum.Field(i); f.Kind() {
		case reflect.Uint64:
			f.SetUint(f.Uint() + add.Field(i).Uint())
		case reflect.Int:
			f.SetInt(f.Int() + add.Field(i).Int())
		}
	}
	return s
}

// Counters is s with its gauges zeroed: what a closed Conn leaves to the
// counts of those before it, holding nothing any more.
func (s Stats) Counters() Stats {
	v := reflect.ValueOf(&s).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Int {
			f.SetInt(0)
		}
	}
	return s
}

// Stats returns a snapshot of the Conn's counters.
func (c *Conn) Stats() Stats {
	c.mu.Lock()
	s := Stats{PendingRequests: len(c.pending), Subscribers: len(c.subs), AgentRequests: c.serving,
		EarlyBytes: c.earlyBytes}
	for _, q := range c.early {
		s.EarlyUpdates += len(q.updates)
	}
	for _, p := range c.perms {
		if p.method == MethodElicitationCreate {
			s.PendingElicitations++
		} else {
			s.PendingPermissions++
		}
	}
	c.mu.Unlock()
	if h, ok := c.opts.Host.(interface{ TerminalsOpen() int }); ok {
		s.TerminalsOpen = h.TerminalsOpen()
	}
	s.StaleResponses = c.stats.staleResponses.Load()
	s.JunkLines = c.stats.junkLines.Load()
	s.OversizeLines = c.stats.oversizeLines.Load()
	s.LateUpdates = c.stats.lateUpdates.Load()
	s.EarlyDropped = c.stats.earlyDropped.Load()
	s.DroppedUpdates = c.stats.droppedUpdates.Load()
	s.BadMessages = c.stats.badMessages.Load()
	s.RefusedRequests = c.stats.refused.Load()
	s.InvalidRequests = c.stats.invalid.Load()
	s.UnsentAnswers = c.stats.unsentAnswers.Load()
	s.UnknownConfigOptions = c.stats.unknownOptions.Load()
	s.UnknownUpdates = c.stats.unknownUpdates.Load()
	s.UnknownContent = c.stats.unknownContent.Load()
	return s
}
