package cluster

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/internal/eventually"
)

// readExactly reads len(want) bytes from r within 5 s and says whether
// they are want.
func readExactly(t *testing.T, r io.Reader, want string) {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		b := make([]byte, len(want))
		n, _ := io.ReadFull(r, b)
		got <- string(b[:n])
	}()
	select {
	case s := <-got:
		if s != want {
			t.Fatalf("read %q, want %q", s, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%q did not come within 5s", want)
	}
}

// adopted calls c.Adopt and returns the first n agents taken over, within
// 10 s.
func adopted(t *testing.T, c *Client, n int) []Adoptee {
	t.Helper()
	ch := make(chan Adoptee, 64)
	c.Adopt(func(a Adoptee) { ch <- a })
	var got []Adoptee
	timeout := time.After(10 * time.Second)
	for len(got) < n {
		select {
		case a := <-ch:
			got = append(got, a)
		case <-timeout:
			t.Fatalf("%d agents taken over within 10s, want %d", len(got), n)
		}
	}
	return got
}

// A broker that crashed and came back takes over the agent its earlier run
// started: the same process, what the earlier run kept beside it, the
// output the earlier run had not consumed, and what it writes from then
// on, both ways.
func TestAdopt_ANewRunTakesOverTheAgentAndItsStreams(t *testing.T) {
	ns := runNATS(t, 0, 0)
	st := &procStarter{argv: []string{"cat"}, dir: t.TempDir()}
	serve(t, dial(t, ns.ClientURL()), st, ServerOptions{Name: "h1", OwnerTimeout: time.Minute})
	oldConn := dial(t, ns.ClientURL())
	old := newClient(t, oldConn, ClientOptions{Broker: "b", CallTimeout: time.Second})
	waitHosts(t, old, 1)
	r, err := old.Start(t.Context(), "thread-1", "p", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	oldDone := make(chan struct{})
	r.Proc.Monitor(oldDone)
	r.Proc.(*remoteProc).Keep([]byte(`{"session":"s1"}`))
	if _, err := io.WriteString(r.Proc.Stdin(), "one\n"); err != nil {
		t.Fatal(err)
	}
	readExactly(t, r.Proc.Stdout(), "one\n")
	if _, err := io.WriteString(r.Proc.Stdin(), "two\n"); err != nil {
		t.Fatal(err)
	}
	// "two" reaches the old run, which never reads it, then crashes.
	eventually.True(t, "the old run holds the echo", func() bool {
		rp := r.Proc.(*remoteProc)
		rp.stdout.mu.Lock()
		defer rp.stdout.mu.Unlock()
		return rp.stdout.held == len("two\n")
	})
	oldConn.Close()
	close(oldDone)

	c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{Broker: "b"})
	got := adopted(t, c, 1)
	if len(got) != 1 {
		t.Fatalf("%d agents taken over, want 1", len(got))
	}
	ad := got[0]
	if ad.Thread != "thread-1" || ad.Profile != "p" || string(ad.Kept) != `{"session":"s1"}` || ad.Remote.Where != "h1" || ad.Remote.Proc.PID() != r.Proc.PID() {
		t.Fatalf("taken over: thread %q, profile %q, kept %q, on %q, pid %d (was %d)", ad.Thread, ad.Profile, ad.Kept, ad.Remote.Where, ad.Remote.Proc.PID(), r.Proc.PID())
	}
	readerDone := make(chan struct{})
	ad.Remote.Proc.Monitor(readerDone)
	out := ad.Remote.Proc.Stdout()
	readExactly(t, out, "two\n")
	if _, err := io.WriteString(ad.Remote.Proc.Stdin(), "three\n"); err != nil {
		t.Fatal(err)
	}
	readExactly(t, out, "three\n")
	if started, released := st.counts(); started != 1 || released != 0 {
		t.Fatalf("the host started %d agents and released %d; want the one, still running", started, released)
	}
	// A host's beat now names the agent as the new run's: it is not an
	// orphan to stop.
	time.Sleep(500 * time.Millisecond)
	if _, released := st.counts(); released != 0 {
		t.Fatal("the host released the agent taken over")
	}
	if err := ad.Remote.Proc.Stdin().Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(out); err != nil {
		t.Fatal(err)
	}
	close(readerDone)
	select {
	case <-ad.Remote.Proc.Reaped():
	case <-time.After(5 * time.Second):
		t.Fatal("the agent's end did not reach the new run")
	}
}

// A new run that does not take the earlier run's agents over within
// OwnerTimeout has them stopped; one that lets an agent go has it stopped
// at once.
func TestAdopt_AgentsNotTakenOverAreStopped(t *testing.T) {
	ns := runNATS(t, 0, 0)
	st := &fakeStarter{}
	serve(t, dial(t, ns.ClientURL()), st, ServerOptions{Name: "h1", OwnerTimeout: time.Second})
	oldConn := dial(t, ns.ClientURL())
	old := newClient(t, oldConn, ClientOptions{Broker: "b", CallTimeout: time.Second})
	waitHosts(t, old, 1)
	for _, thread := range []string{"t1", "t2"} {
		if _, err := old.Start(t.Context(), thread, "p", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	oldConn.Close()
	c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{Broker: "b"})
	got := adopted(t, c, 2)
	if len(got) != 2 {
		t.Fatalf("%d agents taken over, want 2", len(got))
	}
	start := time.Now()
	got[0].LetGo()
	eventually.True(t, "the agent let go stopped", func() bool { _, _, released := st.stats(); return released == 1 })
	if took := time.Since(start); took > 900*time.Millisecond {
		t.Errorf("the agent let go was stopped after %s, not at once", took)
	}
	if running, _, _ := st.stats(); running != 1 {
		t.Fatalf("%d agents run, want the one taken over", running)
	}

	// A third run that takes nothing over: the host waits OwnerTimeout
	// for it, then stops the agent.
	newClient(t, dial(t, ns.ClientURL()), ClientOptions{Broker: "b"})
	start = time.Now()
	eventually.True(t, "the agent not taken over stopped", func() bool { running, _, _ := st.stats(); return running == 0 })
	if took := time.Since(start); took < 700*time.Millisecond {
		t.Errorf("the agent was stopped %s after the new run came, before CutTimeout (1s)", took)
	}
}

// A broker with its NATS server inside restarts both: the hosts come
// back after the new run has started, and the agents they kept are taken
// over then.
func TestAdopt_AHostHeardAfterTheStartIsAskedToo(t *testing.T) {
	first := runNATS(t, 0, 0)
	port := natsPort(first)
	st := &fakeStarter{}
	srv := serve(t, dial(t, first.ClientURL()), st, ServerOptions{Name: "h1", OwnerTimeout: time.Minute})
	oldConn := dial(t, first.ClientURL())
	old := newClient(t, oldConn, ClientOptions{Broker: "b", CallTimeout: time.Second})
	waitHosts(t, old, 1)
	if _, err := old.Start(t.Context(), "t1", "p", nil, nil); err != nil {
		t.Fatal(err)
	}
	oldConn.Close()
	first.Shutdown()
	first.WaitForShutdown()
	second := runNATS(t, port, 0)
	t.Cleanup(func() { srv.Close(context.Background()) }) // while its NATS server runs
	c := newClient(t, dial(t, second.ClientURL()), ClientOptions{Broker: "b"})
	asked := time.Now()
	got := adopted(t, c, 1)
	t.Logf("taken over %s after the new run asked", time.Since(asked).Round(time.Millisecond))
	if got[0].Thread != "t1" {
		t.Fatalf("taken over: %+v", got[0])
	}
	if running, _, released := st.stats(); running != 1 || released != 0 {
		t.Fatalf("the host runs %d agents and released %d; want the one taken over", running, released)
	}
}

// A host cut off from its NATS server for longer than CutTimeout stops
// its agents: a cluster gone for so long will not take them up.
func TestAdopt_AHostCutOffLongStopsItsAgents(t *testing.T) {
	ns := runNATS(t, 0, 0)
	st := &fakeStarter{}
	srv := serve(t, dial(t, ns.ClientURL()), st, ServerOptions{Name: "h1", OwnerTimeout: time.Minute, CutTimeout: time.Second})
	t.Cleanup(func() { srv.Close(context.Background()) })
	c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{Broker: "b", CallTimeout: time.Second})
	waitHosts(t, c, 1)
	if _, err := c.Start(t.Context(), "t1", "p", nil, nil); err != nil {
		t.Fatal(err)
	}
	ns.Shutdown()
	ns.WaitForShutdown()
	cut := time.Now()
	eventually.True(t, "the agent stopped", func() bool { _, _, released := st.stats(); return released == 1 })
	if took := time.Since(cut); took < 700*time.Millisecond {
		t.Errorf("the agent was stopped %s after the cut, before CutTimeout (1s)", took)
	}
}

// An agent a stopping broker leaves stays on its host through the
// broker's last beats and its close, for the next run to take over.
func TestAdopt_AnAgentLeftIsNotReleasedByItsBroker(t *testing.T) {
	ns := runNATS(t, 0, 0)
	st := &fakeStarter{}
	serve(t, dial(t, ns.ClientURL()), st, ServerOptions{Name: "h1", OwnerTimeout: time.Minute})
	old := newClient(t, dial(t, ns.ClientURL()), ClientOptions{Broker: "b", CallTimeout: time.Second})
	waitHosts(t, old, 1)
	r, err := old.Start(t.Context(), "t1", "p", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Proc.(*remoteProc).Leave()
	time.Sleep(500 * time.Millisecond) // the host beats every 100 ms
	old.Close()
	if _, _, released := st.stats(); released != 0 {
		t.Fatal("the broker that left the agent had its host stop it")
	}
	c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{Broker: "b"})
	if got := adopted(t, c, 1); got[0].Thread != "t1" {
		t.Fatalf("taken over: %+v", got[0])
	}
}

// mcpStarter is a fakeStarter whose profile, as the host defines it, has
// MCP servers.
type mcpStarter struct {
	fakeStarter
	servers []acp.MCPServer
}

func (s *mcpStarter) Start(ctx context.Context, thread, profile string) (Started, error) {
	st, err := s.fakeStarter.Start(ctx, thread, profile)
	st.MCPServers = s.servers
	return st, err
}

// A host says which MCP servers its definition of the profile has, at a
// start and at a hand-over: none is said as none, not as nothing said.
func TestStart_TheHostSaysItsMCPServers(t *testing.T) {
	ns := runNATS(t, 0, 0)
	st := &mcpStarter{servers: []acp.MCPServer{{Name: "tool", Command: "/usr/bin/tool", Args: []string{"--stdio"}}}}
	serve(t, dial(t, ns.ClientURL()), st, ServerOptions{Name: "h1", OwnerTimeout: time.Minute})
	serve(t, dial(t, ns.ClientURL()), &fakeStarter{}, ServerOptions{Name: "h2", Labels: []string{"none=yes"}})
	oldConn := dial(t, ns.ClientURL())
	c := newClient(t, oldConn, ClientOptions{Broker: "b", CallTimeout: time.Second})
	waitHosts(t, c, 2)
	r, err := c.Start(t.Context(), "t1", "p", []string{"none=yes"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.HostMCP || len(r.MCPServers) != 0 {
		t.Fatalf("a host with no MCP servers: HostMCP %v, %+v", r.HostMCP, r.MCPServers)
	}
	r, err = c.StartPreferring(t.Context(), "t2", "p", nil, "h1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.HostMCP || len(r.MCPServers) != 1 || r.MCPServers[0].Command != "/usr/bin/tool" || r.MCPServers[0].Args[0] != "--stdio" {
		t.Fatalf("the host's MCP servers: HostMCP %v, %+v", r.HostMCP, r.MCPServers)
	}
	oldConn.Close()
	for _, ad := range adopted(t, newClient(t, dial(t, ns.ClientURL()), ClientOptions{Broker: "b"}), 2) {
		if want := map[string]int{"t1": 0, "t2": 1}[ad.Thread]; !ad.Remote.HostMCP || len(ad.Remote.MCPServers) != want {
			t.Errorf("%s handed over: HostMCP %v, %+v", ad.Thread, ad.Remote.HostMCP, ad.Remote.MCPServers)
		}
	}
}

// An agent left by a broker no run of which comes back is stopped once
// the host has waited OwnerTimeout for one; a host that closes stops a
// left agent at once, with no broker to read its end.
func TestAdopt_AnAgentLeftAndNotTakenOverIsStopped(t *testing.T) {
	for _, closing := range []bool{false, true} {
		ns := runNATS(t, 0, 0)
		st := &fakeStarter{}
		srv := serve(t, dial(t, ns.ClientURL()), st, ServerOptions{Name: fmt.Sprint("h", closing), OwnerTimeout: time.Second})
		c := newClient(t, dial(t, ns.ClientURL()), ClientOptions{Broker: fmt.Sprint("b", closing), CallTimeout: time.Second})
		waitHosts(t, c, 1)
		r, err := c.Start(t.Context(), "t1", "p", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Proc.(*remoteProc).Leave()
		left := time.Now()
		if closing {
			srv.Close(context.Background())
			if took := time.Since(left); took > 2*time.Second {
				t.Errorf("the host took %s to close with a left agent", took)
			}
		} else {
			eventually.True(t, "the left agent stopped", func() bool { _, _, released := st.stats(); return released == 1 })
			if took := time.Since(left); took < 700*time.Millisecond {
				t.Errorf("the left agent was stopped %s after it was left, before OwnerTimeout (1s)", took)
			}
		}
		if _, _, released := st.stats(); released != 1 {
			t.Errorf("closing %v: %d released", closing, released)
		}
		c.Close()
	}
}

// A note too big to keep clears the one kept before, which would say
// what is no longer so: the agent is handed over with nothing kept.
func TestAdopt_ANoteTooBigClearsTheOneKept(t *testing.T) {
	ns := runNATS(t, 0, 0)
	serve(t, dial(t, ns.ClientURL()), &fakeStarter{}, ServerOptions{Name: "h1", OwnerTimeout: time.Minute})
	oldConn := dial(t, ns.ClientURL())
	old := newClient(t, oldConn, ClientOptions{Broker: "b", CallTimeout: time.Second})
	waitHosts(t, old, 1)
	r, err := old.Start(t.Context(), "t1", "p", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rp := r.Proc.(*remoteProc)
	rp.Keep([]byte(`{"busy":false}`))
	rp.Keep(make([]byte, maxKept+1))
	eventually.True(t, "the host cleared its note", func() bool {
		var kept keptResult
		return rp.call(t.Context(), ctlKept, nil, &kept) == nil && (len(kept.Note) == 0 || string(kept.Note) == "null")
	})
	oldConn.Close()
	if got := adopted(t, newClient(t, dial(t, ns.ClientURL()), ClientOptions{Broker: "b"}), 1); got[0].Kept != nil {
		t.Fatalf("handed over with %q kept", got[0].Kept)
	}
}
