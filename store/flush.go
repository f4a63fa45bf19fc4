package store

import (
	"encoding/json"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
)

func (s *Store) kickLocked() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// waitFlushed waits until the flush of generation gen is done, for at
// most SyncTimeout.
func (s *Store) waitFlushed(gen uint64) {
	timeout := time.NewTimer(s.opts.SyncTimeout)
	defer timeout.Stop()
	for {
		s.mu.Lock()
		done, flushed, closed := s.doneGen >= gen, s.flushed, s.closed
		s.mu.Unlock()
		if done || closed {
			return
		}
		select {
		case <-flushed:
		case <-timeout.C:
			s.log.Warn().Dur("waited", s.opts.SyncTimeout).Msg("state write is slow; the turn goes on before it is on disk")
			return
		}
	}
}

// FlushInterval after a tool-call update, and prunes once a minute.
func (s *Store) flusher() {
	defer close(s.done)
	tick := time.NewTicker(s.opts.FlushInterval)
	defer tick.Stop()
	lastPrune := s.opts.Now()
	for {
		select {
		case <-s.kick:
		case <-tick.C:
		case <-s.stop:
			s.flush()
			return
		}
		s.flush()
		if now := s.opts.Now(); now.Sub(lastPrune) >= pruneEvery {
			s.Prune()
			lastPrune = now
		}
	}
}

// Flush writes every pending change now.
func (s *Store) Flush() error { return s.flush() }

func (s *Store) flush() error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.Lock()
	gen := s.nextGen
	s.nextGen++
	if len(s.dirty) == 0 && len(s.dirtyThr) == 0 && len(s.agents) == 0 && len(s.goneAgts) == 0 && len(s.shown) == 0 && len(s.decided) == 0 && len(s.dirtyWt) == 0 && len(s.records) == 0 && len(s.webDirty) == 0 && s.webFailures == nil {
		s.doneLocked(gen)
		s.mu.Unlock()
		return nil
	}
	agents, gone, shown, decided := s.agents, s.goneAgts, s.shown, s.decided
	s.agents, s.goneAgts, s.shown, s.decided = map[int]uint64{}, map[int]bool{}, map[uint64]string{}, nil
	records := s.records
	s.records = nil
	turns := make(map[uint64][]byte, len(s.dirty))
	for id := range s.dirty {
		t := s.active[id]
		if t == nil {
			t = s.ended[id]
		}
		if t != nil {
			turns[id], _ = json.Marshal(t)
		}
	}
	threads := make(map[string][]byte, len(s.dirtyThr))
	for id := range s.dirtyThr {
		if t := s.threads[id]; t != nil {
			threads[id], _ = json.Marshal(t)
		}
	}
	ended := s.ended
	worktrees := s.worktreeChangesLocked()
	web, webFailures := s.webChangesLocked()
	s.dirty, s.dirtyThr, s.ended, s.writing = map[uint64]bool{}, map[string]bool{}, map[uint64]*Turn{}, ended
	hook := s.beforeCommit
	s.mu.Unlock()
	if hook != nil {
		hook()
	}

	// Counts change inside the transaction: bbolt runs one writer at a
	// time, so a concurrent Prune sees them consistent with the disk.
	err := s.db.Update(func(tx *bolt.Tx) error {
		tb, hb := tx.Bucket(bucketTurns), tx.Bucket(bucketThreads)
		for id, v := range turns {
			if err := tb.Put(key(id), v); err != nil {
				return err
			}
		}
		for id, v := range threads {
			if err := hb.Put([]byte(id), v); err != nil {
				return err
			}
		}
		ab := tx.Bucket(bucketAgents)
		for pid, ticks := range agents {
			v, _ := json.Marshal(Agent{PID: pid, StartTicks: ticks})
			if err := ab.Put([]byte(strconv.Itoa(pid)), v); err != nil {
				return err
			}
		}
		for pid := range gone {
			if err := ab.Delete([]byte(strconv.Itoa(pid))); err != nil {
				return err
			}
		}
		for id, where := range shown { // after the records written above
			v := tb.Get(key(id))
			var t Turn
			if v == nil || json.Unmarshal(v, &t) != nil || !t.Unshown {
				continue
			}
			t.Unshown, t.ShownIn = false, where
			nv, err := json.Marshal(&t)
			if err != nil {
				return err
			}
			if err := tb.Put(key(id), nv); err != nil {
				return err
			}
		}
		if err := putDecisions(tx, decided); err != nil {
			return err
		}
		if err := putWorktrees(tx, worktrees); err != nil {
			return err
		}
		if err := putRecords(tx, records); err != nil {
			return err
		}
		if err := putWeb(tx, web, webFailures); err != nil {
			return err
		}
		s.mu.Lock()
		s.finished += len(ended)
		s.kept += len(decided)
		s.mu.Unlock()
		return nil
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writing = nil
	s.stats.Flushes++
	s.doneLocked(gen)
	if err != nil {
		// Keep the changes for the next flush.
		s.stats.WriteErrors++
		s.stats.LastError = err.Error()
		for id := range turns {
			s.dirty[id] = true
		}
		for id := range threads {
			s.dirtyThr[id] = true
		}
		for id, t := range ended {
			s.ended[id] = t
		}
		for dir := range worktrees {
			s.dirtyWt[dir] = true // the map holds what is current
		}
		for pid, ticks := range agents {
			if !s.goneAgts[pid] {
				s.agents[pid] = ticks
			}
		}
		for pid := range gone {
			if _, again := s.agents[pid]; !again {
				s.goneAgts[pid] = true
			}
		}
		s.records = append(records, s.records...) // older than any put since
		s.webRetryLocked(web, webFailures)
		s.finished -= len(ended)
		s.kept -= len(decided)
		// Older than any recorded since, and bounded as Decided bounds.
		s.decided = append(decided, s.decided...)
		if over := len(s.decided) - maxPendingDecisions; over > 0 {
			s.decided = s.decided[over:]
			s.stats.DroppedDecisions += uint64(over)
		}
		s.log.Error().Err(err).Msg("state not written; will retry")
		return err
	}
	s.stats.LastError = ""
	return nil
}

// doneLocked records that flush gen is over and wakes its waiters. After a
// failed write they stop waiting too: the change is retried, not lost.
func (s *Store) doneLocked(gen uint64) {
	s.doneGen = max(s.doneGen, gen)
	close(s.flushed)
	s.flushed = make(chan struct{})
}
