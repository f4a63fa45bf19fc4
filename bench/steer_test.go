package bench

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakediscord"
)

// agentCancelTime is how long the fake agent takes to answer a cancel,
// its own part of a Send now.
const agentCancelTime = 50 * time.Millisecond

// BenchmarkSendNow measures a Send now, the broker a real process with
// the fake Discord and the fake agent: from the click on a waiting
// message's Send now (the interaction sent to the broker) to the
// message reaching the agent as its next prompt, the turn it interrupts
// having answered the cancel agentCancelTime after it got it. It reports
// the whole time and what the broker adds beyond the agent's own cancel
// time (its session/cancel after the click, and its next prompt after
// the agent's answer). One op is one Send now, in a thread of its own;
// b.N of them run one after another.
func BenchmarkSendNow(b *testing.B) {
	r := start(b, 4, nil)
	var total, beyond []time.Duration
	b.ResetTimer()
	for range b.N {
		thread := r.ask(fmt.Sprintf("hang-timed %s", agentCancelTime))
		r.Srv.Await("the turn working", func() bool {
			for _, m := range r.Discord.BotMessages(thread) {
				if strings.Contains(m.Content, "working…") {
					return true
				}
			}
			return false
		})
		msg := r.Srv.SendMessage(thread, brokertest.Alice, "stamp 1 0ms")
		var note fakediscord.Message
		r.Srv.Await("the note offering Send now", func() bool {
			for _, m := range r.Srv.Messages(thread) {
				if m.ReferenceID == msg && len(m.Buttons()) > 0 {
					note = m
					return true
				}
			}
			return false
		})
		clicked := time.Now()
		r.Srv.ClickButton(thread, note.ID, brokertest.Alice.ID, note.ButtonID(b, "Send now"))
		r.Srv.Await("both turns ended", func() bool { return len(r.Discord.Answers(thread)) == 2 })
		answers := r.Discord.Answers(thread)
		var got, answered int64
		if _, err := fmt.Sscanf(answers[0].Text[strings.Index(answers[0].Text, "cancel="):], "cancel=%d answered=%d", &got, &answered); err != nil {
			b.Fatalf("the interrupted turn: %q: %v", answers[0].Text, err)
		}
		prompt := stamps(answers[1].Text)
		if len(prompt) != 1 {
			b.Fatalf("the message sent now: %q", answers[1].Text)
		}
		total = append(total, prompt[0].Sub(clicked))
		beyond = append(beyond, prompt[0].Sub(clicked)-time.Unix(0, answered).Sub(time.Unix(0, got)))
	}
	b.StopTimer()
	b.ReportMetric(ms(percentile(total, 50)), "total-p50-ms")
	b.ReportMetric(ms(percentile(total, 99)), "total-p99-ms")
	b.ReportMetric(ms(percentile(beyond, 50)), "beyond-agent-p50-ms")
	b.ReportMetric(ms(percentile(beyond, 99)), "beyond-agent-p99-ms")
}
