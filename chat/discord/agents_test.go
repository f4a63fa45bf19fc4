package discord_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"acpbroker/chat"
	"acpbroker/chat/discord"
	"acpbroker/chat/thread"
	"acpbroker/pool"
)

// twoAgents is a setup with the profiles alpha (the default) and beta,
// each a fake agent that tells them apart by WHO in its environment; the
// allowed channel's threads get beta unless /new says otherwise.
func twoAgents(t *testing.T, channelAgent string) setup {
	profiles := map[string]*pool.Profile{
		"alpha": {Command: fakeAgent, Env: []string{"WHO=alpha"}, WorkDir: t.TempDir(), PerThreadDir: true},
		"beta":  {Command: fakeAgent, Env: []string{"WHO=beta"}, WorkDir: t.TempDir(), PerThreadDir: true, MaxSessions: 1},
	}
	s := setup{pool: pool.Config{Profiles: profiles, DefaultProfile: "alpha"}}
	s.adjust = func(h *harness, d *discord.Config) {
		if channelAgent != "" {
			d.Access.ChannelAgents = map[string]string{h.channel: channelAgent}
		}
		d.Agents = func() []chat.AgentInfo {
			st := h.pool.Stats()
			var out []chat.AgentInfo
			for _, name := range []string{"alpha", "beta"} {
				ps := st.Profiles[name]
				out = append(out, chat.AgentInfo{Name: name, Description: "agent " + name, Default: name == "alpha",
					Live: ps.Live, Busy: ps.Busy, Max: profiles[name].MaxSessions})
			}
			return out
		}
	}
	return s
}

// who asks a thread's agent which profile it is.
func (h *harness) who(thread string) string {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), h.wait)
	defer cancel()
	n := len(h.discord.Answers(thread))
	h.discord.Post(thread, alice, "env")
	answers, err := h.discord.AwaitAnswers(ctx, thread, n+1)
	if err != nil {
		h.t.Fatal(err)
	}
	text := answers[n].Text
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, "WHO="); ok {
			return v
		}
	}
	h.t.Fatalf("the agent did not say WHO: %q", text)
	return ""
}

// A mention in a channel with its own agent gets that agent; /new starts
// a thread with the one chosen, and runs its prompt there; /agents lists
// them with their counts.
func TestNew_ThreadsGetTheirChannelsOrTheChosenAgent(t *testing.T) {
	h := newHarness(t, twoAgents(t, "beta"))
	mentioned := h.mention(alice, "env")
	if got := h.who(mentioned); got != "beta" {
		t.Fatalf("a mention in beta's channel got %q", got)
	}

	r := h.slashWith(h.channel, alice, "new", map[string]any{"agent": "alpha", "prompt": "env"})
	if !strings.Contains(r.Content, "started a thread with **alpha**") {
		t.Fatalf("/new answered %q", r.Content)
	}
	thread := h.threadOf("started a thread with **alpha**")
	msgs := h.answer(thread, "✅ done")
	if !strings.Contains(joined(msgs), "WHO=alpha") {
		t.Fatalf("/new's prompt was answered by %q", joined(msgs))
	}
	if got := h.who(thread); got != "alpha" {
		t.Fatalf("the /new thread's next turn got %q", got)
	}

	h.srv.Await("the agents idle", func() bool {
		st := h.pool.Stats()
		return st.Profiles["alpha"].Busy == 0 && st.Profiles["beta"].Busy == 0
	})
	list := h.slashWith(h.channel, bob, "agents", nil)
	for _, want := range []string{"**alpha** (default): agent alpha — 1 live, 0 busy", "**beta** (this channel's): agent beta — 1 live, 0 busy, at most 1"} {
		if !strings.Contains(list.Content, want) {
			t.Errorf("/agents says %q; want %q in it", list.Content, want)
		}
	}
	if st := h.slashWith(thread, alice, "status", nil); !strings.Contains(st.Content, "**Profile**: alpha") {
		t.Errorf("/status says %q", st.Content)
	}
}

// /new with an agent that is not configured, or in a channel the bot
// does not serve, starts nothing and says why.
func TestNew_RefusesWhatItCannotStart(t *testing.T) {
	h := newHarness(t, twoAgents(t, ""))
	if r := h.slashWith(h.other, alice, "new", map[string]any{"agent": "alpha"}); !strings.Contains(r.Content, "I don't answer in this channel") {
		t.Fatalf("/new in another channel answered %q", r.Content)
	}
	if n := h.pool.Stats().Live; n != 0 {
		t.Fatalf("%d agents live after refusals", n)
	}
}

// oneSchedule is a schedule list of one, which posts to a channel.
type oneSchedule struct{ channel string }

func (s oneSchedule) List() []thread.ScheduleInfo {
	return []thread.ScheduleInfo{{Name: "nightly-report", Spec: "0 3 * * *", Where: "<#" + s.channel + ">", Enabled: true,
		Last: "❌ failed: the build is red"}}
}
func (oneSchedule) Run(string, thread.User) (string, error) { return "", errors.New("not here") }
func (oneSchedule) Pause(string, bool, thread.User) error   { return errors.New("not here") }

// /agents and /schedules in a channel the bot does not serve are refused
// as /new is there, telling nothing of the agents or the schedules; in
// a channel it serves they answer.
func TestChannelCommands_OnlyWhereServed(t *testing.T) {
	h := newHarness(t, twoAgents(t, ""))
	h.client.Threads().SetSchedules(oneSchedule{channel: h.channel})
	for _, name := range []string{"schedules", "agents"} {
		r := h.slashWith(h.other, alice, name, nil)
		if !strings.Contains(r.Content, "I don't answer in this channel") || strings.Contains(r.Content, "nightly-report") ||
			strings.Contains(r.Content, "alpha") {
			t.Fatalf("/%s in another channel answered %q", name, r.Content)
		}
	}
	if r := h.slashWith(h.channel, alice, "schedules", nil); !strings.Contains(r.Content, "nightly-report") {
		t.Fatalf("/schedules in the served channel answered %q", r.Content)
	}
}
