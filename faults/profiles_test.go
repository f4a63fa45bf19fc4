package faults

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"acpbroker/internal/agenttest"
	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakediscord"
	"acpbroker/internal/fakeslack"
	"acpbroker/store"
)

// who asks the agent of a thread which profile it is: each profile of
// these tests sets WHO in its agent's environment.
func (w *world) who(thread string) string {
	w.t.Helper()
	n := len(w.Discord.Answers(thread))
	w.Discord.Post(thread, alice, "env")
	answers := w.awaitAnswers(thread, n+1)
	text := answers[n].Text
	if m := regexp.MustCompile(`(?m)^WHO=(\w+)$`).FindStringSubmatch(text); m != nil {
		return m[1]
	}
	return "(none: " + text + ")"
}

// A thread keeps the profile it started with for life: across a restart
// in which its channel's profile changed, its agent is still the one it
// had; once that profile is removed from the configuration, the thread
// is told so in words and nothing is started.
func TestProfiles_AThreadKeepsItsAgentAcrossRestartsAndIsToldWhenItIsRemoved(t *testing.T) {
	w := newWorld(t, setup{})
	profiles := settings{
		"agents.default":                   "a",
		"agents.a.env":                     []string{"WHO=a"},
		"agents.b.env":                     []string{"WHO=b"},
		"channels." + w.Channel + ".agent": "b",
	}
	w.Conf = w.Conf.With(profiles)
	first := w.start()
	thread := w.mention(alice, "hello")
	w.awaitAnswers(thread, 1)
	if got := w.who(thread); got != "b" {
		t.Fatalf("a thread of b's channel got %s", got)
	}
	first.stop()

	w.Conf = w.Conf.With(settings{"channels." + w.Channel + ".agent": "a"})
	second := w.start()
	if got := w.who(thread); got != "b" {
		t.Fatalf("after a restart with the channel's profile changed, the thread got %s", got)
	}
	if other := w.mention(bob, "env"); !strings.Contains(w.awaitAnswers(other, 1)[0].Text, "WHO=a") {
		t.Fatalf("a new thread of the channel did not get a")
	}
	second.stop()

	w.Conf = w.Conf.With(settings{"agents.b.env": nil})
	third := w.start()
	n := len(w.Discord.Answers(thread))
	w.Discord.Post(thread, alice, "env")
	got := w.awaitAnswers(thread, n+1)[n]
	if !strings.Contains(got.Text, `the agent profile "b" this thread uses is no longer configured; start a new thread`) || strings.Contains(got.Text, "WHO=") {
		t.Fatalf("the thread of a removed profile shows %q", got.Text)
	}
	if st := w.slash(thread, alice, "status"); !strings.Contains(st.Content, "not running") {
		t.Fatalf("/status of the removed profile's thread: %q, want no agent running", st.Content)
	}
	if v, ok := third.metric(`acp_broker_agent_spawns_total`); !ok || v != 0 {
		t.Fatalf("%v agents were started for it", v)
	}
}

// A profile with workspace = "worktree" gives each thread its own git
// worktree of the repository, on a branch named after the thread, made
// before its agent starts and shown in /status; what an agent writes
// there is not in another thread's checkout nor in the repository's.
func TestProfiles_AWorktreeProfileGivesEachThreadItsOwnCheckout(t *testing.T) {
	w := newWorld(t, setup{})
	if os.Getuid() == 0 {
		// As under systemd, the broker runs as an unprivileged user: the
		// worktrees it makes are that user's, and so its agents'.
		w.BrokerUser = &syscall.Credential{Uid: agenttest.Nobody, Gid: agenttest.Nobody}
	}
	repo := newRepo(t, filepath.Join(w.Dir, "repo"))
	w.Conf = w.Conf.With(settings{"agent.workspace": "worktree", "agent.repo": repo, "agent.base": "main"})
	w.start()
	dirs := map[string]string{}
	for _, u := range []string{"one", "two"} {
		thread := w.mention(alice, "probe w:notes-"+u+".txt")
		if a := w.awaitAnswers(thread, 1)[0]; !strings.Contains(a.Text, "w:notes-"+u+".txt ok") {
			t.Fatalf("the agent could not write in its worktree: %q", a.Text)
		}
		st := w.slash(thread, alice, "status")
		m := regexp.MustCompile("\\*\\*Workspace\\*\\*: `([^`]+)`").FindStringSubmatch(st.Content)
		if m == nil {
			t.Fatalf("/status does not show the workspace: %q", st.Content)
		}
		dirs[u] = m[1]
		branch, err := git("-C", m[1], "rev-parse", "--abbrev-ref", "HEAD").Output()
		if err != nil || strings.TrimSpace(string(branch)) != "acp/"+thread {
			t.Fatalf("thread %s's worktree is on %q (%v), want acp/%s", thread, branch, err, thread)
		}
		// The agent commits on its branch from inside its sandbox: the
		// repository's git directory is there for it.
		w.Discord.Post(thread, alice, "run git -c user.name=agent -c user.email=agent@example.com commit -q --allow-empty -m from-"+u)
		if a := w.awaitAnswers(thread, 2)[1]; !strings.Contains(a.Text, "exit: <nil>") {
			t.Fatalf("git commit in the agent's worktree: %q", a.Text)
		}
		if log, err := git("-C", repo, "log", "--format=%s", "acp/"+thread).Output(); err != nil || !strings.HasPrefix(string(log), "from-"+u+"\n") {
			t.Fatalf("branch acp/%s has %q (%v), want the agent's commit on top", thread, log, err)
		}
	}
	if dirs["one"] == dirs["two"] {
		t.Fatalf("two threads share %s", dirs["one"])
	}
	for u, dir := range dirs {
		other := map[string]string{"one": "two", "two": "one"}[u]
		if _, err := os.Stat(filepath.Join(dir, "notes-"+u+".txt")); err != nil {
			t.Errorf("%s's file is not in its worktree: %v", u, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "notes-"+other+".txt")); err == nil {
			t.Errorf("%s's file shows in %s's worktree", other, u)
		}
		if _, err := os.Stat(filepath.Join(repo, "notes-"+u+".txt")); err == nil {
			t.Errorf("%s's file shows in the repository's own checkout", u)
		}
	}
}

// Two channels mapped to two profiles get their own agents at once: a
// thread in each, both agents live together, each the profile of its
// channel, counted by profile.
func TestProfiles_TwoChannelsOfTwoProfilesGetTheirOwnAgentsAtOnce(t *testing.T) {
	w := newWorld(t, setup{})
	second := w.Srv.AddChannel(brokertest.GuildID, "", "reviews")
	w.Conf = w.Conf.With(settings{
		"agents.default":                   "a",
		"agents.a.env":                     []string{"WHO=a"},
		"agents.b.env":                     []string{"WHO=b"},
		"channels." + w.Channel + ".agent": "a",
		"channels." + second + ".agent":    "b",
	})
	b := w.start()
	threads := map[string]string{}
	threads["a"] = w.mention(alice, "hang")
	threads["b"] = brokertest.MustGet(t, patience, func(ctx context.Context) (string, error) {
		return brokertest.Discord{Srv: w.Srv, Channel: second}.Mention(ctx, bob, "hang")
	})
	for profile, thread := range threads {
		w.awaitBotText(thread, "working…")
		st := w.slash(thread, alice, "status")
		if !strings.Contains(st.Content, "**Profile**: "+profile) {
			t.Fatalf("the thread of %s's channel: /status %q", profile, st.Content)
		}
	}
	pa, pb := w.agentPID(threads["a"], alice), w.agentPID(threads["b"], bob)
	if pa == 0 || pb == 0 || pa == pb {
		t.Fatalf("agents: pid %d for a, %d for b; want two", pa, pb)
	}
	for _, p := range []string{"a", "b"} {
		b.awaitMetric(`acp_broker_profile_agents_busy{profile="`+p+`"}`, func(v float64) bool { return v == 1 })
	}
	starters := map[string]fakediscord.User{"a": alice, "b": bob}
	for profile, thread := range threads {
		w.slash(thread, starters[profile], "cancel")
		w.awaitAnswers(thread, 1)
		if got := w.who(thread); got != profile {
			t.Fatalf("the thread of %s's channel runs %s", profile, got)
		}
	}
}

// A profile's max_sessions holds while another profile still starts
// agents: with a.max_sessions = 1 and one of a's agents busy, a second
// thread of a waits (and says so) while a thread of b gets its agent and
// answers; once a's first turn ends, the waiting thread takes the slot
// (its idle agent stopped to make room). a never has two agents.
func TestProfiles_AProfilesMaxSessionsHoldsWhileAnotherProfileStarts(t *testing.T) {
	w := newWorld(t, setup{})
	w.Conf = w.Conf.With(settings{
		"pool.max_sessions":                4,
		"agents.default":                   "a",
		"agents.a.env":                     []string{"WHO=a"},
		"agents.a.max_sessions":            1,
		"agents.b.env":                     []string{"WHO=b"},
		"channels." + w.Channel + ".agent": "a",
	})
	b := w.start()
	first := w.mention(alice, "hang")
	w.awaitBotText(first, "working…")
	waiting := w.mention(bob, "env")
	w.awaitBotText(waiting, "waiting for a free agent slot")

	other := w.slashNew(carol, "b", "env")
	if got := w.awaitAnswers(other, 1)[0].Text; !strings.Contains(got, "WHO=b") {
		t.Fatalf("b's thread answered %q", got)
	}
	if n := len(w.Discord.Answers(waiting)); n != 0 {
		t.Fatalf("a's second thread answered while a's only slot was busy")
	}
	if v, _ := b.metric(`acp_broker_profile_agents_live{profile="a"}`); v != 1 {
		t.Fatalf("a has %v live agents, want 1", v)
	}

	w.slash(first, alice, "cancel")
	if got := w.awaitAnswers(waiting, 1)[0].Text; !strings.Contains(got, "WHO=a") {
		t.Fatalf("a's second thread answered %q", got)
	}
	if v, _ := b.metric(`acp_broker_profile_agents_live{profile="a"}`); v != 1 {
		t.Fatalf("a has %v live agents, want 1", v)
	}
	if pid := w.agentPID(first, alice); pid != 0 {
		t.Fatalf("a's first thread still has agent %d; it should have made room", pid)
	}
}

// newChoices returns the choices the registered /new command offers for
// its agent option, as name → value.
func (w *world) newChoices() map[string]string {
	w.t.Helper()
	for _, c := range w.Srv.Commands() {
		if c.Name != "new" {
			continue
		}
		var cmd struct {
			Options []struct {
				Name    string `json:"name"`
				Choices []struct {
					Name  string `json:"name"`
					Value string `json:"value"`
				} `json:"choices"`
			} `json:"options"`
		}
		if err := json.Unmarshal(c.JSON, &cmd); err != nil {
			w.t.Fatalf("/new as registered: %v: %s", err, c.JSON)
		}
		out := map[string]string{}
		for _, o := range cmd.Options {
			if o.Name == "agent" {
				for _, ch := range o.Choices {
					out[ch.Value] = ch.Name
				}
			}
		}
		return out
	}
	w.t.Fatal("no /new command is registered")
	return nil
}

// /new's agent option offers the profiles as choices (with their
// descriptions), and a reload that adds a profile registers it again
// with the new one, which /new then starts; /new with an agent that is
// not configured is answered in words, and opens no thread.
func TestProfiles_NewOffersTheProfilesAndAReloadRefreshesThem(t *testing.T) {
	w := newWorld(t, setup{})
	w.Conf = w.Conf.With(settings{
		"agents.default":       "a",
		"agents.a.description": "the first",
		"agents.a.env":         []string{"WHO=a"},
		"agents.b.env":         []string{"WHO=b"},
	})
	b := w.start()
	if got := w.newChoices(); len(got) != 2 || got["a"] != "a: the first" || got["b"] != "b" {
		t.Fatalf("/new offers %v", got)
	}

	threads := len(w.Srv.Threads())
	r := w.response(w.Srv.SlashCommand(w.Channel, alice.ID, "new", map[string]any{"agent": "unknown"}))
	if !r.Ephemeral() || r.Content != "There is no agent \"unknown\". The agents are `a`, `b`." {
		t.Fatalf("/new agent:unknown answered %q (ephemeral %v)", r.Content, r.Ephemeral())
	}
	if n := len(w.Srv.Threads()); n != threads {
		t.Fatalf("/new agent:unknown opened a thread")
	}

	w.Conf = w.Conf.With(settings{"agents.c.env": []string{"WHO=c"}, "agents.c.description": "the third"})
	w.writeConfig()
	b.Signal(syscall.SIGHUP)
	w.Srv.Await("/new offering c", func() bool {
		for _, c := range w.Srv.Commands() {
			if c.Name == "new" && strings.Contains(string(c.JSON), `"value":"c"`) {
				return true
			}
		}
		return false
	})
	if got := w.newChoices(); len(got) != 3 || got["c"] != "c: the third" {
		t.Fatalf("after the reload /new offers %v", got)
	}
	thread := w.slashNew(alice, "c", "env")
	if got := w.awaitAnswers(thread, 1)[0].Text; !strings.Contains(got, "WHO=c") {
		t.Fatalf("the thread /new agent:c opened answered %q", got)
	}
}

// Worktrees are made per thread and removed once their thread is past
// state.retention, through the broker: a thread idle longer than the
// retention when the broker starts loses its worktree at once (its
// branch, with what the agent committed, is kept), a thread within it
// keeps its own. A worktree made with delete_branches = true loses its
// branch too.
func TestProfiles_WorktreesPastRetentionAreRemoved(t *testing.T) {
	w := newWorld(t, setup{})
	repo := newRepo(t, filepath.Join(w.Dir, "repo"))
	w.Conf = w.Conf.With(settings{"agent.workspace": "worktree", "agent.repo": repo, "agent.base": "main", "state.retention": "1h"})
	w.forAgents(repo)
	b := w.start()
	dirs := map[string]string{}
	var old, recent string
	for _, name := range []string{"old", "recent"} {
		thread := w.mention(alice, "hello")
		w.awaitAnswers(thread, 1)
		st := w.slash(thread, alice, "status")
		m := regexp.MustCompile("\\*\\*Workspace\\*\\*: `([^`]+)`").FindStringSubmatch(st.Content)
		if m == nil {
			t.Fatalf("/status does not show the workspace: %q", st.Content)
		}
		if _, err := os.Stat(filepath.Join(m[1], ".git")); err != nil {
			t.Fatalf("thread %s's workspace %s is no worktree: %v", thread, m[1], err)
		}
		dirs[thread] = m[1]
		if name == "old" {
			old = thread
		} else {
			recent = thread
		}
	}
	b.awaitMetric("acp_broker_store_worktrees", func(v float64) bool { return v == 2 })
	b.stop()

	w.age(old)

	b = w.start()
	b.awaitMetric("acp_broker_store_worktrees", func(v float64) bool { return v == 1 })
	if _, err := os.Stat(dirs[old]); !os.IsNotExist(err) {
		t.Fatalf("the worktree of the thread past retention is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dirs[recent], ".git")); err != nil {
		t.Fatalf("the worktree of the recent thread is gone: %v", err)
	}
	if lines := b.Log.Grep("worktree past retention removed", old); len(lines) != 1 {
		t.Fatalf("%d log lines say the old worktree was removed", len(lines))
	}
	if out, err := git("-C", repo, "branch", "--list", "acp/"+old).Output(); err != nil || !strings.Contains(string(out), "acp/"+old) {
		t.Fatalf("the old thread's branch is gone (delete_branches is false): %q %v", out, err)
	}

	// With delete_branches = true, a worktree made then takes its branch
	// with it once its thread is past retention.
	b.stop()
	w.Conf = w.Conf.With(settings{"agent.delete_branches": true})
	b = w.start()
	third := w.mention(alice, "hello")
	w.awaitAnswers(third, 1)
	b.awaitMetric("acp_broker_store_worktrees", func(v float64) bool { return v == 2 })
	b.stop()
	w.age(third)
	b = w.start()
	b.awaitMetric("acp_broker_store_worktrees", func(v float64) bool { return v == 1 })
	if out, err := git("-C", repo, "branch", "--list", "acp/*").Output(); err != nil || strings.Contains(string(out), "acp/"+third) || !strings.Contains(string(out), "acp/"+recent) {
		t.Fatalf("with delete_branches the branches are %q (%v), want the third thread's gone and the recent one's kept", out, err)
	}
}

// /agents lists a profile removed by a reload for as long as its agents
// run, marked removed; /new no longer offers it.
func TestProfiles_AgentsListsARemovedProfileWhileItsAgentsRun(t *testing.T) {
	w := newWorld(t, setup{})
	w.Conf = w.Conf.With(settings{
		"agents.default": "a",
		"agents.a.env":   []string{"WHO=a"},
		"agents.b.env":   []string{"WHO=b"},
	})
	b := w.start()
	thread := w.slashNew(alice, "b", "env")
	w.awaitAnswers(thread, 1)

	w.Conf = w.Conf.With(settings{"agents.b.env": nil})
	w.writeConfig()
	b.Signal(syscall.SIGHUP)
	w.Srv.Await("/new no longer offering b", func() bool {
		for _, c := range w.Srv.Commands() {
			if c.Name == "new" && !strings.Contains(string(c.JSON), `"value":"b"`) {
				return true
			}
		}
		return false
	})
	list := w.slash(w.Channel, bob, "agents")
	for _, want := range []string{"**a** (default) — 0 live, 0 busy", "**b** (removed) — 1 live, 0 busy"} {
		if !strings.Contains(list.Content, want) {
			t.Errorf("/agents says %q; want %q in it", list.Content, want)
		}
	}
	if got := w.newChoices(); len(got) != 1 || got["a"] == "" {
		t.Errorf("/new offers %v after b was removed", got)
	}
}

// age has the state say thread (Discord's id) was last used two hours
// ago; the broker must be stopped.
func (w *world) age(thread string) {
	w.t.Helper()
	st, err := store.Open(store.Options{Dir: filepath.Join(w.Dir, "state"), Now: func() time.Time { return time.Now().Add(-2 * time.Hour) }})
	if err != nil {
		w.t.Fatal(err)
	}
	id := "discord:" + thread // as the broker names it
	st.SetThreadProfile(id, st.ThreadProfile(id))
	if err := st.Close(); err != nil {
		w.t.Fatal(err)
	}
}

// newRepo makes a git repository at dir with one commit on main.
// git is a git command of the test on a repository that may be another
// user's (the broker's, when the test runs it as one).
func git(args ...string) *exec.Cmd {
	return exec.Command("git", append([]string{"-c", "safe.directory=*"}, args...)...)
}

func newRepo(t *testing.T, dir string) string {
	t.Helper()
	for _, args := range [][]string{
		{"init", "-q", "-b", "main", dir},
		{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "first"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

// [channels."ID"] names Slack's channels as it does Discord's: with
// slack.allowed_channels empty, two Slack channels each given a profile
// are allowed by their tables, and each one's threads get its profile's
// agent, named in the thread's status and answering from its own
// environment.
func TestProfiles_SlackChannelsOfTwoProfilesGetTheirOwnAgents(t *testing.T) {
	w, _ := newWorldOn(t, "slack", setup{})
	sl := w.Slack
	second := sl.Srv.AddChannel(fakeslack.Channel{Name: "reviews"}).ID
	w.Conf = w.Conf.With(settings{
		"slack.allowed_channels":            []string{},
		"agents.default":                    "a",
		"agents.a.env":                      []string{"WHO=a"},
		"agents.b.env":                      []string{"WHO=b"},
		"channels." + sl.Channel + ".agent": "b",
		"channels." + second + ".agent":     "a",
	})
	w.start()
	for channel, profile := range map[string]string{sl.Channel: "b", second: "a"} {
		thread := brokertest.MustGet(t, patience, func(ctx context.Context) (string, error) {
			return sl.MentionIn(ctx, channel, sl.Alice, "env")
		})
		on := &brokertest.Slack{Srv: sl.Srv, Channel: channel, Alice: sl.Alice}
		got := brokertest.MustGet(t, patience, func(ctx context.Context) ([]brokertest.SlackAnswer, error) {
			return on.AwaitAnswers(ctx, thread, 1)
		})
		if !regexp.MustCompile(`(?m)^WHO=` + profile + `$`).MatchString(got[0].Text) {
			t.Errorf("the thread of the channel of %s answered from %q", profile, got[0].Text)
		}
		st := brokertest.MustGet(t, patience, func(ctx context.Context) (string, error) { return on.Status(ctx, thread, sl.Alice) })
		if !strings.Contains(st, "*Profile*: "+profile) {
			t.Errorf("the thread of the channel of %s: status %q", profile, st)
		}
	}
}
