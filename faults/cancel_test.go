package faults

import (
	"strings"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakeslack"
)

// cancelWay is one way a person stops a thread's running turn on a
// platform: do has who do it (answer is the running turn's message),
// and turnedAway checks that a person who may not act on the thread
// (bob, who did not start it) was turned away as the platform does.
type cancelWay struct {
	platform, name string
	do             func(f front, thread, answer string, who person)
	turnedAway     func(t *testing.T, b *broker, f front, thread string)
}

// ignored: a 🛑 of someone who may not cancel is counted, nothing more.
func ignored(t *testing.T, b *broker, f front, _ string) {
	t.Helper()
	b.awaitMetric(`acp_broker_chat_ignored_cancel_reactions_total{platform="`+f.name()+`"}`, func(v float64) bool { return v == 1 })
}

// whisperedTo: the person is told privately, on Slack.
func whisperedTo(who person, want string) func(t *testing.T, b *broker, f front, thread string) {
	return func(t *testing.T, _ *broker, f front, _ string) {
		t.Helper()
		f.(*slackFront).whispered(who, want, 0)
	}
}

var cancelWays = []cancelWay{
	{"discord", "/cancel", func(f front, thread, _ string, who person) {
		d := f.(*discordFront)
		r := d.w.response(d.w.Srv.SlashCommand(thread, d.user(who).ID, "cancel", nil))
		if who == pBob && (!r.Ephemeral() || !strings.Contains(r.Content, "<@"+alice.ID+"> or an approver can /cancel this thread; you can't")) {
			d.w.t.Errorf("bob's /cancel answered %+v", r)
		}
	}, func(*testing.T, *broker, front, string) {}}, // checked as it is answered
	{"discord", "written", func(f front, thread, _ string, who person) {
		d := f.(*discordFront)
		d.w.Discord.Post(thread, d.user(who), d.w.Srv.Bot().Mention()+" cancel")
	}, func(t *testing.T, _ *broker, f front, thread string) {
		d := f.(*discordFront)
		await(t, f, "bob told in a reply", func() bool {
			for _, m := range d.w.Srv.Messages(thread) {
				if m.ReferenceID != "" && strings.Contains(m.Content, "<@"+alice.ID+"> or an approver can /cancel this thread; you can't") {
					return true
				}
			}
			return false
		})
	}},
	{"discord", "🛑 on the first message", func(f front, thread, _ string, who person) { f.react(thread, thread, who, "🛑") }, ignored},
	{"discord", "🛑 on the answer", func(f front, thread, answer string, who person) { f.react(thread, answer, who, "🛑") }, ignored},
	{"slack", "the Cancel button", func(f front, thread, answer string, who person) {
		var m said
		await(f.(*slackFront).w.t, f, "the Cancel button", func() bool {
			m = f.message(thread, answer)
			_, ok := brokertest.SlackButton(m.raw.(fakeslack.Message).Blocks, "Cancel")
			return ok
		})
		f.click(thread, m, who, "Cancel")
	}, whisperedTo(pBob, "can cancel this thread's turn; you can't")},
	{"slack", "written", func(f front, thread, _ string, who person) { f.command(thread, who, "cancel") },
		whisperedTo(pBob, "can @fakebot cancel this thread; you can't")},
	{"slack", "🛑 on the first message", func(f front, thread, _ string, who person) { f.react(thread, thread, who, "🛑") }, ignored},
	{"slack", "🛑 on the answer", func(f front, thread, answer string, who person) { f.react(thread, answer, who, "🛑") }, ignored},
}

// Every way to stop a turn in a thread, on each platform, through the
// broker binary: first by bob, who did not start the thread (turned
// away as the platform does, privately or by ignoring his 🛑, the turn
// running on), then by alice, who did: the turn ends within a few
// seconds saying who cancelled it, what the agent wrote stays, her
// message shows ⏹️, and the same agent answers the thread's next
// message.
func TestCancel_EveryWayOnEveryPlatform(t *testing.T) {
	for _, way := range cancelWays {
		t.Run(way.platform+"/"+way.name, func(t *testing.T) {
			w, f := newWorldOn(t, way.platform, setup{})
			b := w.start()
			thread := f.mention(pAlice, "hang")
			working := f.awaitBotText(thread, "working…", 0)
			pid := f.agentPID(thread, pAlice)

			way.do(f, thread, working.id, pBob)
			way.turnedAway(t, b, f, thread)
			if got := f.answers(thread); len(got) != 0 {
				t.Fatalf("bob ended alice's turn: %q", got[0].footer)
			}

			start := time.Now()
			way.do(f, thread, working.id, pAlice)
			got := f.awaitAnswers(thread, 1)[0]
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("cancelled after %s", took)
			}
			if !strings.Contains(got.footer, "⏹️ cancelled by Alice") {
				t.Fatalf("the turn ended with %q, want who cancelled it", got.footer)
			}
			if !strings.HasPrefix(got.text, "working…") {
				t.Errorf("the answer so far was lost: %q", got.text)
			}
			f.awaitReaction(thread, thread, "⏹️")
			for _, m := range f.botMessages(thread) {
				if len(m.buttons) > 0 {
					t.Errorf("%q still carries buttons after the turn", m.text)
				}
			}
			f.post(thread, pAlice, "stream 2")
			// (On Slack a written command's answer is a message of the
			// thread, before the next answer.)
			if got := f.awaitAnswers(thread, 2)[1]; !strings.Contains(got.text, "chunk 1\nchunk 2\n-# ✅ done") {
				t.Fatalf("the message after the cancel got %q", got.text)
			}
			if after := f.agentPID(thread, pAlice); after != pid {
				t.Errorf("agent pid %d became %d: an agent that answered the cancel was replaced", pid, after)
			}
		})
	}
}
