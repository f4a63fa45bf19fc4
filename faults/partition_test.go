package faults

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// An agent host in a network namespace of its own, reaching the broker's
// NATS only across a veth pair: it joins with the cluster's password and
// its agent answers from the host's work directory.
func TestPartition_AHostInANetworkNamespaceRunsAnAgent(t *testing.T) {
	w, ns, url := partitionWorld(t, nil)
	w.start()
	h := w.hostIn(ns, "far", url, nil)
	if !inNetns(t, h.PID(), ns) {
		t.Fatalf("the host (pid %d) does not run in namespace %s", h.PID(), ns.name)
	}
	thread := w.mention(alice, "run pwd")
	if got := w.awaitAnswers(thread, 1)[0].Text; whereFrom(got) != "far" {
		t.Errorf("the answer does not come from the host in the namespace: %q", got)
	}
	if v := awaitHostAgents(t, h, 1); v != 1 {
		t.Errorf("the host counts %v agents, want 1", v)
	}
}

// A partition of 2.5s, well under cluster.host_timeout, in the middle of
// a streaming turn: the turn completes with every chunk once and in
// order, the host is not lost, and the thread is told nothing of it.
func TestPartition_AShortPartitionMidTurnLosesNothing(t *testing.T) {
	w, ns, url := partitionWorld(t, nil)
	b := w.start()
	h := w.hostIn(ns, "far", url, nil)
	thread := w.mention(alice, "stream 40 100ms")
	w.awaitNewBotText(thread, "chunk 3", 0)
	ns.cut()
	cut := time.Now()
	ns.awaitCut(h)
	time.Sleep(2500*time.Millisecond - time.Since(cut)) // the partition lasts this long, mid-turn
	ns.heal()
	got := w.awaitAnswers(thread, 1)[0].Text
	last := -1
	for i := 1; i <= 40; i++ {
		chunk := fmt.Sprintf("chunk %d\n", i)
		if c := strings.Count(got, chunk); c != 1 {
			t.Errorf("chunk %d is in the answer %d times", i, c)
		}
		at := strings.Index(got, chunk)
		if at < last {
			t.Errorf("chunk %d comes before chunk %d: %q", i, i-1, got)
		}
		last = at
	}
	for _, m := range w.Discord.BotMessages(thread) {
		if strings.Contains(m.Content, "stopped answering") || strings.Contains(m.Content, "lost") {
			t.Errorf("the thread was told of a loss: %q", m.Content)
		}
	}
	st := status(t, w)
	if len(st.Hosts) != 1 || st.Hosts[0].Lost {
		t.Errorf("broker status shows the hosts %+v after a short partition", st.Hosts)
	}
	if v := b.awaitMetric("acp_broker_cluster_hosts_lost_total", func(v float64) bool { return true }); v != 0 {
		t.Errorf("the broker counts %v hosts lost", v)
	}
}
