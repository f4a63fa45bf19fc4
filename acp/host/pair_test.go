package host

import (
	"fmt"
	"os"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/acp/acptest"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// pair is a real connection serving through a Host: the agent's requests
// travel as bytes over pipes from the test's peer.
type pair struct {
	*Host
	conn *acp.Conn
}

type peer = acptest.Peer

// newPair makes a Host with opts and a Conn serving through it, and the
// agent's end of the Conn.
func newPair(t *testing.T, opts Options) (*pair, *peer) {
	t.Helper()
	p, agentOut, agentIn := acptest.NewPeer(t)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	opts.Logger = log
	h := New(opts)
	c := acp.NewConn(agentOut, agentIn, acp.Options{Logger: log, Host: h})
	t.Cleanup(func() { c.Close() })
	return &pair{Host: h, conn: c}, p
}

// register makes session id known, rooted at cwd, as session/new does.
func (c *pair) register(id, cwd string) { c.OpenSession(id, cwd) }

func (c *pair) Stats() acp.Stats { return c.conn.Stats() }

// Close closes the Conn, which closes the Host.
func (c *pair) Close() { c.conn.Close() }

// waitServed waits until n of the agent's requests are being served:
// each one answered has been released, its bookkeeping with it.
func waitServed(t *testing.T, c *pair, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.Stats().AgentRequests != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d agent requests being served, want %d", c.Stats().AgentRequests, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
