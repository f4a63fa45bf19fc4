package store

import (
	"encoding/json"

	bolt "go.etcd.io/bbolt"
)

// Agent is an agent process a broker recorded as started.
type Agent struct {
	PID        int    `json:"pid"`
	StartTicks uint64 `json:"start"`
}

// Leftovers returns the agent processes the previous broker recorded as
// alive, and forgets them: the caller kills those still running.
func (s *Store) Leftovers() ([]Agent, error) {
	var out []Agent
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAgents)
		var keys [][]byte
		if err := b.ForEach(func(k, v []byte) error {
			var a Agent
			if json.Unmarshal(v, &a) == nil {
				out = append(out, a)
			}
			keys = append(keys, append([]byte(nil), k...))
			return nil
		}); err != nil {
			return err
		}
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// AgentStarted records a live agent process (pool.Registry).
func (s *Store) AgentStarted(pid int, startTicks uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.goneAgts, pid)
	s.agents[pid] = startTicks
	s.kickLocked()
}

// AgentGone records that an agent process ended (pool.Registry).
func (s *Store) AgentGone(pid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.agents, pid)
	s.goneAgts[pid] = true
	s.kickLocked()
}
