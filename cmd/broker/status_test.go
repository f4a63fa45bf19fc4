package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"acpbroker/broker"
	"acpbroker/internal/agenttest"
	"acpbroker/internal/brokertest"
)

// statusOf runs the broker binary's status command with the World's
// configuration and returns its exit status and output.
func statusOf(t *testing.T, w *brokertest.World, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(w.Bins.Broker, append([]string{"status", "--config", filepath.Join(w.Dir, "broker.toml")}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// `broker status` against a broker serving a fake Discord, run as the
// binary it is: the platform connected; the pool full, by profile, with
// a prompt waiting for a slot; and a line per thread with its channel,
// its starter, its profile, its agent's pid, memory, CPU time and uptime,
// and its turn: streaming with a prompt queued behind it, waiting for
// permission, waiting for the answer to a question, cancelling (the
// agent ignores the cancel), waiting for a slot. As text and as JSON.
// Once the broker has stopped, status says no broker is running and
// exits 1.
func TestStatus_TellsWhatARunningBrokerIsDoing(t *testing.T) {
	w := brokertest.NewWorld(t, brokertest.Binaries{Broker: brokerBin(t), Agent: fakeAgent}, brokertest.Options{Conf: brokertest.Settings{
		"pool.max_sessions": 4,
		"turn.cancel_grace": "60s",
		"shutdown.grace":    "5s",
		"agent.exit_grace":  "300ms",
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := w.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop(30 * time.Second)
	mention := func(text string) string {
		t.Helper()
		thread, err := w.Discord.Mention(ctx, brokertest.Alice, text)
		if err != nil {
			t.Fatal(err)
		}
		return thread
	}
	streaming := mention("hang")
	w.Discord.Post(streaming, brokertest.Alice, "stream 1")
	permission := mention("permission")
	question := mention("elicit-form")
	cancelling := mention("ignore-cancel")

	// Each thread's state, as --json says it, once every turn is there.
	want := map[string]string{streaming: "streaming", permission: "waiting for permission", question: "waiting for a question", cancelling: "streaming"}
	var st broker.Status
	await := func(what string) {
		t.Helper()
		var last string
		for {
			code, out, errOut := statusOf(t, w, "--json")
			if code != 0 {
				t.Fatalf("status --json: exit %d, %s", code, errOut)
			}
			last = out
			st = broker.Status{}
			if err := json.Unmarshal([]byte(out), &st); err != nil {
				t.Fatalf("status --json printed %q: %v", out, err)
			}
			got := map[string]string{}
			for _, th := range st.Threads {
				if th.Turn != nil {
					got[th.Thread] = th.Turn.State
				}
			}
			if fmt.Sprint(got) == fmt.Sprint(want) {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: the turns never were %v; status said:\n%s\nlog:\n%s", what, want, last, b.Log.Tail(8<<10))
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	await("four turns running")
	if _, err := w.Discord.Slash(ctx, cancelling, brokertest.Alice, "cancel"); err != nil {
		t.Fatal(err)
	}
	want[cancelling] = "cancelling"
	slot := mention("stream 1")
	want[slot] = "waiting for a slot"
	await("a turn cancelling and one waiting for a slot")

	if st.PID != b.PID() || st.UptimeSeconds <= 0 || st.Version == "" {
		t.Errorf("the broker: version %q, pid %d (want %d), up %.1fs", st.Version, st.PID, b.PID(), st.UptimeSeconds)
	}
	if len(st.Platforms) != 1 || st.Platforms[0] != (broker.PlatformStatus{Name: "discord", Connected: true}) {
		t.Errorf("platforms %+v", st.Platforms)
	}
	p := st.Pool
	if p.Live != 4 || p.Busy != 4 || p.Max != 4 || p.Waiting != 1 || p.Queued != 1 || len(p.Profiles) != 1 ||
		p.Profiles[0] != (broker.ProfileStatus{Name: "default", Default: true, Live: 4, Busy: 4, Waiting: 1}) {
		t.Errorf("pool %+v", p)
	}
	if len(st.Threads) != 5 {
		t.Fatalf("%d threads, want 5: %+v", len(st.Threads), st.Threads)
	}
	pid, err := w.Discord.AgentPID(ctx, streaming, brokertest.Alice)
	if err != nil {
		t.Fatal(err)
	}
	for _, th := range st.Threads {
		if th.ID != "discord:"+th.Thread || th.Platform != "discord" || th.Channel != w.Channel || th.Starter != brokertest.Alice.ID || th.Profile != "default" {
			t.Errorf("thread %s: %+v", th.Thread, th)
		}
		if age := th.Turn.AgeSeconds; age <= 0 || age > 120 || th.Turn.Started.IsZero() {
			t.Errorf("thread %s: its turn is %.1fs old, started %s", th.Thread, age, th.Turn.Started)
		}
		if wantQueued := map[bool]int{true: 1}[th.Thread == streaming]; th.Queued != wantQueued {
			t.Errorf("thread %s: %d queued, want %d", th.Thread, th.Queued, wantQueued)
		}
		a := th.Agent
		if th.Thread == slot {
			if a != nil {
				t.Errorf("the thread waiting for a slot has an agent: %+v", a)
			}
			continue
		}
		if a == nil {
			t.Errorf("thread %s has no agent", th.Thread)
			continue
		}
		if th.Thread == streaming && a.PID != pid {
			t.Errorf("the streaming thread's agent is pid %d; /status says %d", a.PID, pid)
		}
		if a.PID <= 0 || a.Session == "" || a.UptimeSeconds <= 0 || a.UsageError != "" || a.MemoryBytes <= 0 || a.CPUSeconds == nil || *a.CPUSeconds < 0 {
			t.Errorf("thread %s: agent %+v", th.Thread, a)
		}
		// The broker's default memory_max, 4 GiB, where it can give each
		// agent a control group; /proc's figures where it cannot.
		if want := map[string]int64{"cgroup": 4 << 30, "proc": 0}; a.Accounting == "" || want[a.Accounting] != a.MemoryMaxBytes {
			t.Errorf("thread %s: accounting %q with a limit of %d", th.Thread, a.Accounting, a.MemoryMaxBytes)
		}
	}

	code, out, errOut := statusOf(t, w)
	if code != 0 || errOut != "" {
		t.Fatalf("status: exit %d, %s", code, errOut)
	}
	for _, re := range []string{
		`(?m)^Broker \S+, pid ` + fmt.Sprint(b.PID()) + `, up \d`,
		`(?m)^Platforms: discord connected$`,
		`(?m)^Pool: 4 of 4 agents live \(4 busy, 0 starting, 0 stopping\); 1 prompt\(s\) waiting for an agent, 1 queued behind a turn$`,
		`(?m)^  PROFILE +LIVE +BUSY +STARTING +WAITING +MAX$`,
		`(?m)^  default \(default\) +4 +4 +0 +1 +-$`,
		`(?m)^Threads: 5$`,
		`(?m)^  PLATFORM +THREAD +CHANNEL +STARTER +PROFILE +PID +MEMORY +CPU +UPTIME +TURN +QUEUED$`,
		`(?m)^  discord +` + streaming + ` +` + w.Channel + ` +201 +default +` + fmt.Sprint(pid) + ` +[0-9.]+ [KMG]iB( of 4 GiB)? +[0-9.]+m?s +\d+s +streaming for \d+s +1$`,
		`(?m)^  discord +` + permission + ` .* +waiting for permission for \d+s +0$`,
		`(?m)^  discord +` + question + ` .* +waiting for a question for \d+s +0$`,
		`(?m)^  discord +` + cancelling + ` .* +cancelling for \d+s +0$`,
		`(?m)^  discord +` + slot + ` +` + w.Channel + ` +201 +default +- +- +- +- +waiting for a slot for \d+s +0$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("status lacks a line matching %s:\n%s", re, out)
		}
	}

	if code, err := b.Stop(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("the broker stopped with %d, %v", code, err)
	}
	code, out, errOut = statusOf(t, w)
	state := filepath.Join(w.Dir, "state")
	if want := "broker status: no broker is running with state.dir " + state + ": nothing answers on " + filepath.Join(state, "broker.sock") + "\n"; code != 1 || out != "" || errOut != want {
		t.Fatalf("with no broker running: exit %d, %q, %q; want 1 and %q", code, out, errOut, want)
	}
}

// Without a running broker, status says so and exits 1; with a
// configuration it cannot read, 2.
func TestStatus_NoBrokerRunning(t *testing.T) {
	config := writeConfig(t, "")
	code, out, errOut := call("status", "--config", config)
	state := filepath.Join(filepath.Dir(config), "state")
	if code != 1 || out != "" || !strings.HasPrefix(errOut, "broker status: no broker is running with state.dir "+state) {
		t.Fatalf("exit %d, %q, %q", code, out, errOut)
	}
	if code, _, errOut := call("status", "--config", filepath.Join(t.TempDir(), "none.toml")); code != 2 || !strings.Contains(errOut, "none.toml") {
		t.Fatalf("a configuration that is not there: exit %d, %q", code, errOut)
	}
}

// `broker status` run as the broker's own user, not root, is answered:
// the broker and the command are both non-dumpable, and neither needs
// to read the other's /proc.
func TestStatus_AnsweredToTheBrokersOwnUser(t *testing.T) {
	bin, config, asNobody := nobodysBroker(t)
	asOwner := func(c *exec.Cmd) *exec.Cmd {
		c.Env = []string{"PATH=/usr/bin:/bin"}
		return asNobody(c)
	}
	run, out := asOwner(exec.Command(bin, "--config", config)), &agenttest.Buffer{}
	stdin, err := run.StdinPipe() // the console waits on it
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	run.Stdout, run.Stderr = out, out
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Process.Kill(); run.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), "broker started") {
		if time.Now().After(deadline) {
			t.Fatalf("the broker did not start:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	status := asOwner(exec.Command(bin, "status", "--config", config))
	got, err := status.CombinedOutput()
	if err != nil || !strings.Contains(string(got), fmt.Sprintf("pid %d", run.Process.Pid)) {
		t.Fatalf("broker status as the broker's user: %v\n%s\nthe broker's log:\n%s", err, got, out.String())
	}
}
