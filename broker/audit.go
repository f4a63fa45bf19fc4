package broker

import (
	"acpbroker/adapter"
	"acpbroker/store"
)

// storeAuditor records the engine's permission decisions in the state
// store: the store depends on nothing of ours, so the conversion is here.
type storeAuditor struct{ s *store.Store }

var _ adapter.Auditor = storeAuditor{}

func (a storeAuditor) Decided(d adapter.Decision) { a.s.Decided(StoreDecision(d)) }

// StoreDecision is a decision of the engine as the audit trail keeps it.
func StoreDecision(d adapter.Decision) store.Decision {
	return store.Decision{
		Time: d.Time.UTC(), Thread: d.Thread, Profile: d.Profile, Turn: d.Turn,
		ToolCallID: d.ToolCallID, Tool: d.Tool, ToolKind: d.ToolKind,
		OptionID: d.OptionID, OptionKind: d.OptionKind, Outcome: d.Outcome(),
		Via: d.Via, By: d.By, ByName: d.ByName,
	}
}

// storeRecords keeps the engine's records of the sessions threads had in
// the state store.
type storeRecords struct{ s *store.Store }

var _ adapter.SessionRecords = storeRecords{}

func (r storeRecords) SessionUsed(thread, profile, dir, id string) {
	r.s.SessionUsed(thread, profile, dir, id)
}

func (r storeRecords) SessionTitled(thread, id, title string) { r.s.SessionTitled(thread, id, title) }

func (r storeRecords) SessionsIn(thread, profile, dir string) []adapter.SessionRecord {
	kept := r.s.SessionsIn(thread, profile, dir)
	out := make([]adapter.SessionRecord, len(kept))
	for i, k := range kept {
		out[i] = adapter.SessionRecord{Thread: k.Thread, ID: k.ID, Title: k.Title, Used: k.Used}
	}
	return out
}
