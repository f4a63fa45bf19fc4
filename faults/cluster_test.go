package faults

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"acpbroker/internal/brokertest"

	"github.com/nats-io/nats-server/v2/server"
)

// The cluster's credentials in these tests.
const (
	clusterUser     = "acp"
	clusterPassword = "cluster-test-password"
)

// freeLoopback is a free TCP address on 127.0.0.1.
func freeLoopback(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// clusterWorld is a world whose broker serves the cluster's NATS itself
// (cluster.embedded) on a free loopback port, with a password.
func clusterWorld(t *testing.T, conf settings) (*world, string) {
	t.Helper()
	needBwrap(t)
	addr := freeLoopback(t)
	w := newWorld(t, setup{conf: settings{
		"cluster.embedded":  true,
		"cluster.listen":    addr,
		"cluster.user":      clusterUser,
		"cluster.password":  clusterPassword,
		"pool.max_sessions": 64,
	}.With(conf)})
	return w, "nats://" + addr
}

// host starts agent host name on the cluster at url, with the cluster's
// credentials and conf over them.
func (w *world) host(name, url string, conf settings) *brokertest.Broker {
	w.t.Helper()
	return brokertest.MustGet(w.t, patience, func(ctx context.Context) (*brokertest.Broker, error) {
		return w.StartHost(ctx, name, settings{
			"cluster.url":      url,
			"cluster.user":     clusterUser,
			"cluster.password": clusterPassword,
		}.With(conf))
	})
}

// whereFrom is the host whose work directory an answer to "run pwd"
// names ("" if none).
func whereFrom(answer string) string {
	i := strings.Index(answer, "/host-")
	if i < 0 {
		return ""
	}
	name, _, _ := strings.Cut(answer[i+len("/host-"):], "/")
	return name
}

// A broker and three hosts: fifty threads are spread over the hosts, and
// each is answered by an agent that runs there, in the host's own work
// directory.
func TestCluster_ThreadsSpreadOverTheHostsAndEachIsAnswered(t *testing.T) {
	w, url := clusterWorld(t, nil)
	b := w.start()
	for _, name := range []string{"a", "b", "c"} {
		w.host(name, url, settings{"host.capacity": 20})
	}
	const n = 50
	threads := make([]string, n)
	for i := range threads {
		threads[i] = w.mention(alice, "run pwd")
	}
	per := map[string]int{}
	for _, th := range threads {
		got := w.awaitAnswers(th, 1)[0].Text
		where := whereFrom(got)
		if where == "" {
			t.Errorf("thread %s was answered %q, not from a host's directory", th, got)
		}
		per[where]++
	}
	for _, name := range []string{"a", "b", "c"} {
		if per[name] == 0 {
			t.Errorf("host %s ran none of the %d threads: %v", name, n, per)
		}
	}
	if live := b.awaitMetric("acp_broker_agents_live", func(v float64) bool { return v == n }); live != n {
		t.Errorf("the broker counts %v agents, want %d", live, n)
	}
	st := status(t, w)
	if len(st.Hosts) != 3 {
		t.Fatalf("broker status shows %d hosts: %+v", len(st.Hosts), st.Hosts)
	}
	for _, h := range st.Hosts {
		if h.Agents != per[h.Name] || h.Capacity != 20 || h.Lost || len(h.Profiles) == 0 {
			t.Errorf("broker status shows host %+v; it ran %d of the threads", h, per[h.Name])
		}
	}
	for _, th := range st.Threads {
		if th.Agent == nil || th.Agent.Host == "" {
			t.Errorf("broker status shows thread %s's agent as %+v", th.ID, th.Agent)
		}
	}
	// What each agent uses comes with its host's next beat (every 2s).
	deadline := time.Now().Add(10 * time.Second)
	for counted := 0; counted < n; {
		counted = 0
		for _, th := range status(t, w).Threads {
			if a := th.Agent; a != nil && a.UsageError == "" && a.MemoryBytes > 0 {
				counted++
			} else if time.Now().After(deadline) {
				t.Fatalf("broker status shows thread %s's agent as %+v, with no usage from its host", th.ID, a)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("threads per host: %v", per)
}

// A host killed with SIGKILL in the middle of a turn: the thread is told
// in words within host_timeout (10s) and a beat, nothing is left
// waiting, and the thread's next message is answered on the other host,
// which says it starts in a fresh directory.
func TestCluster_AHostKilledMidTurnIsToldAndTheNextMessageRunsElsewhere(t *testing.T) {
	w, url := clusterWorld(t, nil)
	w.start()
	hosts := map[string]*brokertest.Broker{"a": w.host("a", url, nil), "b": w.host("b", url, nil)}
	thread := w.mention(alice, "run pwd")
	first := whereFrom(w.awaitAnswers(thread, 1)[0].Text)
	if hosts[first] == nil {
		t.Fatalf("the first answer names no host: %q", w.awaitAnswers(thread, 1)[0].Text)
	}
	before := len(w.Discord.BotMessages(thread))
	w.Discord.Post(thread, alice, "hang")
	w.awaitNewBotText(thread, "working…", before)
	killed := time.Now()
	hosts[first].Kill()
	msg := w.awaitNewBotText(thread, "stopped answering", before)
	told := time.Since(killed)
	if told > 10*time.Second {
		t.Errorf("the thread was told %s after its host was killed, want within 10s", told)
	}
	if !strings.Contains(msg.Content, first) {
		t.Errorf("the words do not name the host %q: %q", first, msg.Content)
	}
	w.Discord.Post(thread, alice, "run pwd")
	answers := w.awaitAnswers(thread, 3)
	next := whereFrom(answers[len(answers)-1].Text)
	if next == "" || next == first {
		t.Errorf("the next message ran on %q, want the other host (the first was %q)", next, first)
	}
	moved := "This thread's agent now runs on agent host " + next + ", in a fresh workspace: the files of its earlier one stayed on " + first
	if !strings.Contains(answers[len(answers)-1].Text, moved) {
		t.Errorf("the thread is not told it starts afresh on %s: %q", next, answers[len(answers)-1].Text)
	}
	t.Logf("told %s after the kill", told.Round(time.Millisecond))
}

// hostMidTurn starts a broker of conf and its host a, and a thread whose
// turn runs on a until it is cancelled.
func hostMidTurn(t *testing.T, conf settings) (w *world, url string, a *brokertest.Broker, thread string) {
	t.Helper()
	w, url = clusterWorld(t, conf)
	w.start()
	a = w.host("a", url, nil)
	thread = w.mention(alice, "hang")
	w.awaitBotText(thread, "working…")
	return w, url, a, thread
}

// A host killed with SIGKILL mid-turn and started again at once: the
// broker hears its new run before host_timeout, and tells the thread its
// agent is gone with the host's restart; the next message runs on it.
func TestCluster_AHostRestartedMidTurnIsTold(t *testing.T) {
	w, url, h, thread := hostMidTurn(t, nil)
	killed := time.Now()
	h.Kill()
	w.host("a", url, nil)
	msg := w.awaitBotText(thread, "restarted")
	told := time.Since(killed)
	if told > 8*time.Second || !strings.Contains(msg.Content, "agent host a restarted") {
		t.Errorf("the thread was told %s after its host was killed and started again (host_timeout 8s): %q", told, msg.Content)
	}
	w.Discord.Post(thread, alice, "run pwd")
	answers := w.awaitAnswers(thread, 2)
	if where := whereFrom(answers[len(answers)-1].Text); where != "a" {
		t.Errorf("the next message was answered %q", answers[len(answers)-1].Text)
	}
	t.Logf("told %s after the kill: %q", told.Round(time.Millisecond), msg.Content)
}

// A clustered broker runs no agent, so its own machine need not have
// what only the hosts use: with an agent program and a working directory
// it lacks, check-config passes and says the hosts check them, the broker
// starts, and a thread is answered by a host that has them. A host that
// lacks the program is refused naming the key, and so is the same broker
// configuration without [cluster].
func TestCluster_ABrokerNeedsNotWhatOnlyItsHostsRun(t *testing.T) {
	const missing = "/nonexistent/agent-of-the-hosts"
	// A working directory no one can make: its parent is a file.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	w, url := clusterWorld(t, settings{"agent.command": missing, "agent.cwd": filepath.Join(file, "work")})
	code, out := runBrokerCommand(t, nil, "check-config", "--config", w.writeConfig())
	if code != 0 || !strings.Contains(out, "each agent host checks its profiles' programs") {
		t.Errorf("check-config of the clustered broker: exit status %d, output %q; want 0, saying the hosts check the programs", code, out)
	}
	w.start()
	w.host("a", url, settings{"agent.command": bins.Agent})
	thread := w.mention(alice, "run pwd")
	if got := w.awaitAnswers(thread, 1)[0].Text; whereFrom(got) != "a" {
		t.Errorf("the thread was answered %q, not from host a's directory", got)
	}

	refused := `agent.command = "` + missing + `": ` + missing + " is not an executable file"
	write := func(s settings) string {
		path := filepath.Join(t.TempDir(), "broker.toml")
		if err := os.WriteFile(path, []byte(s.TOML()), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	host := write(w.HostSettings("b", settings{"cluster.url": url, "cluster.user": clusterUser, "cluster.password": clusterPassword}))
	if code, out := runBrokerCommand(t, nil, "host", "--config", host); code != 2 || !strings.Contains(out, refused) {
		t.Errorf("a host without its agent's program: exit status %d, output %q; want 2 and %q", code, out, refused)
	}
	alone := write(w.Conf.With(settings{"cluster.embedded": nil, "cluster.listen": nil, "cluster.user": nil, "cluster.password": nil}))
	for _, args := range [][]string{{"--config", alone}, {"check-config", "--config", alone}} {
		if code, out := runBrokerCommand(t, nil, args...); code != 2 || !strings.Contains(out, refused) {
			t.Errorf("broker %s without [cluster]: exit status %d, output %q; want 2 and %q", strings.Join(args, " "), code, out, refused)
		}
	}
}

// A host killed while its thread is idle: the thread is told in words
// within host_timeout and a beat (10s), without a new message, naming
// the host and saying where its next message goes and that its files
// stayed behind; the agent's slot is freed at once. The next message
// runs on the other host without being told the same again.
func TestCluster_AHostKilledWhileItsThreadIsIdleIsToldAtOnce(t *testing.T) {
	w, url := clusterWorld(t, nil)
	b := w.start()
	hosts := map[string]*brokertest.Broker{"a": w.host("a", url, nil), "b": w.host("b", url, nil)}
	thread := w.mention(alice, "run pwd")
	first := whereFrom(w.awaitAnswers(thread, 1)[0].Text)
	if hosts[first] == nil {
		t.Fatalf("the first answer names no host: %q", w.awaitAnswers(thread, 1)[0].Text)
	}
	b.awaitMetric("acp_broker_agents_live", func(v float64) bool { return v == 1 })
	before := len(w.Discord.BotMessages(thread))
	killed := time.Now()
	hosts[first].Kill()
	msg := w.awaitNewBotText(thread, "stopped answering", before)
	told := time.Since(killed)
	if told > 10*time.Second {
		t.Errorf("the idle thread was told %s after its host was killed, want within 10s", told)
	}
	for _, want := range []string{"Agent host " + first + ",", "Your next message starts a new one on another agent host", "stayed on " + first} {
		if !strings.Contains(msg.Content, want) {
			t.Errorf("the words %q lack %q", msg.Content, want)
		}
	}
	b.awaitMetric("acp_broker_agents_live", func(v float64) bool { return v == 0 })

	w.Discord.Post(thread, alice, "run pwd")
	answers := w.awaitAnswers(thread, 2)
	last := answers[len(answers)-1].Text
	if next := whereFrom(last); next == "" || next == first {
		t.Errorf("the next message ran on %q, want the other host (the first was %q)", next, first)
	}
	if strings.Contains(last, "now runs on agent host") {
		t.Errorf("the next answer tells the loss again: %q", last)
	}
	n := 0
	for _, m := range w.Discord.BotMessages(thread) {
		n += strings.Count(m.Content, "stopped answering")
	}
	if n != 1 {
		t.Errorf("the thread was told of the loss %d times, want once", n)
	}
	t.Logf("told %s after the kill", told.Round(time.Millisecond))
}

// natsServer runs a NATS server in the test on addr (no credentials:
// it listens on loopback), and returns its stop.
func natsServer(t *testing.T, addr string) func() {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	s, err := server.NewServer(&server.Options{Host: host, Port: p, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("the NATS server did not start")
	}
	var once sync.Once
	stop := func() { once.Do(func() { s.Shutdown(); s.WaitForShutdown() }) }
	t.Cleanup(stop)
	return stop
}

// The NATS server restarted in the middle of a turn: the turn completes
// with every chunk once, in order.
func TestCluster_ANATSRestartMidTurnLosesNothing(t *testing.T) {
	needBwrap(t)
	addr := freeLoopback(t)
	stop := natsServer(t, addr)
	url := "nats://" + addr
	w := newWorld(t, setup{conf: settings{"cluster.url": url}})
	w.start()
	brokertest.MustGet(t, patience, func(ctx context.Context) (*brokertest.Broker, error) {
		return w.StartHost(ctx, "a", settings{"cluster.url": url})
	})
	thread := w.mention(alice, "stream 30 100ms")
	w.awaitNewBotText(thread, "chunk 3", 0)
	stop()
	time.Sleep(time.Second) // NATS is down this long, mid-turn
	natsServer(t, addr)
	got := w.awaitAnswers(thread, 1)[0].Text
	for i := 1; i <= 30; i++ {
		if c := strings.Count(got, fmt.Sprintf("chunk %d\n", i)); c != 1 {
			t.Errorf("chunk %d is in the answer %d times", i, c)
		}
	}
	if i, j := strings.Index(got, "chunk 29\n"), strings.Index(got, "chunk 30\n"); i < 0 || j < i {
		t.Errorf("the answer's end is out of order: %q", got)
	}
}

// A host that does not have the cluster's password is refused: it exits
// non-zero, saying so, and never runs an agent.
func TestCluster_AHostWithoutTheCredentialsIsRefused(t *testing.T) {
	w, url := clusterWorld(t, nil)
	w.start()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	h, err := w.StartHost(ctx, "intruder", settings{"cluster.url": url, "cluster.user": clusterUser, "cluster.password": "wrong"})
	if err == nil {
		h.Kill()
		t.Fatal("a host with the wrong password joined the cluster")
	}
	if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Errorf("the host's refusal does not say why: %v", err)
	}
}

// An agent on a host, in its sandbox, cannot reach the cluster's NATS,
// neither straight nor through its proxy.
func TestCluster_ASandboxedAgentCannotReachNATS(t *testing.T) {
	w, url := clusterWorld(t, nil)
	w.start()
	w.host("a", url, nil)
	natsAddr := strings.TrimPrefix(url, "nats://")
	probes := []string{"tcp:" + natsAddr, "connect:" + natsAddr, "proxy:http://" + natsAddr + "/"}
	thread := w.mention(alice, "probe "+strings.Join(probes, " "))
	got := w.awaitAnswers(thread, 1)[0].Text
	for _, p := range probes {
		if r := probeLine(t, got, p); !strings.HasPrefix(r, "denied") {
			t.Errorf("the agent reached NATS, %s: %s", p, r)
		}
	}
}

// The broker killed with SIGKILL in the middle of a turn on a host and
// started again: the turn is reported interrupted once, the host stops
// the agent the old broker left, and the thread's next message is
// answered.
func TestCluster_ABrokerRestartReportsItsTurnOnceAndTheHostLetsTheOldAgentGo(t *testing.T) {
	w, url := clusterWorld(t, nil)
	b := w.start()
	h := w.host("a", url, nil)
	thread := w.mention(alice, "hang")
	w.awaitBotText(thread, "working…")
	b.Kill()
	if b.Signalled() != syscall.SIGKILL {
		<-b.Done()
	}
	b2 := &broker{Broker: brokertest.MustGet(t, patience, w.Start), t: t}
	t.Cleanup(func() { b2.stop() })
	const report = "The broker restarted while working on your message “hang”"
	msg := w.awaitNewBotText(thread, report, 0)
	hm := brokertest.MustGet(t, patience, func(ctx context.Context) (brokertest.Metrics, error) {
		return h.AwaitMetrics(ctx, 100*time.Millisecond, func(m brokertest.Metrics) bool { return m["acp_broker_agents_live"] == 0 })
	})
	if v := hm["acp_broker_agents_live"]; v != 0 {
		t.Errorf("the host still runs %v agents of the broker that was killed", v)
	}
	w.Discord.Post(thread, alice, "run pwd")
	answers := w.awaitAnswers(thread, 1)
	if whereFrom(answers[len(answers)-1].Text) != "a" {
		t.Errorf("the next message was answered %q", answers[len(answers)-1].Text)
	}
	n := 0
	for _, m := range w.Discord.BotMessages(thread) {
		if strings.Contains(m.Content, report) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the interrupted turn was reported %d times (first: %q)", n, msg.Content)
	}
}

// The broker killed with SIGKILL, or stopped, while its thread's agent on
// a host is idle, and started again: the host keeps the agent, the new run takes it
// up, and the thread's next message is answered by that same process, with
// no agent started anywhere. The broker's NATS server (embedded) restarts
// with it, so the host is heard again only after the new run has started.
func TestCluster_ARestartedBrokerTakesOverItsAgents(t *testing.T) {
	t.Run("killed", func(t *testing.T) { brokerRestartCarriesOn(t, true) })
	t.Run("stopped", func(t *testing.T) { brokerRestartCarriesOn(t, false) })
}

// brokerRestartCarriesOn restarts the broker, with SIGKILL (kill) or
// SIGTERM, while its thread's agent is idle on a host.
func brokerRestartCarriesOn(t *testing.T, kill bool) {
	w, url := clusterWorld(t, nil)
	b := w.start()
	h := w.host("a", url, nil)
	thread := w.mention(alice, "run pwd")
	if where := whereFrom(w.awaitAnswers(thread, 1)[0].Text); where != "a" {
		t.Fatalf("answered from %q", where)
	}
	answered := time.Now()
	// The answer is shown just before the turn lets its agent go: a
	// broker killed in between had a turn running.
	b.awaitMetric("acp_broker_agents_busy", func(v float64) bool { return v == 0 })
	if kill {
		b.Kill()
		if b.Signalled() != syscall.SIGKILL {
			<-b.Done()
		}
	} else {
		b.stop()
	}
	b2 := &broker{Broker: brokertest.MustGet(t, patience, w.Start), t: t}
	t.Cleanup(func() { b2.stop() })
	b2.awaitMetric("acp_broker_agent_adoptions_total", func(v float64) bool { return v == 1 })
	b2.awaitMetric("acp_broker_ready", func(v float64) bool { return v == 1 }) // it answers status
	for _, th := range status(t, w).Threads {
		if a := th.Agent; th.ID == thread && (a == nil || !a.TakenOver || a.Host != "a" || a.UptimeSeconds < time.Since(answered).Seconds()) {
			t.Errorf("broker status shows the thread's agent as %+v: want it taken over, on a, up since before the restart", a)
		}
	}
	w.Discord.Post(thread, alice, "run pwd")
	answers := w.awaitAnswers(thread, 2)
	if where := whereFrom(answers[len(answers)-1].Text); where != "a" {
		t.Errorf("the next message was answered %q", answers[len(answers)-1].Text)
	}
	if v, _ := b2.metric("acp_broker_agent_spawns_total"); v != 0 {
		t.Errorf("the new run started %v agents, want none", v)
	}
	hm := brokertest.MustGet(t, patience, h.Metrics)
	if v := hm["acp_broker_agent_spawns_total"]; v != 1 {
		t.Errorf("the host started %v agents, want the thread's one only", v)
	}
	if v := hm["acp_broker_agents_live"]; v != 1 {
		t.Errorf("the host runs %v agents, want the thread's one", v)
	}
	for _, m := range w.Discord.BotMessages(thread) {
		if strings.Contains(m.Content, "restarted") {
			t.Errorf("an idle thread was told of the restart: %q", m.Content)
		}
	}
}

// cluster.host_timeout is consumed: at 2s a host killed mid-turn is told
// to its thread within 2s and a beat, far sooner than the default.
func TestCluster_HostTimeoutIsConsumed(t *testing.T) {
	w, _, h, thread := hostMidTurn(t, settings{"cluster.host_timeout": "2s"})
	killed := time.Now()
	h.Kill()
	w.awaitBotText(thread, "stopped answering")
	if told := time.Since(killed); told > 4500*time.Millisecond {
		t.Errorf("with host_timeout 2s the thread was told %s after its host was killed", told)
	}
}

// Warm agents with hosts: the broker keeps a profile's warm agent on a
// host, a new thread takes it, and the host keeps no warm agents of its
// own besides.
func TestCluster_ANewThreadTakesAWarmAgentOnAHost(t *testing.T) {
	w, url := clusterWorld(t, settings{"agent.per_thread_dir": false, "pool.warm": 1})
	b := w.start()
	h := w.host("a", url, nil)
	b.awaitMetric(`acp_broker_profile_agents_warm{profile="default"}`, func(v float64) bool { return v == 1 })
	thread := w.mention(alice, "run pwd")
	if where := whereFrom(w.awaitAnswers(thread, 1)[0].Text); where != "a" {
		t.Errorf("the thread ran on %q", where)
	}
	if v, _ := b.metric(`acp_broker_agent_warm_claims_total{profile="default"}`); v != 1 {
		t.Errorf("warm claims: %v, want 1", v)
	}
	b.awaitMetric(`acp_broker_profile_agents_warm{profile="default"}`, func(v float64) bool { return v == 1 })
	hm := brokertest.MustGet(t, patience, h.Metrics)
	if v := hm[`acp_broker_profile_agents_warm{profile="default"}`]; v != 0 {
		t.Errorf("the host keeps %v warm agents of its own", v)
	}
	if v := hm["acp_broker_agents_live"]; v != 2 {
		t.Errorf("the host runs %v agents, want 2: the thread's and the broker's warm one", v)
	}
}

// sharedBranches are the acp/ branches of a repository, each with its
// last commit's subject.
func sharedBranches(t *testing.T, repo string) map[string]string {
	t.Helper()
	out, err := git("-C", repo, "for-each-ref", "--format=%(refname:short) %(subject)", "refs/heads/acp/").Output()
	if err != nil {
		t.Fatalf("the shared repository's branches: %v", err)
	}
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if name, subject, ok := strings.Cut(l, " "); ok {
			m[name] = subject
		}
	}
	return m
}

// A worktree thread's committed work follows it: its host pushes the
// thread's branch to the shared repository after each turn, and when that
// host is killed the thread's next message continues on the other host
// from that commit.
func TestCluster_AWorktreeThreadContinuesFromItsLastCommitOnAnotherHost(t *testing.T) {
	w, url := clusterWorld(t, nil)
	shared := filepath.Join(w.Dir, "shared.git")
	seed := newRepo(t, filepath.Join(w.Dir, "seed"))
	for _, args := range [][]string{{"init", "-q", "--bare", "-b", "main", shared}, {"-C", seed, "push", "-q", shared, "main"}} {
		if out, err := git(args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	w.forAgents(seed)
	w.Conf = w.Conf.With(settings{"agent.workspace": "worktree", "agent.repo": seed, "agent.base": "main"})
	b := w.start()
	hosts := map[string]*brokertest.Broker{}
	for _, name := range []string{"a", "b"} {
		clone := filepath.Join(w.Dir, "clone-"+name)
		if out, err := git("clone", "-q", shared, clone).CombinedOutput(); err != nil {
			t.Fatalf("git clone: %v\n%s", err, out)
		}
		w.forAgents(clone)
		hosts[name] = w.host(name, url, settings{"agent.repo": clone, "agent.shared_repo": shared})
	}
	thread := w.mention(alice, "sh pwd")
	first := whereFrom(w.awaitAnswers(thread, 1)[0].Text)
	if hosts[first] == nil {
		t.Fatalf("the first answer names no host: %q", w.awaitAnswers(thread, 1)[0].Text)
	}
	w.Discord.Post(thread, alice, "run git -c user.name=agent -c user.email=agent@example.com commit -q --allow-empty -m from-"+first)
	if a := w.awaitAnswers(thread, 2)[1]; !strings.Contains(a.Text, "exit: <nil>") {
		t.Fatalf("git commit in the agent's worktree: %q", a.Text)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !slices.Contains(slices.Collect(maps.Values(sharedBranches(t, shared))), "from-"+first) {
		if time.Now().After(deadline) {
			t.Fatalf("the thread's commit never reached the shared repository: %v", sharedBranches(t, shared))
		}
		time.Sleep(100 * time.Millisecond)
	}
	before := len(w.Discord.BotMessages(thread))
	hosts[first].Kill()
	// A message sent before the broker has noticed goes to the agent on
	// the killed host, and fails in words at the loss (as a turn running
	// then does): this one is sent once the host is known lost, and the
	// idle thread told that its committed work follows it.
	b.awaitMetric("acp_broker_cluster_hosts_lost_total", func(v float64) bool { return v == 1 })
	if msg := w.awaitNewBotText(thread, "stopped answering", before); !strings.Contains(msg.Content, "what its agent committed follows the thread") {
		t.Errorf("the worktree thread is not told its committed work follows it: %q", msg.Content)
	}
	w.Discord.Post(thread, alice, "sh pwd; git log --format=%s -1")
	answers := w.awaitAnswers(thread, 3)
	got := answers[len(answers)-1].Text
	if next := whereFrom(got); next == "" || next == first {
		t.Errorf("the next message ran on %q, want the other host: %q", next, got)
	}
	if !strings.Contains(got, "from-"+first) {
		t.Errorf("on the other host the thread's worktree does not start from its last commit: %q", got)
	}
}

// A push of a worktree thread's branch to the shared repository refused
// after a turn (the branch there went on without this host) is told to
// the thread in words, with the host's reason and where the committed
// work stays; the same refusal after the next turn is not told again.
func TestCluster_ABranchNotPushedIsToldToItsThreadOnce(t *testing.T) {
	w, url := clusterWorld(t, nil)
	shared := filepath.Join(w.Dir, "shared.git")
	seed := newRepo(t, filepath.Join(w.Dir, "seed"))
	clone := filepath.Join(w.Dir, "clone-a")
	for _, args := range [][]string{{"init", "-q", "--bare", "-b", "main", shared}, {"-C", seed, "push", "-q", shared, "main"}, {"clone", "-q", shared, clone}} {
		if out, err := git(args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	w.forAgents(seed)
	w.forAgents(clone)
	w.Conf = w.Conf.With(settings{"agent.workspace": "worktree", "agent.repo": seed, "agent.base": "main"})
	w.start()
	h := w.host("a", url, settings{"agent.repo": clone, "agent.shared_repo": shared})
	commit := "run git -c user.name=agent -c user.email=agent@example.com commit -q --allow-empty -m "
	thread := w.mention(alice, commit+"one")
	if a := w.awaitAnswers(thread, 1)[0]; !strings.Contains(a.Text, "exit: <nil>") {
		t.Fatalf("git commit in the agent's worktree: %q", a.Text)
	}
	var branch string
	deadline := time.Now().Add(20 * time.Second)
	for branch == "" {
		for name, subject := range sharedBranches(t, shared) {
			if subject == "one" {
				branch = name
			}
		}
		if branch == "" && time.Now().After(deadline) {
			t.Fatalf("the thread's commit never reached the shared repository: %v", sharedBranches(t, shared))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The branch goes on in the shared repository without this host.
	for _, args := range [][]string{
		{"-C", seed, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "elsewhere"},
		{"-C", seed, "push", "-q", shared, "+main:refs/heads/" + branch},
	} {
		if out, err := git(args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	before := len(w.Discord.BotMessages(thread))
	w.Discord.Post(thread, alice, commit+"two")
	msg := w.awaitNewBotText(thread, "could not be pushed to the shared repository", before)
	for _, want := range []string{branch + " was not published", "has commits this host's has not", "stays on agent host a until a push succeeds"} {
		if !strings.Contains(msg.Content, want) {
			t.Errorf("the words %q lack %q", msg.Content, want)
		}
	}
	w.Discord.Post(thread, alice, commit+"three")
	w.awaitAnswers(thread, 3)
	failed := func() int {
		return len(h.Log.Lines(func(m map[string]any) bool { return m["message"] == "cluster: after the thread's turn" }))
	}
	for deadline := time.Now().Add(20 * time.Second); failed() < 2; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the host logged %d failures after the thread's turns, want 2", failed())
		}
	}
	time.Sleep(time.Second) // what the second failure would post, had it been told
	n := 0
	for _, m := range w.Discord.BotMessages(thread) {
		n += strings.Count(m.Content, "could not be pushed")
	}
	if n != 1 {
		t.Errorf("the thread was told %d times that its branch was not pushed, want once", n)
	}
}
