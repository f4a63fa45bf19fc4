package cluster

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"acpbroker/pool"
)

// scriptStarter's agents end each turn as script says, one entry a turn
// after the other: that error, or a success for nil. Each AfterTurn's end
// is sent on ran.
type scriptStarter struct {
	fakeStarter
	script []error
	ran    chan struct{}
	mu     sync.Mutex
	n      int
}

func (s *scriptStarter) Start(ctx context.Context, thread, profile string) (Started, error) {
	st, err := s.fakeStarter.Start(ctx, thread, profile)
	st.AfterTurn = func(ctx context.Context) error {
		s.mu.Lock()
		i := s.n
		s.n++
		s.mu.Unlock()
		defer func() { s.ran <- struct{}{} }()
		if i < len(s.script) {
			return s.script[i]
		}
		return nil
	}
	return st, err
}

// kindError is a failure of a kind whose words vary.
type kindError struct{ kind, msg string }

func (e kindError) Error() string       { return e.msg }
func (e kindError) FailureKind() string { return e.kind }

// A failure after a thread's turn (its branch not pushed) reaches the
// broker with the thread and the host, once while it reads the same or
// is of the same kind, again once a success came between, and bounded to
// 1 KiB.
func TestAfterTurnFailed_ToldOncePerFailureAndBounded(t *testing.T) {
	long := "rejected: " + strings.Repeat("y", 3000)
	x := errors.New("rejected: x")
	s := &scriptStarter{script: []error{x, x, nil, x, errors.New(long), errors.New(long),
		kindError{"push rejected", "fetch first"}, kindError{"push rejected", "non-fast-forward"}, errors.New("unreachable: z")},
		ran: make(chan struct{}, 16)}
	ns := runNATS(t, 0, 0)
	serve(t, dial(t, ns.ClientURL()), s, ServerOptions{Name: "a", Capacity: 1})
	told := make(chan string, 16)
	c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{AfterTurnFailed: func(thread, host, why string) {
		told <- thread + " on " + host + ": " + why
	}})
	waitHosts(t, c, 1)
	r, err := c.Start(t.Context(), "t", "p", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	te := r.Proc.(pool.TurnEnder)
	for i := range s.script {
		te.TurnEnded()
		select {
		case <-s.ran:
		case <-time.After(5 * time.Second):
			t.Fatalf("turn %d's AfterTurn did not run", i)
		}
	}
	want := []string{"t on a: rejected: x", "t on a: rejected: x", "t on a: " + long[:maxNoteBytes-len("…")] + "…", "t on a: fetch first", "t on a: unreachable: z"}
	var got []string
	for len(got) < len(want) {
		select {
		case g := <-told:
			got = append(got, g)
		case <-time.After(5 * time.Second):
			t.Fatalf("told %d failures, want %d: %q", len(got), len(want), got)
		}
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("failure %d told as %.80q…, want %.80q…", i, got[i], want[i])
		}
	}
	if len(got[2]) > len("t on a: ")+maxNoteBytes {
		t.Errorf("a failure of %d bytes was told in %d", len(long), len(got[2]))
	}
	select {
	case g := <-told:
		t.Errorf("told more than once per failure: %q", g)
	case <-time.After(200 * time.Millisecond):
	}
}
