package faults

import (
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"acpbroker/internal/fakediscord"
)

// schedule is a [[schedules]] table for the World's channel.
func schedule(channel, spec, prompt string) string {
	return fmt.Sprintf(`
[[schedules]]
name = "often"
schedule = %q
channel = %q
prompt = %q
approvers = ["%s"]
`, spec, channel, prompt, carol.ID)
}

// scheduleThreads are the threads of the channel opened for the
// schedule's runs, oldest first, with the message each opened from.
func (w *world) scheduleThreads() (threads []string, openers []fakediscord.Message) {
	for _, m := range w.Srv.Messages(w.Channel) {
		if m.Author.ID == w.Srv.Bot().ID && strings.HasPrefix(m.Content, "⏰ Schedule **often**") {
			if ch, ok := w.Srv.Channel(m.ID); ok && ch.IsThread() {
				threads = append(threads, m.ID)
				openers = append(openers, m)
			}
		}
	}
	return threads, openers
}

// awaitScheduleThreads waits for at least n of the schedule's threads.
func (w *world) awaitScheduleThreads(n int) []string {
	w.t.Helper()
	var threads []string
	w.Srv.Await(fmt.Sprintf("%d threads of the schedule", n), func() bool {
		threads, _ = w.scheduleThreads()
		return len(threads) >= n
	})
	return threads
}

// quiet waits until no run of the schedule is going (every thread shows
// its answer) and returns the threads.
func (w *world) quiet() []string {
	w.t.Helper()
	var threads []string
	w.Srv.Await("the schedule's runs ended", func() bool {
		threads, _ = w.scheduleThreads()
		for _, th := range threads {
			if len(w.Discord.Answers(th)) == 0 {
				return false
			}
		}
		return true
	})
	return threads
}

// schedules has u run /schedules with an action and the schedule.
func (w *world) schedules(u fakediscord.User, action string) string {
	w.t.Helper()
	opts := map[string]any{}
	if action != "" {
		opts = map[string]any{"action": action, "name": "often"}
	}
	return w.response(w.Srv.SlashCommand(w.Channel, u.ID, "schedules", opts)).Content
}

// A schedule at @every 2s runs through the real broker: each run opens
// a thread (from a message naming the schedule) and shows its outcome
// there; a run due while the last (3s long) still goes is skipped and
// its thread says so; /schedules lists it, only an approver (the
// platform's or the schedule's) pauses or resumes it, and a pause holds
// across a restart; a reload that changes it reaches the next run; the
// runs and their outcomes are in `broker audit --schedules`.
func TestSchedules_RunSkipPauseReloadRestart(t *testing.T) {
	w := newWorld(t, setup{conf: settings{"discord.approvers": []string{alice.ID}}})
	w.Raw = schedule(w.Channel, "@every 2s", "slow 1500ms 3")
	b := w.start()

	first := w.awaitScheduleThreads(1)[0]
	got := w.awaitAnswers(first, 1)[0]
	if !strings.HasPrefix(got.Footer, "-# ✅") {
		t.Errorf("the first run ended %q", got.Footer)
	}
	w.awaitReaction(w.Channel, first, "✅")
	skip := w.awaitBotText(first, "⏭️ **often**: the run due at")
	if !strings.Contains(skip.Content, "was skipped: this run, started at") {
		t.Errorf("the skip notice: %q", skip.Content)
	}
	b.awaitMetric(`acp_broker_schedule_runs_total{outcome="skipped"}`, func(v float64) bool { return v >= 1 })
	b.awaitMetric(`acp_broker_schedule_runs_total{outcome="done"}`, func(v float64) bool { return v >= 1 })
	_, openers := w.scheduleThreads()
	if !strings.Contains(openers[0].Content, "slow 1500ms 3") || !strings.Contains(openers[0].Content, "(due ") {
		t.Errorf("the run's message: %q", openers[0].Content)
	}

	list := w.schedules(bob, "")
	if !strings.Contains(list, "**often** `@every 2s`") || !strings.Contains(list, "next ") {
		t.Errorf("/schedules: %q", list)
	}
	if r := w.schedules(bob, "pause"); !strings.Contains(r, "An approver can pause **often**; you can't.") {
		t.Errorf("bob's pause: %q", r)
	}
	if r := w.schedules(carol, "pause"); !strings.Contains(r, "paused **often**") {
		t.Errorf("carol's pause: %q", r)
	}
	n := len(w.quiet())
	time.Sleep(5 * time.Second)
	if now, _ := w.scheduleThreads(); len(now) != n {
		t.Errorf("%d runs while paused", len(now)-n)
	}

	b.stop()
	b = w.start()
	if list := w.schedules(bob, ""); !strings.Contains(list, "⏸️ paused") {
		t.Errorf("after a restart, /schedules says %q", list)
	}
	time.Sleep(3 * time.Second)
	if now, _ := w.scheduleThreads(); len(now) != n {
		t.Errorf("%d runs while paused, after a restart", len(now)-n)
	}
	if r := w.schedules(alice, "resume"); !strings.Contains(r, "resumed **often**") {
		t.Errorf("alice's resume: %q", r)
	}
	w.awaitScheduleThreads(n + 1)

	w.Raw = schedule(w.Channel, "@every 3s", "stream 1 10ms")
	w.writeConfig()
	b.Signal(syscall.SIGHUP)
	w.Srv.Await("a run of the changed schedule", func() bool {
		_, openers := w.scheduleThreads()
		return len(openers) > 0 && strings.Contains(openers[len(openers)-1].Content, "stream 1 10ms")
	})
	if list := w.schedules(bob, ""); !strings.Contains(list, "`@every 3s`") {
		t.Errorf("after the reload, /schedules says %q", list)
	}
	w.quiet()

	out, err := exec.Command(w.Bins.Broker, "audit", "--schedules", "--config", w.writeConfig()).CombinedOutput()
	if err != nil {
		t.Fatalf("broker audit --schedules: %v\n%s", err, out)
	}
	for _, want := range []string{"SCHEDULE", "often", "done", "skipped", "the run started"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("broker audit --schedules does not say %q:\n%s", want, out)
		}
	}
}

// A schedule with thread writes each run into that thread of the bot's
// instead of opening one; its permission_mode answers the agent's
// requests there (the thread says by what); disabled, it runs only when
// an approver runs it now.
func TestSchedules_IntoAThreadWithItsOwnPermissionMode(t *testing.T) {
	w := newWorld(t, setup{conf: settings{"discord.approvers": []string{alice.ID}}})
	b := w.start()
	thread := w.mention(alice, "hello")
	w.awaitAnswers(thread, 1)
	b.stop()
	w.Raw = fmt.Sprintf(`
[[schedules]]
name = "often"
schedule = "@every 1s"
thread = %q
prompt = "permission"
permission_mode = "deny"
enabled = false
`, thread)
	w.start()
	time.Sleep(3 * time.Second)
	if n := len(w.Discord.Answers(thread)); n != 1 {
		t.Fatalf("a disabled schedule ran: %d answers", n)
	}
	if r := w.schedules(alice, "run"); !strings.Contains(r, "ran **often** now") {
		t.Errorf("run now: %q", r)
	}
	got := w.awaitAnswers(thread, 2)[1]
	if !strings.Contains(got.Text, "by schedule often's permission_mode = deny") || !strings.Contains(got.Text, "permission denied: reject") {
		t.Errorf("the run's answer: %q", got.Text)
	}
	if threads, _ := w.scheduleThreads(); len(threads) != 0 {
		t.Errorf("the schedule opened threads %v", threads)
	}
	var opener bool
	for _, m := range w.Srv.Messages(thread) {
		if strings.HasPrefix(m.Content, "⏰ Schedule **often** (run "+alice.ID+")") && strings.Contains(m.Content, "permission") {
			opener = true
		}
	}
	if !opener {
		t.Error("the thread does not show the run's prompt")
	}
}
