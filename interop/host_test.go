package interop

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"acpbroker/broker"
	"acpbroker/config"
	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakediscord"
	"acpbroker/pool"

	"github.com/rs/zerolog"
)

// TestAgentHost: codex-acp and claude-agent-acp run on an agent host,
// not beside the broker. A broker serving Discord and the cluster's NATS
// (cluster.embedded, on loopback) and one agent host joined to it, both
// wired as the binary wires them (broker.Open, broker.OpenHost), in the
// test's process. A thread's agent starts on the host, in the host's own
// sandbox and work directory; the model asks for a command that writes
// a file, the thread's starter allows it, and the answer comes back
// through the chat. The file is in the host's work directory and not in
// the broker's, the broker started no agent itself, and whatever the
// agent asked of its client (fs/*, terminal/*) was answered on the
// host.
func TestAgentHost(t *testing.T) {
	for _, sub := range subjects {
		if sub.name == "sdk-example" {
			continue // it runs no command and has no model
		}
		t.Run(sub.name, func(t *testing.T) { agentOnHost(t, sub.make(t)) })
	}
}

func agentOnHost(t *testing.T, s *subject) {
	env, err := agentEnv(s.spec.Env)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	natsAddr := ln.Addr().String()
	ln.Close()
	w := brokertest.NewWorld(t, brokertest.Binaries{Agent: s.spec.Command}, brokertest.Options{
		Fake: fakediscord.Options{WaitTimeout: discordAwait},
		Conf: frontSettings(s, brokertest.Settings{
			"cluster.embedded": true,
			"cluster.listen":   natsAddr,
			"cluster.name":     "broker",
		}),
		LogTail: 512 << 10,
	})
	w.Srv.AddUser(threadStarter)
	sandbox := interopSandbox(t, env)

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	var mu sync.Mutex
	var launchedHere []string
	brokerOpts := broker.Options{
		Version: "interop",
		Pool: func(pc *pool.Config) {
			pc.Launch = func(spec pool.ProcessSpec) (pool.Proc, error) {
				mu.Lock()
				launchedHere = append(launchedHere, spec.Command)
				mu.Unlock()
				return nil, fmt.Errorf("the broker must not start %s itself", spec.Command)
			}
		},
	}
	b, err := w.Open(ctx, brokerOpts)
	if err != nil {
		t.Fatal(err)
	}
	current := b // the broker's run the cleanup stops

	// The host: the World's agent keys, its own state and work
	// directories, the cluster's URL.
	hs := w.HostSettings("a", brokertest.Settings{"cluster.url": "nats://" + natsAddr, "http.listen": "", "log.level": "debug"})
	hostWork := hs["agent.cwd"].(string)
	for _, k := range []string{"state.dir", "agent.cwd"} {
		if err := os.MkdirAll(hs[k].(string), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(w.Dir, "host-a.toml")
	if err := os.WriteFile(path, []byte(hs.TOML()), 0o600); err != nil {
		t.Fatal(err)
	}
	environ := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + w.Dir}
	cfg, err := config.Load(path, environ)
	if err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(w.Dir, "host-a.log"))
	if err != nil {
		t.Fatal(err)
	}
	procs := &procRecorder{}
	h, err := broker.OpenHost(ctx, cfg, broker.Options{
		Environ: environ,
		Logger:  zerolog.New(logFile).With().Timestamp().Logger(),
		Version: "interop",
		Pool: func(pc *pool.Config) {
			pc.Sandbox = sandbox
			pc.Launch = procs.launch
			pc.Profiles[pool.DefaultProfileName].Env = env
		},
	})
	if err != nil {
		logFile.Close()
		t.Fatal(err)
	}
	hctx, stopHost := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- h.Serve(hctx) }()
	t.Cleanup(func() {
		// The broker first, which leaves its idle agents, then the host.
		current.Stop(10 * time.Second)
		stopHost()
		<-served
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.Stop(sctx)
		logFile.Close()
		if t.Failed() {
			if log, err := os.ReadFile(logFile.Name()); err == nil {
				t.Logf("agent host log:\n%s", excerptOf(string(log), 256<<10))
			}
		}
	})

	d := &discordBroker{
		frontBase: frontBase{s: s, platform: "discord", broker: b, channel: w.Channel, workDir: hostWork, procs: procs, timings: &timingLog{}},
		srv:       w.Srv,
		discord:   w.Discord,
	}
	d.waitFor = w.Srv.WaitFor

	const final = "The file is on the host."
	s.command("printf on-the-host > landed.txt", final)
	thread, sent := d.mention(t, "Write landed.txt.")
	c := d.allowOnce(t, thread, "")
	st := awaitEnd(t, d, thread, "")
	if !strings.HasPrefix(st.footer, "-# ✅ done in ") {
		t.Errorf("the turn ended with %q, want \"-# ✅ done in …\"; answer %q", st.footer, st.body)
	}
	if !strings.HasSuffix(st.body, final) {
		t.Errorf("answer = %q, want it to end with the model's %q", st.body, final)
	}
	ps := procs.of(thread)
	if len(ps) != 1 {
		t.Fatalf("the host started %d agent processes for the thread, want 1", len(ps))
	}
	procs.mu.Lock()
	for _, c := range procs.commands {
		if sandbox.Enabled() && c != sandbox.Bwrap {
			t.Errorf("the host ran the agent as %s, outside its sandbox", c)
		}
	}
	procs.mu.Unlock()
	mu.Lock()
	if len(launchedHere) > 0 {
		t.Errorf("the broker started agents itself: %v", launchedHere)
	}
	mu.Unlock()
	onHost := filepath.Join(hostWork, thread, "landed.txt")
	if got, err := os.ReadFile(onHost); err != nil || string(got) != "on-the-host" {
		t.Errorf("%s = %q, %v; want the command to have written it in the thread's directory on the host", onHost, got, err)
	}
	if _, err := os.Stat(filepath.Join(w.Work, thread, "landed.txt")); err == nil {
		t.Errorf("the file is in the broker's work directory too")
	}
	if outs := s.toolOutputs(); len(outs) != 1 || strings.HasPrefix(outs[0], "error: ") {
		t.Errorf("tool output sent back to the model = %q, want one successful result", outs)
	}
	// What the agent asked of its client: each request answered with a
	// result on the host's side of the wire.
	msgs := ps[0].wire.snapshot()
	asked := map[string]int{}
	for _, m := range msgs {
		if !m.Out && m.Method != "" && len(m.ID) > 0 && (strings.HasPrefix(m.Method, "fs/") || strings.HasPrefix(m.Method, "terminal/")) {
			asked[m.Method]++
			answered := false
			for _, r := range msgs {
				if r.Out && r.Result && string(r.ID) == string(m.ID) && !strings.Contains(string(r.Raw), `"error"`) {
					answered = true
				}
			}
			if !answered {
				t.Errorf("the agent's %s (id %s) was not answered with a result", m.Method, m.ID)
			}
		}
	}
	t.Logf("%s on host a: permission %q (%s) allowed; the agent asked its client %v; answer in %v: %q",
		s.spec.Name, c.request.ToolCall.Title, c.request.ToolCall.Kind, asked, st.end.Sub(sent).Round(time.Millisecond), st.body+"\n"+st.footer)

	// The broker restarts (stopped, as for an upgrade): the new run takes
	// the idle agent over, and the thread's next message goes to the same
	// process, in the same conversation, with no initialize.
	if !pollUntil(withTimeout(t.Context(), chatAwait), 10*time.Millisecond, func() bool { return b.Pool().Stats().Busy == 0 }) {
		t.Fatal("the turn did not let its agent go")
	}
	b.Stop(10 * time.Second)
	b, err = w.Open(ctx, brokerOpts)
	if err != nil {
		t.Fatal(err)
	}
	current, d.broker = b, b
	restarted := time.Now()
	if !pollUntil(withTimeout(t.Context(), chatAwait), 10*time.Millisecond, func() bool { return b.Pool().Stats().Adopted == 1 }) {
		t.Fatalf("the restarted broker did not take the agent over within %v", chatAwait)
	}
	taken := time.Since(restarted)
	s.text("Still ", "here.")
	next, nextSent := d.say(t, thread, "Are you still there?")
	nt := awaitEnd(t, d, thread, next)
	if !strings.HasPrefix(nt.footer, "-# ✅ done in ") || !strings.HasSuffix(nt.body, "Still here.") {
		t.Errorf("after the restart the turn ended %q with %q", nt.footer, nt.body)
	}
	if ps := procs.of(thread); len(ps) != 1 {
		t.Errorf("the host started %d agent processes for the thread, want the one, carried over", len(ps))
	}
	if body := s.lastBody(); !strings.Contains(body, "Write landed.txt.") {
		t.Errorf("the model's request after the restart does not carry the conversation before it: %.300q", body)
	}
	inits := 0
	for _, m := range ps[0].wire.snapshot() {
		if m.Out && m.Method == "initialize" {
			inits++
		}
	}
	if inits != 1 {
		t.Errorf("the agent was sent initialize %d times, want once", inits)
	}
	t.Logf("%s: the restarted broker took the agent over %v after it started; next answer in %v: %q",
		s.spec.Name, taken.Round(time.Millisecond), nt.end.Sub(nextSent).Round(time.Millisecond), nt.body)
}
