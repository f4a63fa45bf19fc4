package pool_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"acpbroker/internal/agenttest"
	"acpbroker/pool"
)

// newBubblePool starts a pool of in-process fake agents; call it inside a
// synctest bubble, where time only moves when every goroutine waits.
func newBubblePool(t *testing.T, cfg pool.Config, opts agenttest.InProcessOptions) *pool.Pool {
	t.Helper()
	cfg.Launch = agenttest.InProcess(opts)
	cfg.Command = "fakeagent"
	cfg.WorkDir = t.TempDir()
	cfg.Logger = testLogger(t)
	p := pool.New(cfg)
	t.Cleanup(p.Close)
	return p
}

// An agent idle for less than pool.idle_timeout (30m) keeps running; at
// 30m it is stopped and its slot freed, and it keeps its session for
// resume. A busy agent is never stopped for idleness.
func TestPool_IdleTimeoutOfThirtyMinutes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		book := pool.NewMemoryBook(10)
		p := newBubblePool(t, pool.Config{MaxSessions: 2, IdleTimeout: 30 * time.Minute, ExitGrace: 2 * time.Second, Sessions: book}, agenttest.InProcessOptions{})
		ctx := context.Background()
		idle, err := p.Acquire(ctx, "idle", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		busy, err := p.Acquire(ctx, "busy", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		p.Release(idle, false)

		time.Sleep(30*time.Minute - time.Second)
		synctest.Wait()
		if p.Lookup("idle") == nil {
			t.Fatal("stopped before 30m of idleness")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if p.Lookup("idle") != nil {
			t.Fatal("still live after 30m of idleness")
		}
		<-idle.Proc.Reaped()
		if s := p.Stats(); s.Live != 1 || s.Evicted != 1 {
			t.Fatalf("stats = %+v, want the busy agent live and one eviction", s)
		}
		if sess, _ := book.Session("idle"); sess != idle.SessionID {
			t.Fatalf("session kept for resume = %q, want %q", sess, idle.SessionID)
		}

		time.Sleep(2 * time.Hour)
		synctest.Wait()
		if p.Lookup("busy") != busy {
			t.Fatal("a busy agent was stopped for idleness")
		}
		p.Release(busy, false)
	})
}

// A wait for a slot is bounded by the caller's deadline (the turn's
// pool.slot_wait): it gives up exactly then, not a tick later.
func TestPool_WaitForASlotEndsAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newBubblePool(t, pool.Config{MaxSessions: 1}, agenttest.InProcessOptions{})
		a, err := p.Acquire(context.Background(), "a", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		start := time.Now()
		if _, err := p.Acquire(ctx, "b", "", nil); err == nil {
			t.Fatal("got a slot from a full, busy pool")
		}
		if took := time.Since(start); took != 10*time.Minute {
			t.Fatalf("gave up after %s, want exactly 10m", took)
		}
		p.Release(a, false)
	})
}

// A wait for a slot is announced only once it has lasted WaitNotice (1s):
// making room by stopping an idle agent takes milliseconds and is not
// worth a "waiting" message.
func TestPool_OnlyALastingWaitIsAnnounced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newBubblePool(t, pool.Config{MaxSessions: 1}, agenttest.InProcessOptions{})
		for _, hold := range []time.Duration{500 * time.Millisecond, 3 * time.Second} {
			a, err := p.Acquire(context.Background(), "a", "", nil)
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				time.Sleep(hold)
				p.Release(a, false)
			}()
			start := time.Now()
			var told time.Duration
			b, err := p.Acquire(context.Background(), "b", "", func(pool.Wait) { told = time.Since(start) })
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case hold < time.Second && told != 0:
				t.Fatalf("a %s wait was announced", hold)
			case hold > time.Second && told != time.Second:
				t.Fatalf("a %s wait was announced after %s, want 1s", hold, told)
			}
			p.Release(b, true)
			synctest.Wait()
		}
	})
}

// Each profile's start timeout is its own, falls back to the pool's, and
// bounds the workspace hook as much as the agent's set-up: a hook that
// hangs fails the start exactly then, and no agent is left.
func TestPool_ProfileStartTimeoutBoundsTheWorkspaceHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hang := func(ctx context.Context, thread string) (string, error) {
			<-ctx.Done()
			return "", ctx.Err()
		}
		p := pool.New(pool.Config{
			Launch: agenttest.InProcess(agenttest.InProcessOptions{}), Logger: testLogger(t),
			MaxSessions: 2, StartTimeout: 3 * time.Minute,
			Profiles: map[string]*pool.Profile{
				"quick": {Command: "fakeagent", Workspace: hang, StartTimeout: 20 * time.Second},
				"slow":  {Command: "fakeagent", Workspace: hang},
			},
			DefaultProfile: "quick",
		})
		t.Cleanup(p.Close)
		for profile, want := range map[string]time.Duration{"quick": 20 * time.Second, "slow": 3 * time.Minute} {
			start := time.Now()
			_, err := p.Acquire(context.Background(), "t", profile, nil)
			if err == nil || !strings.Contains(err.Error(), "did not start within "+want.String()) {
				t.Fatalf("%s: Acquire = %v", profile, err)
			}
			if took := time.Since(start); took != want {
				t.Fatalf("%s: gave up after %s, want exactly %s", profile, took, want)
			}
		}
		if s := p.Stats(); s.Live != 0 || s.Starting != 0 || s.SpawnFailed != 2 || s.Profiles["quick"] != (pool.ProfileStats{}) {
			t.Fatalf("stats = %+v", s)
		}
	})
}
