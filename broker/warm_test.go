package broker

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/config"
	"acpbroker/internal/eventually"
	"acpbroker/pool"
)

// The console and the HTTP API start their threads' agents through the
// pool as chat threads do: with a warm agent ready, each takes it, and no
// agent is started for it.
func TestWarm_ConsoleAndAPIThreadsTakeWarmAgents(t *testing.T) {
	cfg, err := config.Load(writeConfigArgs(t, nil, fmt.Sprintf(`[agents.w]
per_thread_dir = false
[api]
listen = "127.0.0.1:0"
rate_limit = 10000
[[api.tokens]]
name = "ci"
token = %q
channels = ["*"]
`, apiTestToken)), nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var started []int
	b := openBroker(t, cfg, Options{Logger: testLog(t), Pool: func(c *pool.Config) {
		for _, p := range c.Profiles {
			p.Warm = 1
		}
		c.Launch = func(spec pool.ProcessSpec) (pool.Proc, error) {
			proc, err := pool.Exec(spec)
			if err == nil {
				mu.Lock()
				started = append(started, proc.PID())
				mu.Unlock()
			}
			return proc, err
		}
	}})
	ready := func() []int {
		t.Helper()
		eventually.True(t, "a warm agent", func() bool { return b.pool.Stats().Warm == 1 })
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(started)
	}

	before := ready()
	s := newDoneSink()
	if err := b.engine.Submit("console", &adapter.Prompt{Blocks: []acp.ContentBlock{acp.TextBlock("hello")}, Sink: s}); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-s.done:
		if o.Err != nil {
			t.Fatal(o.Err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the console's turn never ended")
	}
	if a := b.pool.Lookup("console"); a == nil || !slices.Contains(before, a.Proc.PID()) {
		t.Fatalf("the console's agent was started for it; the warm one was among %v", before)
	}

	ready()
	apiPrompt(t, b, "hello from the API")
	st := b.pool.Stats()
	if st.WarmClaims["w"] != 2 || st.ColdStarts["w"] != 0 {
		t.Fatalf("warm claims %v, cold starts %v: want both threads to have taken a warm agent", st.WarmClaims, st.ColdStarts)
	}
}

// The keys are consumed: a profile's warm = 2 keeps two agents ready,
// pool.warm gives a profile that sets none its count, and a profile
// whose agents each have a directory of their own keeps none.
func TestWarm_TheKeysKeepThatManyReady(t *testing.T) {
	cfg, err := config.Load(writeConfigArgs(t, nil, `[pool]
max_sessions = 8
warm = 1
[agents]
default = "two"
[agents.two]
per_thread_dir = false
warm = 2
[agents.one]
per_thread_dir = false
[agents.own]
per_thread_dir = true
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := openBroker(t, cfg, Options{Logger: testLog(t)})
	eventually.True(t, "two warm agents of two and one of one", func() bool {
		st := b.pool.Stats()
		return st.Profiles["two"].Warm == 2 && st.Profiles["one"].Warm == 1
	})
	time.Sleep(300 * time.Millisecond) // a start of own's would be under way by now
	if st := b.pool.Stats(); st.Profiles["own"].Warm != 0 || st.Warm != 3 {
		t.Errorf("warm agents: %d of own, %d in all; want 0 and 3", st.Profiles["own"].Warm, st.Warm)
	}
}
