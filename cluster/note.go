package cluster

import (
	"encoding/json"
	"errors"

	"github.com/nats-io/nats.go"

	"acpbroker/internal/clip"
)

// maxNoteBytes bounds the text of a note from a host about one of its
// agents, as the host sends it and as the broker takes it.
const maxNoteBytes = 1024

// note is what a host tells the broker of one of its agents without
// being asked, on the agent's "note" subject.
type note struct {
	// AfterTurn says why the thread's Started.AfterTurn failed (its branch
	// not pushed to the shared repository).
	AfterTurn string `json:"afterTurn,omitempty"`
}

// FailureKinder is an error of Started.AfterTurn that names what failed
// (a push refused, a repository unreachable), so that its broker is told
// of one failure once however its words vary from turn to turn (git's
// reason for a refusal does). Without it the error's text is the kind.
type FailureKinder interface {
	FailureKind() string
}

// afterTurnDone takes the end of one of a's AfterTurns: a failure is
// logged and told to a's broker unless it is of the kind told last; a
// success forgets that one, so that the next failure is told. One cut
// short by the host's close is not told. Called by one AfterTurn at a
// time (see turned).
func (s *Server) afterTurnDone(a *hostAgent, err error) {
	if err == nil {
		a.afterErr = ""
		return
	}
	s.log.Warn().Err(err).Str("thread", a.thread).Str("agent", a.id).Msg("cluster: after the thread's turn")
	select {
	case <-s.stop:
		return // cut short by the host's close: nothing to tell
	default:
	}
	kind := err.Error()
	var k FailureKinder
	if errors.As(err, &k) {
		kind = k.FailureKind()
	}
	if kind == a.afterErr {
		return
	}
	a.afterErr = kind
	text := clip.Cut(err.Error(), maxNoteBytes)
	if perr := s.nc.Publish(agentSubject(a.id, "note"), mustJSON(note{AfterTurn: text})); perr != nil {
		s.log.Warn().Err(perr).Str("thread", a.thread).Str("agent", a.id).Msg("cluster: the failure after the thread's turn was not told to its broker")
	}
}

// onNote takes a note from the agent's host: an AfterTurn's failure goes
// to ClientOptions.AfterTurnFailed, its text bounded. A note too long to
// be a host's is dropped.
func (a *remoteProc) onNote(m *nats.Msg) {
	if len(m.Data) > 4*maxNoteBytes || a.c.o.AfterTurnFailed == nil {
		return
	}
	var n note
	if err := json.Unmarshal(m.Data, &n); err != nil || n.AfterTurn == "" {
		return
	}
	a.c.o.AfterTurnFailed(a.thread, a.host, clip.Cut(n.AfterTurn, maxNoteBytes))
}
