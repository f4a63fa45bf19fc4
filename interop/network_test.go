package interop

import (
	"strings"
	"testing"
	"time"

	"acpbroker/netproxy"
	"acpbroker/pool"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
)

// codex-acp and claude-agent-acp, started by the pool in the sandbox
// with a network of their own, answer through the proxy alone: their
// profile allows their fake model and nothing else, and the proxy counts
// the connections they made to it.
func TestNetwork_RealAgentsAnswerThroughTheProxy(t *testing.T) {
	for _, sub := range subjects {
		t.Run(sub.name, func(t *testing.T) {
			s := sub.make(t)
			if !s.model {
				t.Skip("the SDK example agent calls no model")
			}
			env, err := agentEnv(s.spec.Env)
			if err != nil {
				t.Fatal(err)
			}
			sandbox := interopSandbox(t, env)
			if !sandbox.Enabled() {
				t.Skip("bubblewrap cannot run here: no network namespace to confine the agent in")
			}
			allow, err := netproxy.ParseAllow(s.allow)
			if err != nil {
				t.Fatal(err)
			}
			proxy := netproxy.New(netproxy.Options{Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)})
			defer proxy.Close()
			p := pool.New(pool.Config{
				Profiles: map[string]*pool.Profile{"net": {
					Command: s.spec.Command, Args: s.spec.Args, Env: env, WorkDir: t.TempDir(), PerThreadDir: true,
					Network: pool.NetworkProxy, Allow: allow, AllowKey: "agents.net.allow_hosts",
				}},
				Sandbox:      sandbox,
				Proxy:        proxy,
				NetDir:       t.TempDir(),
				MaxSessions:  1,
				StartTimeout: startTimeout,
				ExitGrace:    500 * time.Millisecond,
				Logger:       zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
			})
			defer p.Close()
			ctx := testContext(t)
			pa, err := p.Acquire(ctx, "net", "", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Release(pa, false)
			s.text("Answered", " through", " the proxy.")
			a := &agent{t: t, name: s.spec.Name + " (behind the proxy)", conn: pa.Conn}
			res := a.startTurn(ctx, pa.SessionID, "Say how you reach your model.", nil).wait()
			if res.Err != nil || res.Stop != "end_turn" {
				t.Fatalf("the turn ended %q, %v", res.Stop, res.Err)
			}
			if got := messageText(res.Updates); !strings.HasSuffix(got, "Answered through the proxy.") {
				t.Errorf("answer = %q, want the model's text", got)
			}
			allowed, refused := proxyCounts(t, proxy)
			t.Logf("%s: %v connection(s) through the proxy, %v refused", s.spec.Name, allowed, refused)
			if allowed == 0 {
				t.Errorf("%s answered with no connection through the proxy", s.spec.Name)
			}
		})
	}
}

// proxyCounts sums the proxy's allowed and refused connections.
func proxyCounts(t *testing.T, c prometheus.Collector) (allowed, refused float64) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return networkCounts(families)
}

// networkCounts sums the allowed and refused connections of every
// profile in families.
func networkCounts(families []*dto.MetricFamily) (allowed, refused float64) {
	for _, f := range families {
		for _, m := range f.Metric {
			switch f.GetName() {
			case "acp_broker_network_connections_total":
				allowed += m.GetCounter().GetValue()
			case "acp_broker_network_refused_total":
				refused += m.GetCounter().GetValue()
			}
		}
	}
	return allowed, refused
}

// withoutNotices is an answer's text without the broker's notices
// ("ℹ️ …" paragraphs) before it: the proxy's refusal of a host the agent
// asks for at its start (claude-agent-acp's plugins' block list) is told
// in whichever turn it falls.
func withoutNotices(body string) string {
	for strings.HasPrefix(body, "ℹ️ ") {
		_, rest, ok := strings.Cut(body, "\n\n")
		if !ok {
			return ""
		}
		body = rest
	}
	return body
}
