package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
)

// netns is a network namespace the test made, joined to the test's own
// by a veth pair on a private /30 of its own: outerIP is the test's end,
// innerIP the namespace's. Setting the outer end down cuts every
// connection between the two, as a pulled cable does, while each side
// keeps its address; setting it up heals them.
type netns struct {
	t                *testing.T
	name, outer      string
	outerIP, innerIP string
}

var netnsSeq atomic.Int32

// ipCmd runs ip with args and returns its error with what it printed.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newNetns makes a network namespace joined to the test's by a veth
// pair, and removes both at the test's end. It skips the test, saying
// why, where that cannot be done: not root, no ip (iproute2), or the
// kernel refusing a namespace or a veth pair (as in many containers).
func newNetns(t *testing.T) *netns {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a real partition needs a network namespace, and making one needs root: this test runs as uid " + fmt.Sprint(os.Geteuid()))
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("a real partition needs a network namespace, made with ip (iproute2), which is not installed: apt-get install iproute2")
	}
	seq := netnsSeq.Add(1)
	n := &netns{t: t, name: fmt.Sprintf("acpt-%d-%d", os.Getpid(), seq), outer: fmt.Sprintf("acpv%d-%d", os.Getpid()%100000, seq)}
	// 10.231.0.0/16 is carved into /30s; a random one keeps runs apart.
	base := 4 * rand.IntN(1<<14)
	n.outerIP = fmt.Sprintf("10.231.%d.%d", base>>8, base&0xff+1)
	n.innerIP = fmt.Sprintf("10.231.%d.%d", base>>8, base&0xff+2)
	if err := ipCmd("netns", "add", n.name); err != nil {
		t.Skipf("a real partition needs a network namespace, and this machine refuses one: %v", err)
	}
	t.Cleanup(func() {
		ipCmd("link", "del", n.outer) // both ends go
		if err := ipCmd("netns", "del", n.name); err != nil {
			t.Errorf("removing the namespace: %v", err)
		}
	})
	inner := n.outer + "i"
	steps := [][]string{
		{"link", "add", n.outer, "type", "veth", "peer", "name", inner},
		{"link", "set", inner, "netns", n.name},
		{"addr", "add", n.outerIP + "/30", "dev", n.outer},
		{"link", "set", n.outer, "up"},
		{"-n", n.name, "addr", "add", n.innerIP + "/30", "dev", inner},
		{"-n", n.name, "link", "set", inner, "up"},
		{"-n", n.name, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			t.Skipf("a real partition needs a veth pair into the namespace, and this machine refuses one: %v", err)
		}
	}
	return n
}

// exec is the command prefix that runs a program inside the namespace.
func (n *netns) exec() []string { return []string{"ip", "netns", "exec", n.name} }

// cut partitions the namespace from the test's: the link goes down.
func (n *netns) cut() {
	n.t.Helper()
	if err := ipCmd("link", "set", n.outer, "down"); err != nil {
		n.t.Fatal(err)
	}
}

// heal ends the partition: the link comes up.
func (n *netns) heal() {
	n.t.Helper()
	if err := ipCmd("link", "set", n.outer, "up"); err != nil {
		n.t.Fatal(err)
	}
}

// drop partitions the namespace from the test's without a sign: the link
// stays up, and every packet that crosses it, either way, is dropped as it
// arrives (an nftables ingress chain on each end), as when a switch
// between two machines fails, so neither side's sends fail and TCP backs
// off its retransmissions. It skips the test, saying why, without nft.
func (n *netns) drop() {
	n.t.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		n.t.Skip("a silent partition drops packets with nft (nftables), which is not installed: apt-get install nftables")
	}
	table := strings.ReplaceAll(n.name, "-", "_")
	rules := func(dev string) string {
		return "add table netdev " + table + "\n" +
			"add chain netdev " + table + " cut { type filter hook ingress device " + dev + " priority 0; policy drop; }\n"
	}
	for _, c := range []struct {
		via   []string
		rules string
	}{{nil, rules(n.outer)}, {n.exec(), rules(n.outer + "i")}} {
		args := append(append([]string{}, c.via...), "nft", "-f", "-")
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdin = strings.NewReader(c.rules)
		if out, err := cmd.CombinedOutput(); err != nil {
			n.t.Skipf("a silent partition drops packets with nftables, and this machine refuses it: %v: %s", err, out)
		}
	}
	n.t.Cleanup(func() { exec.Command("nft", "delete", "table", "netdev", table).Run() })
}

// undrop ends the partition drop began.
func (n *netns) undrop() {
	n.t.Helper()
	table := strings.ReplaceAll(n.name, "-", "_")
	for _, c := range [][]string{
		{"nft", "delete", "table", "netdev", table},
		{"ip", "netns", "exec", n.name, "nft", "delete", "table", "netdev", table},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			n.t.Fatalf("%s: %v: %s", strings.Join(c, " "), err, out)
		}
	}
}

// awaitCut checks that the partition is real: host h's metrics port,
// inside the namespace, cannot be reached from the test's side.
func (n *netns) awaitCut(h *brokertest.Broker) {
	n.t.Helper()
	c, err := net.DialTimeout("tcp", h.Addr(), 500*time.Millisecond)
	if err == nil {
		c.Close()
		n.t.Fatalf("the host's %s was reached across the partition", h.Addr())
	}
}

// freeOn is a free TCP address on ip.
func freeOn(t *testing.T, ip string) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// partitionWorld is a clusterWorld whose broker serves the cluster's NATS
// (with a password) on the outer end of a veth pair into a namespace it
// makes, where hostIn runs agent hosts. It returns the NATS URL.
func partitionWorld(t *testing.T, conf settings) (*world, *netns, string) {
	t.Helper()
	needBwrap(t)
	ns := newNetns(t)
	addr := freeOn(t, ns.outerIP)
	w := newWorld(t, setup{conf: settings{
		"cluster.embedded":  true,
		"cluster.listen":    addr,
		"cluster.user":      clusterUser,
		"cluster.password":  clusterPassword,
		"pool.max_sessions": 64,
	}.With(conf)})
	return w, ns, "nats://" + addr
}

// hostIn starts agent host name inside ns, joined to the cluster at url
// across the veth pair; its metrics are served on the namespace's end of
// the pair, so that the test reads them across it.
func (w *world) hostIn(ns *netns, name, url string, conf settings) *brokertest.Broker {
	w.t.Helper()
	return brokertest.MustGet(w.t, patience, func(ctx context.Context) (*brokertest.Broker, error) {
		return w.StartHostVia(ctx, ns.exec(), name, settings{
			"cluster.url":      url,
			"cluster.user":     clusterUser,
			"cluster.password": clusterPassword,
			"http.listen":      net.JoinHostPort(ns.innerIP, "0"),
		}.With(conf))
	})
}

// inNetns reports whether process pid runs in namespace ns.
func inNetns(t *testing.T, pid int, ns *netns) bool {
	t.Helper()
	fi, err := os.Stat("/run/netns/" + ns.name)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := os.Stat(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(fi, theirs)
}

// awaitHostAgents waits for host h's acp_broker_agents_live to be want,
// and returns what it last read.
func awaitHostAgents(t *testing.T, h *brokertest.Broker, want float64) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	m, _ := h.AwaitMetrics(ctx, 100*time.Millisecond, func(m brokertest.Metrics) bool { return m["acp_broker_agents_live"] == want })
	return m["acp_broker_agents_live"]
}
