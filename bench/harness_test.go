package bench

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakediscord"
)

// bins are the broker and the fake agent, built once by TestMain.
var bins brokertest.Binaries

func TestMain(m *testing.M) { brokertest.Main(m, &bins) }

// rig is the broker as a process, connected to a fake Discord.
type rig struct {
	*brokertest.World
	broker *brokertest.Broker
}

// start runs the broker with maxSessions agent slots and the settings
// conf, logging warnings only and serving no HTTP, and waits until it is
// connected.
func start(tb testing.TB, maxSessions int, conf brokertest.Settings) *rig {
	tb.Helper()
	w := brokertest.NewWorld(tb, bins, brokertest.Options{
		Fake: fakediscord.Options{WaitTimeout: 10 * time.Minute},
		Conf: brokertest.Settings{"log.level": "warn", "http.listen": "", "pool.max_sessions": maxSessions}.With(conf),
	})
	b := brokertest.MustGet(tb, time.Minute, w.Start)
	// The broker must be gone within its 15s shutdown grace, whatever is
	// still queued for Discord.
	tb.Cleanup(func() {
		begin := time.Now()
		if _, err := b.Stop(60 * time.Second); err != nil {
			tb.Error(err)
		} else if took := time.Since(begin); took > 20*time.Second {
			tb.Errorf("broker took %s to stop; shutdown.grace is 15s", took)
		}
	})
	return &rig{World: w, broker: b}
}

// ask mentions the bot with text and returns the thread's id, without
// waiting for the thread.
func (r *rig) ask(text string) string {
	return r.Srv.SendMessage(r.Channel, brokertest.Alice, r.Srv.Bot().Mention()+" "+text)
}

// askAll opens n threads at once, each asking text, and waits until every
// one shows its answer finished; it returns the threads and the time from
// the first mention to the last answer.
func (r *rig) askAll(n int, text string) ([]string, time.Duration) {
	begin := time.Now()
	threads := make([]string, n)
	for i := range threads {
		threads[i] = r.ask(text)
	}
	r.Srv.Await(fmt.Sprintf("%d answers", n), func() bool {
		for _, th := range threads {
			if !r.finished(th) {
				return false
			}
		}
		return true
	})
	return threads, time.Since(begin)
}

// finished reports whether thread shows an answer that ended successfully.
func (r *rig) finished(thread string) bool { return r.ended(thread, "-# ✅") }

// ended reports whether thread shows a finished answer whose footer
// contains want.
func (r *rig) ended(thread, want string) bool {
	a, ok := r.lastAnswer(thread)
	return ok && strings.Contains(a.Footer, want)
}

// lastAnswer is the last finished answer in thread.
func (r *rig) lastAnswer(thread string) (brokertest.Answer, bool) {
	all := r.Discord.Answers(thread)
	if len(all) == 0 {
		return brokertest.Answer{}, false
	}
	return all[len(all)-1], true
}

// messageCalls are the bot's message creates and edits in a channel.
func (r *rig) messageCalls(channel string) []fakediscord.Request {
	var out []fakediscord.Request
	for _, q := range r.Srv.Requests() {
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

// proc reads a process's CPU time and memory from /proc.
func proc(pid int) (cpu time.Duration, rss, hwm int64) {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		cpu = time.Duration(utime+stime) * 10 * time.Millisecond // USER_HZ = 100
	}
	rss, _ = brokertest.RSS(pid)
	hwm, _ = brokertest.PeakRSS(pid)
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
