package broker

import (
	"testing"

	"acpbroker/adapter"
	"acpbroker/store"
)

// The engine names how a turn ended in plain words; the store must know
// each as a final state, or a restart would report a finished turn as
// still running, and an interrupted one must be what it reports.
func TestStore_KnowsEveryWayTheEngineEndsATurn(t *testing.T) {
	s, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, state := range []string{adapter.EndedDone, adapter.EndedFailed, adapter.EndedCancelled, adapter.EndedInterrupted} {
		id := s.TurnQueued("t", "ref", "title", "author")
		s.TurnStarted(id)
		s.TurnEnded(id, state, "why")
		turn, ok := s.Turn(id)
		if !ok || string(turn.State) != state || !turn.State.Final() {
			t.Errorf("ended %q: the store has %+v (found %v), want that state, final", state, turn.State, ok)
		}
	}
	if store.State(adapter.EndedInterrupted) != store.Interrupted {
		t.Errorf("the engine's %q is not the store's interrupted state %q", adapter.EndedInterrupted, store.Interrupted)
	}
}
