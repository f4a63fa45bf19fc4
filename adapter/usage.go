package adapter

import "acpbroker/acp"

// setUsage keeps the thread's last usage_update for Status. The entry
// goes with the thread: at Reset, and once the thread has neither a turn
// nor a live agent (see pruneUsage).
func (e *Engine) setUsage(thread string, u acp.Usage) {
	e.mu.Lock()
	e.usage[thread] = u
	e.mu.Unlock()
}

// usageOf is the thread's last usage, nil if none is known.
func (e *Engine) usageOf(thread string) *acp.Usage {
	e.mu.Lock()
	defer e.mu.Unlock()
	if u, ok := e.usage[thread]; ok {
		return &u
	}
	return nil
}

// pruneUsage forgets the usage of threads with no turn and no live
// agent: their session's context is not in any process any more.
func (e *Engine) pruneUsage() {
	e.mu.Lock()
	var idle []string
	for thread := range e.usage {
		if e.threads[thread] == nil {
			idle = append(idle, thread)
		}
	}
	e.mu.Unlock()
	for _, thread := range idle {
		if e.pool.Lookup(thread) != nil {
			continue
		}
		e.mu.Lock()
		if e.threads[thread] == nil {
			delete(e.usage, thread)
		}
		e.mu.Unlock()
	}
}
