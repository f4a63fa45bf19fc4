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
