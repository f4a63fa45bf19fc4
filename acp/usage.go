package acp

// Update kinds that say how much of its context the agent has used and
// what the session is called.
const (
	UpdateUsage       = "usage_update"
	UpdateSessionInfo = "session_info_update"
)

// Usage is a usage_update: the tokens in the agent's context, the size
// of its window, and what the session has cost so far, when it says.
type Usage struct {
	Used uint64 `json:"used"`
	Size uint64 `json:"size"`
	Cost *Cost  `json:"cost,omitempty"`
}

// Cost is an amount of money in a currency ("USD").
type Cost struct {
	Amount   float64 `json:"amount"`
	Currency string  `json:"currency"`
}

// TurnUsage is a prompt answer's token totals for the turn.
type TurnUsage struct {
	TotalTokens       uint64 `json:"totalTokens"`
	InputTokens       uint64 `json:"inputTokens"`
	OutputTokens      uint64 `json:"outputTokens"`
	ThoughtTokens     uint64 `json:"thoughtTokens,omitempty"`
	CachedReadTokens  uint64 `json:"cachedReadTokens,omitempty"`
	CachedWriteTokens uint64 `json:"cachedWriteTokens,omitempty"`
}
