package brokertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// hostStarted is the log line of an agent host ready to run agents.
const hostStarted = "agent host started"

// HostSettings are the configuration of the World's agent host name:
// the World's agent keys (its command, sandbox and user), the host's own
// state and work directories, metrics on a free port, cluster.name, then
// conf over them. The chat platforms' keys are left out: a host serves
// none.
func (w *World) HostSettings(name string, conf Settings) Settings {
	s := Settings{}
	for k, v := range w.Conf {
		if strings.HasPrefix(k, "agent.") || strings.HasPrefix(k, "agents.") || strings.HasPrefix(k, "log.") || strings.HasPrefix(k, "pool.") {
			s[k] = v
		}
	}
	dir := filepath.Join(w.Dir, "host-"+name)
	s = s.With(Settings{
		"state.dir":    filepath.Join(dir, "state"),
		"agent.cwd":    filepath.Join(dir, "work"),
		"http.listen":  "127.0.0.1:0",
		"cluster.name": name,
	})
	if _, set := s["agent.run_as_user"]; !set && w.AgentUser() != "" {
		s["agent.run_as_user"] = w.AgentUser()
	}
	return s.With(conf)
}

// StartHost runs `broker host` with the configuration HostSettings
// makes for name, and waits until it has joined its cluster. The test's
// cleanup stops it.
func (w *World) StartHost(ctx context.Context, name string, conf Settings) (*Broker, error) {
	return w.StartHostVia(ctx, nil, name, conf)
}

// StartHostVia is StartHost with `broker host` run through via (a
// program and its arguments that exec the rest: `ip netns exec NAME` runs
// the host in a network namespace), in a process group of its own that
// the test's cleanup kills whole.
func (w *World) StartHostVia(ctx context.Context, via []string, name string, conf Settings) (*Broker, error) {
	s := w.HostSettings(name, conf)
	for _, k := range []string{"state.dir", "agent.cwd"} {
		if err := os.MkdirAll(s[k].(string), 0o755); err != nil {
			return nil, err
		}
	}
	path := filepath.Join(w.Dir, "host-"+name+".toml")
	if err := os.WriteFile(path, []byte(s.TOML()), 0o600); err != nil {
		return nil, err
	}
	w.mu.Lock()
	w.starts++
	n := w.starts
	w.mu.Unlock()
	h, err := startVia(w, via, path, filepath.Join(w.Dir, fmt.Sprintf("host-%s-%d.log", name, n)), "host")
	if err != nil {
		return nil, err
	}
	h.host = true
	w.mu.Lock()
	w.brokerPIDs = append(w.brokerPIDs, h.PID())
	w.mu.Unlock()
	w.TB.Cleanup(func() {
		h.Stop(30 * time.Second)
		h.killGroup()
		if w.TB.Failed() && w.logTail > 0 {
			w.TB.Logf("agent host %s log (pid %d, %s):\n%s", name, h.PID(), h.Log.Path(), h.Log.Tail(w.logTail))
		}
	})
	if err := h.awaitHost(ctx); err != nil {
		h.Kill()
		return nil, err
	}
	return h, nil
}

// awaitHost waits for the host to serve its metrics and to have joined
// its cluster.
func (b *Broker) awaitHost(ctx context.Context) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for b.addr == "" || len(b.Log.Lines(func(m map[string]any) bool { return m["message"] == hostStarted })) == 0 {
		b.addr = b.Log.Field(serving, "addr")
		select {
		case <-b.done:
			return fmt.Errorf("the agent host exited with status %d; log:\n%s", b.ExitCode(), b.Log.Tail(16<<10))
		case <-ctx.Done():
			return fmt.Errorf("the agent host did not join its cluster: %w; log:\n%s", context.Cause(ctx), b.Log.Tail(16<<10))
		case <-tick.C:
		}
	}
	return nil
}
