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
func TestPartition_HostInANamespace(t *testing.T) {
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
func TestPartition_ShortLosesNothing(t *testing.T) {
	partitionMidTurn(t, 2500*time.Millisecond, 40, false)
}

// A silent partition (every packet dropped, the link up) of 5s, as long as
// can be with the host's last beat up to 2s before it and
// cluster.host_timeout (8s) not reached: nothing is lost, and the host is
// not lost, though TCP on each side backed off its retransmissions while
// nothing came back.
func TestPartition_FiveSecondsLoseNothing(t *testing.T) {
	partitionMidTurn(t, 5*time.Second, 100, true)
}

// A message posted to a thread while its host is silently partitioned
// (3s) is neither lost nor answered twice: its prompt reaches the agent
// once the link is back, and its answer reaches the thread.
func TestPartition_APromptSentDuringAPartitionIsAnswered(t *testing.T) {
	w, ns, url := partitionWorld(t, settings{"cluster.host_timeout": "8s"})
	b := w.start()
	h := w.hostIn(ns, "far", url, nil)
	thread := w.mention(alice, "run pwd")
	if where := whereFrom(w.awaitAnswers(thread, 1)[0].Text); where != "far" {
		t.Fatalf("the thread's agent runs on %q, want far", where)
	}
	ns.drop()
	from := time.Now()
	ns.awaitCut(h)
	w.Discord.Post(thread, alice, "run echo during the partition")
	time.Sleep(3*time.Second - time.Since(from))
	ns.undrop()
	answers := w.awaitAnswers(thread, 2)
	if got := answers[1].Text; !strings.Contains(got, "during the partition") {
		t.Errorf("the message sent during the partition was answered %q", got)
	}
	if v := b.awaitMetric("acp_broker_cluster_hosts_lost_total", func(float64) bool { return true }); v != 0 {
		t.Errorf("the broker counts %v hosts lost", v)
	}
	n := 0
	for _, m := range w.Discord.BotMessages(thread) {
		if strings.Contains(m.Content, "during the partition") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the answer to the message sent during the partition shows %d times", n)
	}
}

// A new thread placed on a host just cut off silently (not yet lost: its
// last beat is recent, and it is the least loaded) starts on the other
// host once the cut one is lost, and is answered.
func TestPartition_AThreadPlacedOnACutHostStartsElsewhere(t *testing.T) {
	const hostTimeout, beat = 8 * time.Second, 2 * time.Second
	w, ns, url := partitionWorld(t, settings{"cluster.host_timeout": hostTimeout.String()})
	w.start()
	w.host("near", url, nil)
	busy := w.mention(alice, "run pwd")
	if where := whereFrom(w.awaitAnswers(busy, 1)[0].Text); where != "near" {
		t.Fatalf("the first thread ran on %q, want near", where)
	}
	far := w.hostIn(ns, "far", url, nil)
	ns.drop()
	cut := time.Now()
	ns.awaitCut(far)
	thread := w.mention(alice, "run pwd")
	got := w.awaitAnswers(thread, 1)[0].Text
	if where := whereFrom(got); where != "near" {
		t.Errorf("the thread was answered %q, want from near", got)
	}
	if took := time.Since(cut); took > hostTimeout+beat+5*time.Second {
		t.Errorf("the thread was answered %s after the cut", took.Round(time.Millisecond))
	}
	t.Logf("answered %s after the cut", time.Since(cut).Round(time.Millisecond))
}

// partitionMidTurn cuts a host's link (silent: drops its packets) for
// length in the middle of a streaming turn of n chunks, one every 100ms,
// and checks the turn completes with every chunk once and in order, and
// that nobody was told of a loss.
func partitionMidTurn(t *testing.T, length time.Duration, n int, silent bool) {
	w, ns, url := partitionWorld(t, settings{"cluster.host_timeout": "8s"})
	b := w.start()
	h := w.hostIn(ns, "far", url, nil)
	thread := w.mention(alice, fmt.Sprintf("stream %d 100ms", n))
	w.awaitNewBotText(thread, "chunk 3", 0)
	cut, heal := ns.cut, ns.heal
	if silent {
		cut, heal = ns.drop, ns.undrop
	}
	cut()
	from := time.Now()
	ns.awaitCut(h)
	time.Sleep(length - time.Since(from)) // the partition lasts this long, mid-turn
	heal()
	healed := time.Now()
	got := w.awaitAnswers(thread, 1)[0].Text
	t.Logf("the turn ended %s after the partition healed", time.Since(healed).Round(time.Millisecond))
	last := -1
	for i := 1; i <= n; i++ {
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

// A partition longer than cluster.host_timeout in the middle of a turn
// that waits on a permission request: the thread is told in words within
// host_timeout and a beat; the request is answered and its buttons go;
// the thread's next message runs on the other host. When the partition
// heals, the agent the cut host ran for the lost turn is stopped, and the
// host takes new threads again.
func TestPartition_LongLosesTheHostHealsClean(t *testing.T) {
	longPartition(t, false, 0)
}

// The same, with a silent partition: every packet dropped, the link up.
func TestPartition_LongSilentLosesTheHostHealsClean(t *testing.T) {
	longPartition(t, true, 0)
}

// The same, with a silent partition of 40s: the host is heard again
// within host_timeout and a beat of the heal, though TCP, left to itself,
// would by then wait some 25s between retransmissions.
func TestPartition_FortySecondsSilent(t *testing.T) {
	longPartition(t, true, 40*time.Second)
}

// longPartition partitions a host mid-turn (silent: dropping its packets)
// for at least hold, and checks what the partition and the heal leave.
func longPartition(t *testing.T, silent bool, hold time.Duration) {
	const hostTimeout, beat = 8 * time.Second, 2 * time.Second
	w, ns, url := partitionWorld(t, settings{"cluster.host_timeout": hostTimeout.String()})
	b := w.start()
	far := w.hostIn(ns, "far", url, nil)
	thread := w.mention(alice, "permission")
	req := w.permissionRequest(thread)
	if len(req.Components) == 0 {
		t.Fatalf("the permission request shows no buttons: %+v", req)
	}
	orphans := w.AgentProcs()
	if len(orphans) == 0 {
		t.Fatal("no agent process is seen on the far host")
	}
	w.host("near", url, nil)

	cutLink, heal := ns.cut, ns.heal
	if silent {
		cutLink, heal = ns.drop, ns.undrop
	}
	cutLink()
	cut := time.Now()
	ns.awaitCut(far)
	msg := w.awaitBotText(thread, "stopped answering")
	told := time.Since(cut)
	if told > hostTimeout+beat {
		t.Errorf("the thread was told %s after the partition, want within %s", told.Round(time.Millisecond), hostTimeout+beat)
	}
	if !strings.Contains(msg.Content, "agent host far stopped answering") {
		t.Errorf("the words do not name the host: %q", msg.Content)
	}
	await(t, w.front("discord"), "the permission request closed", func() bool {
		m, _ := w.Srv.Message(thread, req.ID)
		return len(m.Components) == 0
	})
	closed, _ := w.Srv.Message(thread, req.ID)
	t.Logf("the request reads, once closed: %q", closed.Content)
	b.awaitMetric("acp_broker_acp_pending_permission_requests", func(v float64) bool { return v == 0 })
	b.awaitMetric(`acp_broker_chat_open_permission_requests{platform="discord"}`, func(v float64) bool { return v == 0 })

	w.Discord.Post(thread, alice, "run pwd")
	answers := w.awaitAnswers(thread, 2)
	if where := whereFrom(answers[len(answers)-1].Text); where != "near" {
		t.Errorf("the next message ran on %q, want near: %q", where, answers[len(answers)-1].Text)
	}

	time.Sleep(hold - time.Since(cut))
	heal()
	healed := time.Now()
	if v := awaitHostAgents(t, far, 0); v != 0 {
		t.Errorf("after the partition healed the far host still runs %v agents", v)
	}
	for _, p := range orphans {
		if !p.WaitGone(patience) {
			t.Errorf("the lost turn's agent process %d (%s) still runs on the far host", p.PID, p.Cmdline)
		}
	}
	t.Logf("told %s after the cut; the far host's agent stopped %s after the heal", told.Round(time.Millisecond), time.Since(healed).Round(time.Millisecond))
	b.awaitMetric("acp_broker_cluster_hosts", func(v float64) bool { return v == 2 })
	back := time.Since(healed)
	if back > hostTimeout+beat {
		t.Errorf("the far host was heard again %s after the partition healed, want within %s", back.Round(time.Millisecond), hostTimeout+beat)
	}
	t.Logf("the far host was heard again %s after the heal", back.Round(time.Millisecond))
	next := w.mention(alice, "run pwd")
	if where := whereFrom(w.awaitAnswers(next, 1)[0].Text); where != "far" {
		t.Errorf("a new thread ran on %q, want the healed (least loaded) far host", where)
	}
	t.Logf("a new thread ran %s after the heal", time.Since(healed).Round(time.Millisecond))
}
