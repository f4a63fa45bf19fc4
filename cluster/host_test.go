package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"acpbroker/acp"
	"acpbroker/pool"
)

// A host that stops answering (its connection closed without a word) is
// lost after HostTimeout: its agents end, in words.
func TestHostLost_AgentsEndWithinHostTimeout(t *testing.T) {
	ns := runNATS(t, 0, 0)
	hostConn := dial(t, ns.ClientURL())
	dir := t.TempDir()
	serve(t, hostConn, &procStarter{argv: []string{"cat"}, dir: dir}, ServerOptions{Name: "h1"})
	c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{HostTimeout: time.Second})
	waitHosts(t, c, 1)
	r, err := c.Start(t.Context(), "thread", "p", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	readerDone := make(chan struct{})
	close(readerDone)
	r.Proc.Monitor(readerDone)
	// A request open on the host when it falls silent is answered.
	r.Host.OpenSession("s1", dir)
	term, err := r.Host.CreateTerminal(t.Context(), &acp.CreateTerminalParams{SessionID: "s1", Command: "sleep", Args: []string{"30"}, Cwd: dir})
	if err != nil {
		t.Fatal(err)
	}
	waitErr := make(chan error, 1)
	go func() {
		_, err := r.Host.WaitForTerminalExit(context.Background(), &acp.TerminalParams{SessionID: "s1", TerminalID: term.TerminalID})
		waitErr <- err
	}()
	time.Sleep(100 * time.Millisecond)

	// Silent as a partition would leave it: no word, and no replies.
	hostConn.Close()
	start := time.Now()
	select {
	case <-r.Proc.Exited():
	case <-time.After(5 * time.Second):
		t.Fatal("the agent of a silent host has not ended")
	}
	took := time.Since(start)
	// Heard last up to a beat (100 ms) before the close; swept every
	// 50 ms: lost between HostTimeout - a beat and HostTimeout + a sweep.
	if took < 800*time.Millisecond || took > 1500*time.Millisecond {
		t.Errorf("the host was found lost %s after it fell silent, want about HostTimeout (1s)", took)
	}
	<-r.Proc.Reaped()
	err = r.Proc.ExitErr()
	if err == nil || !strings.HasPrefix(err.Error(), "agent host h1 stopped answering (last heard ") {
		t.Fatalf("ExitErr = %v, want the words of a lost host", err)
	}
	select {
	case err := <-waitErr:
		if err == nil || !strings.Contains(err.Error(), "agent host h1 stopped answering") {
			t.Errorf("the open request was answered %v, want the words of a lost host", err)
		}
	case <-time.After(2 * time.Second):
		t.Error("the request open on a lost host is still waiting")
	}
	if _, rerr := r.Proc.Stdout().Read(make([]byte, 1)); rerr == nil {
		t.Error("stdout of an agent on a lost host still reads")
	}
	hosts := c.Hosts()
	if len(hosts) != 1 || !hosts[0].Lost {
		t.Fatalf("Hosts() = %+v, want h1 lost", hosts)
	}
}

// A host seen with a new instance id has restarted: the agents of the old
// one end at once, long before HostTimeout.
func TestHostRestarted_OldAgentsEnd(t *testing.T) {
	ns := runNATS(t, 0, 0)
	oldConn := dial(t, ns.ClientURL())
	serve(t, oldConn, &fakeStarter{}, ServerOptions{Name: "h1"})
	c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{HostTimeout: 20 * time.Second})
	waitHosts(t, c, 1)
	r, err := c.Start(t.Context(), "thread", "p", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	readerDone := make(chan struct{})
	close(readerDone)
	r.Proc.Monitor(readerDone)

	oldConn.Close()
	serve(t, dial(t, ns.ClientURL()), &fakeStarter{}, ServerOptions{Name: "h1"})
	select {
	case <-r.Proc.Reaped():
	case <-time.After(3 * time.Second):
		t.Fatal("the agent of a restarted host has not ended")
	}
	if err := r.Proc.ExitErr(); err == nil || !strings.Contains(err.Error(), "agent host h1 restarted") {
		t.Fatalf("ExitErr = %v, want the words of a restarted host", err)
	}
}

// A broker instance not heard for OwnerTimeout has its agents stopped by
// the host.
func TestBrokerGone_HostStopsItsAgents(t *testing.T) {
	ns := runNATS(t, 0, 0)
	st := &fakeStarter{}
	serve(t, dial(t, ns.ClientURL()), st, ServerOptions{Name: "h1", OwnerTimeout: time.Second})
	brokerConn := dial(t, ns.ClientURL())
	c := newClient(t, brokerConn, ClientOptions{})
	waitHosts(t, c, 1)
	if _, err := c.Start(t.Context(), "thread", "p", nil, nil); err != nil {
		t.Fatal(err)
	}
	brokerConn.Close() // the broker crashed: no word, no release
	start := time.Now()
	for {
		if running, _, released := st.stats(); running == 0 && released == 1 {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("the host still runs the agent of a broker gone")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if took := time.Since(start); took < 700*time.Millisecond {
		t.Errorf("the agent was stopped %s after its broker fell silent, before OwnerTimeout (1s)", took)
	}
}

func TestPlacement_LabelsAndProfiles(t *testing.T) {
	ns := runNATS(t, 0, 0)
	serve(t, dial(t, ns.ClientURL()), &fakeStarter{}, ServerOptions{Name: "big", Labels: []string{"gpu=no"}, Capacity: 8})
	serve(t, dial(t, ns.ClientURL()), &fakeStarter{}, ServerOptions{Name: "gpu", Labels: []string{"gpu=yes", "zone=a"}, Capacity: 1})
	serve(t, dial(t, ns.ClientURL()), &fakeStarter{}, ServerOptions{Name: "other", Labels: []string{"gpu=yes", "zone=a"}, Capacity: 8, Profiles: []string{"q"}})
	c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{})
	waitHosts(t, c, 3)
	for _, h := range c.Hosts() {
		if h.Name == "gpu" && (h.Labels["zone"] != "a" || h.Capacity != 1 || h.MemTotal == 0 || h.MemAvailable == 0 || h.MemAvailable > h.MemTotal || h.Instance == "") {
			t.Errorf("Hosts() shows gpu as %+v", h)
		}
	}
	r, err := c.Start(t.Context(), "t1", "p", []string{"gpu=yes", "zone=a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Where != "gpu" {
		t.Fatalf("placed on %s, want gpu: the only host of profile p with gpu=yes,zone=a", r.Where)
	}
	r, err = c.Start(t.Context(), "t2", "p", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Where != "big" {
		t.Fatalf("placed on %s, want big: the host of p with the most room", r.Where)
	}
	if _, err := c.Start(t.Context(), "t3", "p", []string{"gpu"}, nil); err == nil || !strings.Contains(err.Error(), "hosts") {
		t.Fatalf("a selector without = gave %v, want an error naming hosts", err)
	}
}

// Concurrent starts never put more agents on a host than its capacity,
// the most free host is chosen first, a thread with no room waits (onWait
// once) and starts when a slot frees.
func TestPlacement_CapacityUnderConcurrentStarts(t *testing.T) {
	ns := runNATS(t, 0, 0)
	a, b := &fakeStarter{}, &fakeStarter{}
	serve(t, dial(t, ns.ClientURL()), a, ServerOptions{Name: "a", Capacity: 3})
	serve(t, dial(t, ns.ClientURL()), b, ServerOptions{Name: "b", Capacity: 2})
	c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{})
	waitHosts(t, c, 2)
	first, err := c.Start(t.Context(), "first", "p", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if first.Where != "a" {
		t.Fatalf("the first agent went to %s, want a (3 free against 2)", first.Where)
	}
	readerDone := make(chan struct{})
	close(readerDone)
	first.Proc.Monitor(readerDone)

	const n = 6
	done := errors.New("the test is over")
	ctx, cancel := context.WithCancelCause(t.Context())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var placed []string
	waits := 0
	for i := range n {
		wg.Go(func() {
			r, err := c.Start(ctx, "t", "p", nil, func() {
				mu.Lock()
				waits++
				mu.Unlock()
			})
			if errors.Is(err, done) {
				return
			}
			if err != nil {
				t.Errorf("start %d: %v", i, err)
				return
			}
			if r.Proc == nil {
				t.Errorf("start %d gave no agent", i)
				return
			}
			mu.Lock()
			placed = append(placed, r.Where)
			mu.Unlock()
		})
	}
	// Four fit beside the first; the other two wait until one is freed.
	deadline := time.Now().Add(3 * time.Second)
	for {
		mu.Lock()
		got, w := len(placed), waits
		mu.Unlock()
		if got == 4 && w == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d placed and %d waiting, want 4 and 2", got, w)
		}
		time.Sleep(10 * time.Millisecond)
	}
	first.Proc.Stop(time.Second)
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	got := len(placed)
	mu.Unlock()
	if got != 5 {
		t.Fatalf("%d placed after a slot was freed, want 5", got)
	}
	// The last one waits on, until its ctx ends.
	cancel(done)
	for _, s := range []*fakeStarter{a, b} {
		if _, most, _ := s.stats(); most > 3 {
			t.Fatalf("a host ran %d agents at once, more than its capacity", most)
		}
	}
	if _, most, _ := b.stats(); most > 2 {
		t.Fatalf("b ran %d agents at once, capacity 2", most)
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if waits != 2 {
		t.Fatalf("onWait called %d times, want once for each of the 2 that waited", waits)
	}
}

func TestPlacement_WaitEndsWithCtxCause(t *testing.T) {
	ns := runNATS(t, 0, 0)
	serve(t, dial(t, ns.ClientURL()), &fakeStarter{}, ServerOptions{Name: "a", Capacity: 1})
	c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{})
	waitHosts(t, c, 1)
	if _, err := c.Start(t.Context(), "t1", "p", nil, nil); err != nil {
		t.Fatal(err)
	}
	cause := errors.New("the thread was reset")
	ctx, cancel := context.WithCancelCause(t.Context())
	waited := make(chan struct{})
	go func() {
		<-waited
		cancel(cause)
	}()
	_, err := c.Start(ctx, "t2", "p", nil, func() { close(waited) })
	if !errors.Is(err, cause) {
		t.Fatalf("Start = %v, want the ctx's cause", err)
	}
}

// stuckStarter's agents do not stop when released: only a Kill ends them.
type stuckStarter struct{ fakeStarter }

func (s *stuckStarter) Start(ctx context.Context, thread, profile string) (Started, error) {
	st, err := s.fakeStarter.Start(ctx, thread, profile)
	if err != nil {
		return st, err
	}
	p := st.Proc.(*fakeProc)
	release := st.Release
	st.Release = func() {
		<-p.exited // waits for a Kill that Release itself never gives
		release()
	}
	return st, nil
}

// Server.Close gives each agent until its ctx ends, then kills it.
func TestServerClose_KillsAgentsPastTheDeadline(t *testing.T) {
	ns := runNATS(t, 0, 0)
	st := &stuckStarter{}
	srv, err := Serve(dial(t, ns.ClientURL()), st, ServerOptions{Name: "h1", Profiles: []string{"p"}, Capacity: 4, BeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{})
	waitHosts(t, c, 1)
	for i := range 3 {
		if _, err := c.Start(t.Context(), fmt.Sprint("t", i), "p", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	srv.Close(ctx)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Close took %s with a 500ms deadline", d)
	}
	if running, _, released := st.stats(); running != 0 || released != 3 {
		t.Fatalf("after Close: %d running, %d released; want 0 and 3", running, released)
	}
}

func TestMetrics_HostsAgentsAndRelay(t *testing.T) {
	ns := runNATS(t, 0, 0)
	srv := serve(t, dial(t, ns.ClientURL()), &procStarter{argv: []string{"cat"}, dir: t.TempDir()}, ServerOptions{Name: "h1", Capacity: 3})
	c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{})
	waitHosts(t, c, 1)
	r, readerDone := startCat(t, c)
	defer close(readerDone)
	if _, err := io.WriteString(r.Proc.Stdin(), "ping\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(r.Proc.Stdout(), make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	for _, m := range []struct {
		name, label string
		want        float64
	}{
		{"acp_broker_cluster_hosts", "", 1},
		{"acp_broker_cluster_hosts_lost_total", "", 0},
		{"acp_broker_cluster_agents", "h1", 1},
		{"acp_broker_cluster_relayed_bytes_total", "sent", 5},
		{"acp_broker_cluster_relayed_bytes_total", "received", 5},
		{"acp_broker_cluster_relayed_messages_total", "sent", 1},
	} {
		if got := gathered(t, reg, m.name, m.label); got != m.want {
			t.Errorf("%s{%s} = %v, want %v", m.name, m.label, got, m.want)
		}
	}
	hreg := prometheus.NewPedanticRegistry()
	hreg.MustRegister(srv)
	for _, m := range []struct {
		name, label string
		want        float64
	}{
		{"acp_broker_host_agents", "", 1},
		{"acp_broker_host_capacity", "", 3},
		{"acp_broker_host_relayed_bytes_total", "sent", 5},
		{"acp_broker_host_relayed_bytes_total", "received", 5},
	} {
		if got := gathered(t, hreg, m.name, m.label); got != m.want {
			t.Errorf("%s{%s} = %v, want %v", m.name, m.label, got, m.want)
		}
	}
}

// gathered is the value of the metric name whose one label (if any) is
// label; -1 when there is none.
func gathered(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label != "" && (len(m.GetLabel()) != 1 || m.GetLabel()[0].GetValue() != label) {
				continue
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return -1
}

// slowStarter takes its time to start an agent.
type slowStarter struct {
	fakeStarter
	delay time.Duration
}

func (s *slowStarter) Start(ctx context.Context, thread, profile string) (Started, error) {
	time.Sleep(s.delay)
	return s.fakeStarter.Start(ctx, thread, profile)
}

// An agent the broker gave up on while the host was starting it is
// stopped: the host's beat lists it, the broker knows it not, and tells
// the host to release it.
func TestOrphan_AgentStartedAfterTheBrokerGaveUpIsReleased(t *testing.T) {
	ns := runNATS(t, 0, 0)
	st := &slowStarter{delay: 500 * time.Millisecond}
	serve(t, dial(t, ns.ClientURL()), st, ServerOptions{Name: "h1"})
	c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{})
	waitHosts(t, c, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := c.Start(ctx, "t", "p", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start = %v, want the ctx's deadline", err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		running, most, released := st.stats()
		if most == 1 && running == 0 && released == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the host runs %d agents (%d released): the one given up on is still running", running, released)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fullStarter has no room, whatever its host announces.
type fullStarter struct{}

func (fullStarter) Start(context.Context, string, string) (Started, error) {
	return Started{}, fmt.Errorf("the pool's slots are taken: %w", ErrFull)
}

// A host that refuses for lack of room sends the start to the next.
func TestPlacement_RefusalTriesTheNextHost(t *testing.T) {
	ns := runNATS(t, 0, 0)
	serve(t, dial(t, ns.ClientURL()), fullStarter{}, ServerOptions{Name: "a", Capacity: 4})
	serve(t, dial(t, ns.ClientURL()), &fakeStarter{}, ServerOptions{Name: "b", Capacity: 1})
	c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{})
	waitHosts(t, c, 2)
	r, err := c.Start(t.Context(), "t", "p", nil, func() { t.Error("waited while b had room") })
	if err != nil {
		t.Fatal(err)
	}
	if r.Where != "b" || r.Proc == nil || r.Host == nil {
		t.Fatalf("Start = %+v, want an agent on b", r)
	}
}

// A host that shuts down stops its agents and tells their brokers why.
func TestServerClose_BrokersAreTold(t *testing.T) {
	ns := runNATS(t, 0, 0)
	srv, err := Serve(dial(t, ns.ClientURL()), &procStarter{argv: []string{"cat"}, dir: t.TempDir()}, ServerOptions{Name: "h1", Profiles: []string{"p"}, Capacity: 2, BeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{HostTimeout: 20 * time.Second})
	waitHosts(t, c, 1)
	r, readerDone := startCat(t, c)
	go func() { // the reader a Conn would be
		_, _ = io.Copy(io.Discard, r.Proc.Stdout())
		close(readerDone)
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	srv.Close(ctx)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %s for an agent that ends at its stdin's close", d)
	}
	select {
	case <-r.Proc.Reaped():
	case <-time.After(2 * time.Second):
		t.Fatal("the broker was not told of its agent's end")
	}
	if err := r.Proc.ExitErr(); err == nil || !strings.HasPrefix(err.Error(), "agent host h1 is shutting down (") {
		t.Fatalf("ExitErr = %v, want the host's words", err)
	}
}

// A thread whose workspace is on a host stays there while the host lives:
// it goes there though another host has more room, waits there when it is
// full, and goes elsewhere only once the host is lost.
func TestPlacement_AThreadStaysOnItsHostWhileItLives(t *testing.T) {
	ns := runNATS(t, 0, 0)
	ncA := dial(t, ns.ClientURL())
	serve(t, ncA, &fakeStarter{}, ServerOptions{Name: "a", Capacity: 1})
	serve(t, dial(t, ns.ClientURL()), &fakeStarter{}, ServerOptions{Name: "b", Capacity: 8})
	c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{HostTimeout: time.Second})
	waitHosts(t, c, 2)
	r, err := c.StartPreferring(t.Context(), "t1", "p", nil, "a", nil)
	if err != nil || r.Where != "a" {
		t.Fatalf("a thread of host a was placed on %q (%v), want a", r.Where, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
	defer cancel()
	waited := false
	if r, err := c.StartPreferring(ctx, "t2", "p", nil, "a", func() { waited = true }); err == nil || !waited {
		t.Fatalf("a thread of host a, full, was placed on %q (%v; waited %v), want a wait for a", r.Where, err, waited)
	}
	ncA.Close()
	start := time.Now()
	r, err = c.StartPreferring(t.Context(), "t3", "p", nil, "a", nil)
	if err != nil || r.Where != "b" {
		t.Fatalf("with host a lost the thread was placed on %q (%v), want b", r.Where, err)
	}
	t.Logf("moved to b %s after a went silent", time.Since(start).Round(10*time.Millisecond))
}

// usageStarter's agents say they use 64 MiB and 2s of CPU.
type usageStarter struct{ fakeStarter }

func (s *usageStarter) Start(ctx context.Context, thread, profile string) (Started, error) {
	st, err := s.fakeStarter.Start(ctx, thread, profile)
	st.Usage = func() (pool.Usage, error) {
		return pool.Usage{Memory: 64 << 20, CPU: 2 * time.Second, CPUCounted: true, Source: pool.UsageCgroup}, nil
	}
	return st, err
}

// What an agent on a host uses travels with the host's beat: the broker's
// stand-in says it, and says in words that the host has not yet.
func TestUsage_TheHostsBeatSaysWhatEachAgentUses(t *testing.T) {
	ns := runNATS(t, 0, 0)
	serve(t, dial(t, ns.ClientURL()), &usageStarter{}, ServerOptions{Name: "a", Capacity: 2, BeatInterval: 100 * time.Millisecond})
	c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{})
	waitHosts(t, c, 1)
	r, err := c.Start(t.Context(), "t", "p", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rep, ok := r.Proc.(pool.UsageReporter)
	if !ok {
		t.Fatal("an agent on a host does not say what it uses")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		u, err := rep.Usage()
		if err == nil {
			if u.Memory != 64<<20 || u.CPU != 2*time.Second || u.Source != pool.UsageCgroup {
				t.Errorf("usage %+v", u)
			}
			return
		}
		if !strings.Contains(err.Error(), "agent host a") {
			t.Fatalf("before a beat: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no beat told the usage: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// turnStarter's agents count the turns their host was told had ended,
// each AfterTurn taking a while.
type turnStarter struct {
	fakeStarter
	mu    sync.Mutex
	turns int
	most  int // AfterTurns running at once, at most
	now   int
}

func (s *turnStarter) Start(ctx context.Context, thread, profile string) (Started, error) {
	st, err := s.fakeStarter.Start(ctx, thread, profile)
	st.AfterTurn = func(ctx context.Context) error {
		s.mu.Lock()
		s.turns++
		s.now++
		s.most = max(s.most, s.now)
		s.mu.Unlock()
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
		s.mu.Lock()
		s.now--
		s.mu.Unlock()
		return nil
	}
	return st, err
}

// The host runs a thread's AfterTurn when its broker says a turn ended:
// one at a time, and once more for turns that ended while one ran.
func TestAfterTurn_RunsOnTheHostOneAtATime(t *testing.T) {
	ns := runNATS(t, 0, 0)
	s := &turnStarter{}
	serve(t, dial(t, ns.ClientURL()), s, ServerOptions{Name: "a", Capacity: 2})
	c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{})
	waitHosts(t, c, 1)
	r, err := c.Start(t.Context(), "t", "p", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	te, ok := r.Proc.(pool.TurnEnder)
	if !ok {
		t.Fatal("an agent on a host is not told its turns' ends")
	}
	for range 5 {
		te.TurnEnded()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		turns, most, now := s.turns, s.most, s.now
		s.mu.Unlock()
		if turns >= 2 && now == 0 {
			if most != 1 || turns > 2 {
				t.Errorf("%d AfterTurns ran, %d at once; want the first and one more for the four ended while it ran", turns, most)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d AfterTurns ran", turns)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Closing the files and terminals of an agent that has ended asks its host
// nothing: the host let them go with the agent, and a request it might
// not answer any more would hold the agent's slot for the call's timeout.
func TestClose_AfterTheAgentEndedAsksNothing(t *testing.T) {
	ns := runNATS(t, 0, 0)
	serve(t, dial(t, ns.ClientURL()), &fakeStarter{}, ServerOptions{Name: "a", Capacity: 1})
	c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{CallTimeout: 2 * time.Second})
	waitHosts(t, c, 1)
	r, err := c.Start(t.Context(), "t", "p", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Its stdout read to the end, as a Conn reads it: the end comes after.
	readerDone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, r.Proc.Stdout())
		close(readerDone)
	}()
	r.Proc.Monitor(readerDone)
	r.Proc.Kill()
	select {
	case <-r.Proc.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("the killed agent's end never came")
	}
	// A subscriber that takes every control request and answers none, as
	// a host letting the agent go might.
	silent := dial(t, ns.ClientURL())
	var asked atomic.Int32
	if _, err := silent.Subscribe(agentSubject(r.Proc.(*remoteProc).id, "ctl"), func(*nats.Msg) { asked.Add(1) }); err != nil {
		t.Fatal(err)
	}
	silent.Flush()
	start := time.Now()
	if err := r.Host.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if d := time.Since(start); d > time.Second || asked.Load() != 0 {
		t.Errorf("Close after the agent ended took %s and asked the host %d times", d, asked.Load())
	}
}

// askedStarter tells when it is asked to start, then starts as slowly as
// slowStarter.
type askedStarter struct {
	slowStarter
	once  sync.Once
	asked chan struct{}
}

func (s *askedStarter) Start(ctx context.Context, thread, profile string) (Started, error) {
	s.once.Do(func() { close(s.asked) })
	return s.slowStarter.Start(ctx, thread, profile)
}

// A start asked of a host that falls silent before it answers goes to
// the next host once the silent one is lost, not after StartTimeout.
func TestPlacement_AStartOnAHostLostGoesToTheNext(t *testing.T) {
	ns := runNATS(t, 0, 0)
	relay := newSilencer(t, ns.Addr().String())
	aConn := dial(t, "nats://"+relay.ln.Addr().String())
	a := &askedStarter{slowStarter: slowStarter{delay: 2 * time.Second}, asked: make(chan struct{})}
	serve(t, aConn, a, ServerOptions{Name: "a", Capacity: 4})
	serve(t, dial(t, ns.ClientURL()), &fakeStarter{}, ServerOptions{Name: "b", Capacity: 1})
	c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{HostTimeout: time.Second, StartTimeout: 20 * time.Second})
	waitHosts(t, c, 2)
	type result struct {
		r   pool.Remote
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := c.Start(t.Context(), "t", "p", nil, nil)
		done <- result{r, err}
	}()
	select {
	case <-a.asked:
	case <-time.After(5 * time.Second):
		t.Fatal("the start was not asked of a, the least loaded host")
	}
	relay.silence() // a partition: a hears nothing and is not heard
	silent := time.Now()
	select {
	case res := <-done:
		if res.err != nil || res.r.Where != "b" {
			t.Fatalf("Start = %+v, %v; want an agent on b", res.r, res.err)
		}
		res.r.Proc.Kill()
		t.Logf("started on b %s after a fell silent", time.Since(silent).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("the start still waits on a host lost (HostTimeout 1s) 5s after it fell silent")
	}
}
