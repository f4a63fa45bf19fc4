package store

import "maps"

// MaxThreadOptions bounds the options a thread remembers; a choice of one
// more is not kept.
const MaxThreadOptions = 64

// ThreadChoices returns the option values and the mode chosen in a thread
// (adapter.ThreadChoices). The map is the caller's.
func (s *Store) ThreadChoices(thread string) (map[string]string, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.threads[thread]
	if t == nil {
		return nil, ""
	}
	return maps.Clone(t.Options), t.Mode
}

// SetThreadOption records the value chosen for an option in a thread
// (adapter.ThreadChoices).
func (s *Store) SetThreadOption(thread, id, value string) {
	s.updateThread(thread, func(t *Thread) {
		if _, ok := t.Options[id]; !ok && len(t.Options) >= MaxThreadOptions {
			return
		}
		// A new map: copies of the Thread handed out keep the old one.
		m := maps.Clone(t.Options)
		if m == nil {
			m = map[string]string{}
		}
		m[id] = value
		t.Options = m
	})
}

// SetThreadMode records the mode chosen in a thread (adapter.ThreadChoices).
func (s *Store) SetThreadMode(thread, mode string) {
	s.updateThread(thread, func(t *Thread) { t.Mode = mode })
}
