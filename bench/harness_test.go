package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"acpbroker/internal/agenttest"
	"acpbroker/internal/fakediscord"

	"go.uber.org/goleak"
)

var fakeAgent, brokerBin string

func TestMain(m *testing.M) {
	bin, dir := agenttest.MustBuild()
	fakeAgent = bin
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	brokerBin = filepath.Join(dir, "broker")
	build := exec.Command("go", "build", "-o", brokerBin, "./cmd/broker")
	build.Dir = filepath.Dir(strings.TrimSpace(string(out)))
	if b, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build broker: %v\n%s", err, b)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

const token = "bench-token"

var alice = fakediscord.User{ID: "201", Username: "alice"}

// rig is the broker as a process, connected to a fake Discord.
type rig struct {
	tb      testing.TB
	srv     *fakediscord.Server
	channel string
	cmd     *exec.Cmd
	logs    *agenttest.Buffer
}

// start runs the broker with maxSessions agent slots and extra TOML, and
// waits until it is connected.
func start(tb testing.TB, maxSessions int, extra string) *rig {
	tb.Helper()
	srv := fakediscord.New(tb, fakediscord.Options{Token: token, WaitTimeout: 10 * time.Minute})
	srv.AddUser(alice)
	r := &rig{tb: tb, srv: srv, channel: srv.AddChannel("100", "", "agents"), logs: &agenttest.Buffer{}}
	dir := tb.TempDir()
	config := filepath.Join(dir, "broker.toml")
	text := fmt.Sprintf(`
[log]
format = "json"
level = "warn"
[chat]
platform = "discord"
[agent]
command = %q
cwd = %q
[state]
dir = %q
[pool]
max_sessions = %d
[http]
listen = ""
[discord]
token = %q
api_url = %q
allowed_channels = [%q]
%s
`, fakeAgent, filepath.Join(dir, "work"), filepath.Join(dir, "state"), maxSessions, token, srv.APIURL(), r.channel, extra)
	if err := os.WriteFile(config, []byte(text), 0o600); err != nil {
		tb.Fatal(err)
	}
	r.cmd = exec.Command(brokerBin, "--config", config)
	r.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	r.cmd.Stdout, r.cmd.Stderr = r.logs, r.logs
	if err := r.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(r.stop)
	srv.Await("broker connected", func() bool { return srv.Connected() && len(srv.Commands()) == 3 })
	return r
}

// stop sends SIGTERM; the broker must be gone within its 15s shutdown
// grace, whatever is still queued for Discord.
func (r *rig) stop() {
	start := time.Now()
	r.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case <-done:
		if took := time.Since(start); took > 20*time.Second {
			r.tb.Errorf("broker took %s to stop; shutdown.grace is 15s", took)
		}
	case <-time.After(60 * time.Second):
		r.cmd.Process.Kill()
		<-done
		r.tb.Errorf("broker did not stop within 60s")
	}
	if r.tb.Failed() {
		r.tb.Logf("broker log:\n%s", r.logs)
	}
}

// ask mentions the bot with text and returns the thread's id.
func (r *rig) ask(text string) string {
	return r.srv.SendMessage(r.channel, alice, r.srv.Bot().Mention()+" "+text)
}

// finished reports whether the bot's last message in thread ends the turn
// successfully.
func (r *rig) finished(thread string) bool { return r.ended(thread, "-# ✅") }

// ended reports whether the bot's last message in thread is a turn's last
// and its closing line contains want.
func (r *rig) ended(thread, want string) bool {
	m := r.lastBotMessage(thread)
	lines := strings.Split(strings.TrimSpace(m.Content), "\n")
	last := lines[len(lines)-1]
	status := strings.HasPrefix(last, "-# ⏳") || strings.Contains(last, "stopping:")
	return strings.HasPrefix(last, "-# ") && !status && strings.Contains(last, want)
}

func (r *rig) lastBotMessage(thread string) fakediscord.Message {
	msgs := r.srv.Messages(thread)
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Author.ID == r.srv.Bot().ID {
			return msgs[i]
		}
	}
	return fakediscord.Message{}
}

// messageCalls are the bot's message creates and edits in a channel.
func (r *rig) messageCalls(channel string) []fakediscord.Request {
	var out []fakediscord.Request
	for _, q := range r.srv.Requests() {
		if q.Major == channel && (q.Route == fakediscord.RouteCreateMessage || q.Route == fakediscord.RouteEditMessage) && !q.RateLimited {
			out = append(out, q)
		}
	}
	return out
}

// maxIn5s is the most calls within any 5-second span.
func maxIn5s(calls []fakediscord.Request) int {
	best := 0
	for i := range calls {
		n := 0
		for j := i; j < len(calls) && calls[j].At.Sub(calls[i].At) < 5*time.Second; j++ {
			n++
		}
		best = max(best, n)
	}
	return best
}

// proc reads the broker's CPU time and memory from /proc.
func proc(pid int) (cpu time.Duration, rss, hwm int64) {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		cpu = time.Duration(utime+stime) * 10 * time.Millisecond // USER_HZ = 100
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			var kb int64
			if _, err := fmt.Sscanf(line, "VmRSS: %d kB", &kb); err == nil {
				rss = kb << 10
			}
			if _, err := fmt.Sscanf(line, "VmHWM: %d kB", &kb); err == nil {
				hwm = kb << 10
			}
		}
	}
	return cpu, rss, hwm
}

// percentile of sorted durations.
func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[min(len(d)-1, len(d)*p/100)]
}
