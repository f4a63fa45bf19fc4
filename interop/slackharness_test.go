package interop

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"acpbroker/adapter"
	"acpbroker/broker"
	"acpbroker/chat/slack"
	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakeslack"
)

// slackAwait bounds every wait on a Slack thread.
const slackAwait = chatAwait

// slackAckDeadline is Slack's: an envelope not acknowledged within it
// is sent again (an event) or fails for the user (a click).
const slackAckDeadline = 3 * time.Second

func (b *slackBroker) openPermissions() int { return b.client.Stats().OpenPermissions }

// cancelling: "@app cancel" written in the thread for the agents with a
// model (whose hanging call has shown nothing to carry a button), the
// Cancel button on the running answer for the SDK example, acknowledged
// within Slack's 3 seconds.
func (b *slackBroker) cancelling(t *testing.T, thread, after string) (string, func()) {
	if b.s.model {
		return "@app cancel", func() { b.say(t, thread, b.srv.Bot().Mention()+" cancel") }
	}
	var working fakeslack.Message // the running answer, with its Cancel button
	var button string
	b.await(t, "the running answer with its Cancel button", func() bool {
		for _, m := range b.turnMessages(thread, after) {
			if id, ok := brokertest.SlackButton(m.Blocks, "Cancel"); ok && strings.Contains(brokertest.SlackText(m.Blocks, m.Text), "I'll help you with that.") {
				working, button = m, id
				return true
			}
		}
		return false
	})
	return "Cancel button", func() { b.acked(t, b.srv.ClickButton(b.channel, working.TS, b.alice.ID, button)) }
}

// models: "@app model" in the thread shows its writer alone the models,
// as a menu.
func (b *slackBroker) models(t *testing.T, thread string) []string {
	b.skipEphemerals = len(b.srv.Ephemerals(b.alice.ID))
	b.srv.PostMessage(b.channel, b.alice.ID, b.srv.Bot().Mention()+" model", fakeslack.InThread(thread))
	var values []string
	b.await(t, "the models offered", func() bool {
		es := b.srv.Ephemerals(b.alice.ID)
		for _, e := range es[min(b.skipEphemerals, len(es)):] {
			values = menuValues(e.Blocks)
			if len(values) >= 2 {
				return true
			}
		}
		return false
	})
	return values
}

// chooseModel: "@app model NAME" in the thread, answered in the thread
// or to its writer alone.
func (b *slackBroker) chooseModel(t *testing.T, thread, pick string) {
	set, _ := b.say(t, thread, b.srv.Bot().Mention()+" model "+pick)
	b.await(t, "the choice acknowledged", func() bool {
		for _, m := range b.turnMessages(thread, set) {
			if strings.Contains(brokertest.SlackText(m.Blocks, m.Text), pick) {
				return true
			}
		}
		for _, e := range b.srv.Ephemerals(b.alice.ID)[b.skipEphemerals:] {
			if strings.Contains(brokertest.SlackText(e.Blocks, e.Text), pick) && e.Posted.After(time.Now().Add(-slackAwait)) {
				return true
			}
		}
		return false
	})
}

func (b *slackBroker) alsoText(*testing.T, string, string)        {}
func (b *slackBroker) alsoPermission(*testing.T, string, clicked) {}
func (b *slackBroker) alsoModel(*testing.T, string)               {}

// menuValues are the values of the static menus' options in blocks.
func menuValues(blocks []json.RawMessage) []string {
	var out []string
	for _, raw := range blocks {
		var b struct {
			Type      string `json:"type"`
			Accessory *struct {
				Options []struct {
					Value string `json:"value"`
				} `json:"options"`
			} `json:"accessory"`
			Elements []struct {
				Options []struct {
					Value string `json:"value"`
				} `json:"options"`
			} `json:"elements"`
		}
		json.Unmarshal(raw, &b)
		if b.Accessory != nil {
			for _, o := range b.Accessory.Options {
				out = append(out, o.Value)
			}
		}
		for _, e := range b.Elements {
			for _, o := range e.Options {
				out = append(out, o.Value)
			}
		}
	}
	return out
}

// slackBroker is a broker serving Slack, wired as the broker binary
// wires one (package broker, through brokertest.World.OpenConfig, with
// Slack's rate limits and the default edit pace), against a fake Slack
// over Socket Mode, in front of one real agent.
type slackBroker struct {
	frontBase
	srv    *fakeslack.Server
	client *slack.Client
	alice  fakeslack.User
	// skipEphemerals counts the ephemeral messages alice had before she
	// asked for the models.
	skipEphemerals int
}

// newSlackBroker starts a fake Slack and the broker in front of s's
// agent; cleanup stops the broker as the binary does at SIGTERM, and
// checks what it asked of Slack.
func newSlackBroker(t *testing.T, s *subject, engineCfg adapter.Config) *slackBroker {
	t.Helper()
	env, err := agentEnv(s.spec.Env)
	if err != nil {
		t.Fatal(err)
	}
	w := brokertest.NewWorld(t, brokertest.Binaries{Agent: s.spec.Command}, brokertest.Options{
		Slack:   &fakeslack.Options{WaitTimeout: slackAwait},
		Conf:    frontSettings(s, brokertest.Settings{"chat.platform": "slack"}),
		LogTail: 512 << 10,
	})
	b := &slackBroker{
		frontBase: frontBase{s: s, platform: "slack", channel: w.Slack.Channel, workDir: w.Work, procs: &procRecorder{}, timings: &timingLog{},
			toolDone: "Modifying critical configuration file"},
		srv:   w.Slack.Srv,
		alice: w.Slack.Alice,
	}
	b.waitFor = w.Slack.Srv.WaitFor
	b.start(t, w, env, engineCfg, func(p broker.Parts) (broker.Platform, error) {
		made, err := broker.Slack(nil)(p)
		if err == nil {
			b.client = made.Platform.(*slack.Client)
		}
		return made, err
	}, b.close)
	return b
}

// close stops the broker and says what it asked of Slack.
func (b *slackBroker) close(t *testing.T) {
	b.stop(t)
	for _, c := range b.srv.Calls() {
		if c.Error == "unknown_method" || c.Error == "method_deprecated" || c.Error == "invalid_blocks" || c.Error == "msg_too_long" {
			t.Errorf("%s: Slack refused %s: %s", b.s.spec.Name, c.Method, c.Error)
		}
	}
	if n := len(b.srv.RateLimited()); n > 0 {
		t.Errorf("%s: %d Web API call(s) answered 429: the broker went past Slack's limits", b.s.spec.Name, n)
	}
	st := b.client.Stats()
	t.Logf("%s: %d Web API calls, %d held back to stay within Slack's limits, %d answered 429", b.s.spec.Name, st.APICalls, st.Throttled, st.RateLimited)
	for _, e := range b.srv.Envelopes() {
		if e.Failed || e.LateAcks > 0 {
			t.Errorf("%s: envelope %s (%s) not acknowledged within Slack's 3 seconds: %+v", b.s.spec.Name, e.ID, e.Kind, e.Attempts)
		}
	}
}

// status asks the broker's engine, by the broker's thread id.
func (b *slackBroker) status(thread string) adapter.ThreadStatus {
	return b.broker.Engine().Status(b.id(thread))
}

// id is a Slack thread's id in the broker.
func (b *slackBroker) id(thread string) string { return broker.ThreadID("slack", b.channel+"/"+thread) }

// procsOf are the agent processes of a thread, by its agent's directory.
func (b *slackBroker) procsOf(thread string) []*agentProc {
	if p := b.procs.byPID(b.status(thread).PID); p != nil {
		return b.procs.of(p.thread)
	}
	return nil
}

// acked waits for an envelope's acknowledgement, which must come within
// Slack's 3 seconds, and returns how long it took.
func (b *slackBroker) acked(t *testing.T, id string) time.Duration {
	t.Helper()
	env := brokertest.MustGet(t, slackAwait, func(ctx context.Context) (fakeslack.Envelope, error) {
		ws := brokertest.Slack{Srv: b.srv}
		return ws.AwaitAck(ctx, id)
	})
	took := env.AckedAt.Sub(env.Created)
	if took > slackAckDeadline {
		t.Errorf("envelope %s acknowledged after %v; Slack allows %v", id, took, slackAckDeadline)
	}
	return took
}

// mention has alice mention the app in the channel; it returns the
// message's ts (the thread's) and when it was sent.
func (b *slackBroker) mention(t *testing.T, prompt string) (string, time.Time) {
	t.Helper()
	sent := time.Now()
	ts := b.srv.PostMessage(b.channel, b.alice.ID, b.srv.Bot().Mention()+" "+prompt)
	if ts == "" {
		t.Fatal("the fake Slack did not take the message")
	}
	t.Cleanup(func() {
		if t.Failed() {
			b.dumpThread(t, ts)
		}
	})
	return ts, sent
}

// say has alice write in the thread; it returns the message's ts and
// when it was sent.
func (b *slackBroker) say(t *testing.T, thread, text string) (string, time.Time) {
	t.Helper()
	sent := time.Now()
	ts := b.srv.PostMessage(b.channel, b.alice.ID, text, fakeslack.InThread(thread))
	if ts == "" {
		t.Fatal("the fake Slack did not take the message")
	}
	return ts, sent
}

// turnMessages are the app's messages in the thread after the message
// after ("": all but the one it hangs from).
func (b *slackBroker) turnMessages(thread, after string) []fakeslack.Message {
	var out []fakeslack.Message
	for _, m := range b.srv.Thread(b.channel, thread) {
		if m.FromBot() && m.TS != thread && (after == "" || m.TS > after) {
			out = append(out, m)
		}
	}
	return out
}

// writtenCancel reports whether the app's message answers "@app cancel":
// no part of the turn's answer.
func writtenCancel(text string) bool {
	return strings.HasPrefix(text, "🛑 @") && strings.HasSuffix(text, "cancelled the current turn.")
}

func (b *slackBroker) shown(thread, after string) (all, answer []shownMsg) {
	for _, m := range b.turnMessages(thread, after) {
		sm := shownMsg{id: m.TS, text: brokertest.SlackText(m.Blocks, m.Text), at: m.Posted}
		all = append(all, sm)
		if !strings.HasPrefix(sm.text, brokertest.PermissionPrefix) && !writtenCancel(sm.text) {
			answer = append(answer, sm)
		}
	}
	return all, answer
}

// revisions: a thread's messages are the channel's.
func (b *slackBroker) revisions(_, ts string) []shownMsg {
	var out []shownMsg
	for _, r := range b.srv.Revisions(b.channel, ts) {
		out = append(out, shownMsg{id: ts, text: brokertest.SlackText(r.Blocks, r.Text), at: r.At})
	}
	return out
}

// awaitReaction: a thread's messages are the channel's, the one it
// hangs from with the thread's ts.
func (b *slackBroker) awaitReaction(t *testing.T, thread, ts, emoji string) {
	t.Helper()
	if ts == "" {
		ts = thread
	}
	ws := brokertest.Slack{Srv: b.srv}
	brokertest.Must(t, slackAwait, func(ctx context.Context) error { return ws.AwaitReaction(ctx, b.channel, ts, emoji) })
	b.await(t, "⚙️ gone from the user's message", func() bool {
		return !b.srv.HasReaction(b.channel, ts, b.srv.Bot().UserID, brokertest.SlackEmoji[brokertest.Working])
	})
}

func (b *slackBroker) allowOnce(t *testing.T, thread, after string) clicked {
	t.Helper()
	var msg fakeslack.Message
	b.await(t, "a permission request with buttons", func() bool {
		for _, m := range b.turnMessages(thread, after) {
			if strings.HasPrefix(brokertest.SlackText(m.Blocks, m.Text), brokertest.PermissionPrefix+" *Permission needed*") && len(brokertest.SlackElements(m.Blocks)) > 0 {
				msg = m
				return true
			}
		}
		return false
	})
	c := clicked{text: brokertest.SlackText(msg.Blocks, msg.Text), shown: msg.Posted}
	var idx int
	c.request, idx = requestOnWire(t, b.procs, b.procsThread(thread))
	c.option = c.request.Options[idx]
	id, ok := brokertest.SlackButton(msg.Blocks, c.option.Name)
	if !ok {
		t.Fatalf("no button %q for option %d on %q", c.option.Name, idx, c.text)
	}
	c.answered = b.acked(t, b.srv.ClickButton(b.channel, msg.TS, b.alice.ID, id))
	want := fmt.Sprintf("@%s chose *%s*", b.alice.DisplayName, c.option.Name) // named, not mentioned
	b.await(t, "the request saying who chose what", func() bool {
		m, _ := b.srv.Message(b.channel, msg.TS)
		return strings.Contains(brokertest.SlackText(m.Blocks, m.Text), want) && len(brokertest.SlackElements(m.Blocks)) == 0
	})
	return c
}

// procsThread is the name the pool gave the thread's agent directory.
func (b *slackBroker) procsThread(thread string) string {
	if p := b.procs.byPID(b.status(thread).PID); p != nil {
		return p.thread
	}
	return ""
}

// dumpThread logs what the thread shows and what its agents' stdio
// carried.
func (b *slackBroker) dumpThread(t *testing.T, thread string) {
	for _, m := range b.srv.Thread(b.channel, thread) {
		t.Logf("thread %s: %s (bot %v, %d edits, posted %s): %q", thread, m.TS, m.FromBot(), m.Edits, m.Posted.Format("15:04:05.000"), brokertest.SlackText(m.Blocks, m.Text))
	}
	for _, p := range b.procsOf(thread) {
		p.dump(t)
	}
}
