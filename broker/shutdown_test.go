package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/config"
	"acpbroker/internal/agenttest"
)

// doneSink waits for a turn's outcome.
type doneSink struct {
	working chan struct{}
	once    sync.Once
	done    chan adapter.Outcome
}

func newDoneSink() *doneSink {
	return &doneSink{working: make(chan struct{}), done: make(chan adapter.Outcome, 1)}
}

func (s *doneSink) Status(st adapter.Status) {
	if st.Phase == adapter.PhaseWorking {
		s.once.Do(func() { close(s.working) })
	}
}

func (s *doneSink) Update(acp.Update) {}

func (s *doneSink) Ask(ctx context.Context, _ *acp.PermissionRequest) adapter.Answer {
	<-ctx.Done()
	return adapter.Answer{}
}

func (s *doneSink) Notice(adapter.Notice) {}

func (s *doneSink) Done(o adapter.Outcome) { s.done <- o }

// Shutdown is bounded by shutdown.grace however many agents hang: twenty
// agents that ignore session/cancel, EOF and SIGTERM, with a 30s cancel
// grace and a 30s exit grace, are all gone within about the 2s grace, and
// every busy thread is told the broker is stopping.
func TestShutdown_TwentyHungAgentsAreBoundedByTheGrace(t *testing.T) {
	cfg, err := config.Load(writeConfigArgs(t, []string{"--ignore-term", "--no-exit-on-eof"},
		"[turn]\ncancel_grace = \"30s\"\n[pool]\nmax_sessions = 20\n[shutdown]\ngrace = \"2s\""), []string{"BROKER_AGENT_EXIT_GRACE=30s"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(cfg, Options{Logger: zerolog.Nop(), Stdin: strings.NewReader(""), Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	var sinks []*doneSink
	var pids []int
	for i := range 20 {
		s := newDoneSink()
		thread := fmt.Sprintf("t%d", i)
		if err := b.engine.Submit(thread, &adapter.Prompt{Blocks: []acp.ContentBlock{acp.TextBlock("ignore-cancel")}, Sink: s}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-s.working:
		case <-time.After(30 * time.Second):
			t.Fatalf("turn %d never started", i)
		}
		pids = append(pids, b.pool.Lookup(thread).Proc.PID())
		sinks = append(sinks, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Shutdown.Grace)
	defer cancel()
	start := time.Now()
	b.Stop(ctx)
	took := time.Since(start)
	if took > 2*time.Second+3*time.Second {
		t.Fatalf("shutdown took %s with a 2s grace", took)
	}
	for i, s := range sinks {
		select {
		case o := <-s.done:
			if !errors.Is(o.Err, adapter.ErrShutdown) {
				t.Fatalf("turn %d: %v", i, o.Err)
			}
		default:
			t.Fatalf("turn %d was never told", i)
		}
	}
	for _, pid := range pids {
		if agenttest.Running(pid) {
			t.Fatalf("agent %d still running after shutdown", pid)
		}
	}
	t.Logf("20 hung agents: shutdown took %s (grace 2s)", took)
}

// A shutdown gives every agent the same three steps, each at most
// agent.exit_grace: the wait for its turn's answer to the cancel (at most
// turn.cancel_grace too), the wait after stdin is closed, the wait after
// SIGTERM; all three fit in shutdown.grace less the last words' share.
func TestShutdown_PlanGivesEveryAgentThreeStepsOfTheExitGrace(t *testing.T) {
	now := time.Unix(1_000_000_000, 0)
	third := (2*time.Second - time.Second) / 3 // of a 2s grace, less its 1s of last words
	for _, tc := range []struct {
		name                 string
		grace, cancel, exit  time.Duration
		wantAnswer, wantGone time.Duration
	}{
		{"the defaults", 15 * time.Second, 10 * time.Second, 2 * time.Second, 2 * time.Second, 6 * time.Second},
		{"a cancel grace shorter than a step", 15 * time.Second, 500 * time.Millisecond, 2 * time.Second, 500 * time.Millisecond, 4500 * time.Millisecond},
		{"exit graces that do not fit", 15 * time.Second, 30 * time.Second, 30 * time.Second, 3750 * time.Millisecond, 11250 * time.Millisecond},
		{"a short shutdown", 2 * time.Second, 10 * time.Second, 2 * time.Second, third, 3 * third},
		{"no time left", 0, 10 * time.Second, 2 * time.Second, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := planStop(now, now.Add(tc.grace), tc.cancel, tc.exit)
			if got := plan.answerBy.Sub(now); got != tc.wantAnswer {
				t.Errorf("answers are waited for %s, want %s", got, tc.wantAnswer)
			}
			if got := plan.goneBy.Sub(now); got != tc.wantGone {
				t.Errorf("agents are gone after %s, want %s", got, tc.wantGone)
			}
		})
	}
}
